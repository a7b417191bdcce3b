"""Event handlers on Kafka + MongoDB: messages a user's application publishes to its own topic
start a workflow and complete its WAIT task; a message delivered twice acts once; a malformed one
is dead-lettered with the reason while the partition goes on."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from shared.models.events import EventHandler
from shared.models.runtime import WorkflowStatus
from shared.ports.bus import Outgoing
from shared.search import SearchRequest, parse_query
from tests.e2e.cluster import Cluster, assert_stopped_cleanly

pytestmark = [pytest.mark.integration, pytest.mark.e2e]
ORDER_FLOW = {
    "name": "e2e_order_flow",
    "tasks": [{"name": "approval", "taskReferenceName": "approval", "type": "WAIT"}],
    "outputParameters": {"order": "${workflow.input.orderId}", "approvedBy": "${approval.output.by}"},
}


@pytest.fixture
async def cluster(
    kafka_bootstrap: str, mongo_url: str, unique: str, tmp_path: Path
) -> AsyncIterator[Cluster]:
    cluster = Cluster(kafka_bootstrap, mongo_url, unique, tmp_path, CAIRN_EVENTS_REFRESH_S="0.5")
    del cluster.processes["worker"]
    cluster.add("events", ["run", "events"])
    await cluster.start()
    yield cluster
    assert_stopped_cleanly(await cluster.stop(), cluster.diagnostics)


def message(topic: str, payload: Any, message_id: str | None = None) -> Outgoing:
    value = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    return Outgoing(topic=topic, value=value, key="order", headers={"id": message_id} if message_id else {})


async def started(cluster: Cluster, within_s: float = 60) -> list[str]:
    deadline = time.monotonic() + within_s
    request = SearchRequest(
        parse_query(f"workflowType = {ORDER_FLOW['name']}"), None, (("startTime", False),), 0, 100
    )
    while True:
        total, documents = await cluster.store.search_workflows(request)
        if total or time.monotonic() > deadline:
            return [d.workflow_id for d in documents]
        await asyncio.sleep(0.2)


async def test_events_on_a_users_topic_start_and_complete_a_workflow(cluster: Cluster) -> None:
    await cluster.register(ORDER_FLOW)
    topic = f"shop.orders.{uuid.uuid4().hex[:6]}"
    for handler in (
        {
            "name": "start_orders",
            "event": f"kafka:{topic}",
            "condition": "$.kind == 'placed'",
            "actions": [
                {
                    "action": "start_workflow",
                    "start_workflow": {
                        "name": ORDER_FLOW["name"],
                        "input": {"orderId": "${orderId}"},
                        "correlationId": "${orderId}",
                    },
                }
            ],
            "active": True,
        },
        {
            "name": "approve_orders",
            "event": f"kafka:{topic}",
            "condition": "$.kind == 'approved'",
            "actions": [
                {
                    "action": "complete_task",
                    "complete_task": {
                        "workflowId": "${workflowId}",
                        "taskRefName": "approval",
                        "output": {"by": "${by}"},
                    },
                }
            ],
            "active": True,
        },
        {
            "name": "cancel_orders",
            "event": f"kafka:{topic}",
            "condition": "$.kind == 'cancel'",
            "actions": [
                {"action": "terminate_workflow", "terminate_workflow": {"workflowId": "${workflowId}"}}
            ],
            "active": True,
        },
    ):
        assert await cluster.store.put_event_handler(EventHandler.model_validate(handler), create=True)
    await asyncio.sleep(2)  # the events service joins the topic's group (refresh 0.5 s)
    placed = message(topic, {"kind": "placed", "orderId": "o-42"}, "placed-o-42")
    await cluster.bus.publish([placed, message(topic, b"{not json"), placed])  # delivered twice
    [workflow_id] = await started(cluster)
    # an id no workflow can have: that message is dead-lettered, the partition goes on
    cancel = message(topic, {"kind": "cancel", "workflowId": "no such/id"}, "cancel-bad")
    approve = message(topic, {"kind": "approved", "workflowId": workflow_id, "by": "ana"}, "ok-o-42")
    await cluster.bus.publish([cancel, approve])
    [done] = (await cluster.wait_for([workflow_id], within_s=60)).values()
    assert done.state.status is WorkflowStatus.COMPLETED
    assert done.state.output == {"order": "o-42", "approvedBy": "ana"}
    assert done.state.correlation_id == "o-42"
    await asyncio.sleep(1)
    assert await started(cluster, within_s=0) == [workflow_id]  # the second delivery started nothing
    letters = await cluster.bus.peek(cluster.topics.dead_letter, 20)
    records = [json.loads(letter.value) for letter in letters]
    reasons = [record["reason"] for record in records if record["topic"] == topic]
    assert any("event payload is not JSON" in reason for reason in reasons), reasons
    assert any("cancel_orders, action 0 (terminate_workflow)" in reason for reason in reasons), reasons
