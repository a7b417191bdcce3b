"""Keyed start events on Kafka, as any client may publish them: each with its own message id and
its own workflowId, one idempotencyKey. However many, delivered however often, one execution
starts, under the id the key derives; FAIL_ON_RUNNING starts the next one once it ended."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from shared import idempotency
from shared.messaging import outgoing
from shared.models.messages import IdempotencyStrategy, StartWorkflow
from shared.models.runtime import TaskStatus
from tests.e2e.cluster import Cluster

pytestmark = [pytest.mark.integration, pytest.mark.e2e]
WAITING = {"name": "e2e_keyed", "tasks": [{"name": "w", "taskReferenceName": "w", "type": "WAIT"}]}
COPIES = 10


async def publish_starts(
    cluster: Cluster, key: str, strategy: IdempotencyStrategy, tag: str
) -> list[StartWorkflow]:
    starts = [
        StartWorkflow(
            id=f"{tag}-{n}",
            workflow_id=f"{tag}-{n}-{uuid.uuid4().hex[:6]}",
            name=WAITING["name"],
            input={"n": n},
            idempotency_key=key,
            idempotency_strategy=strategy,
        )
        for n in range(COPIES)
    ]
    await deliver(cluster, [*starts, *starts])  # and each one delivered twice
    return starts


async def deliver(cluster: Cluster, starts: list[StartWorkflow]) -> None:
    await cluster.bus.publish([outgoing(cluster.topics.workflow_start, s, s.workflow_id, {}) for s in starts])


async def test_keyed_start_events_start_one_execution(cluster: Cluster) -> None:
    await cluster.register(WAITING)
    key = uuid.uuid4().hex
    first = idempotency.keyed_workflow_id(WAITING["name"], key, 0)
    await publish_starts(cluster, key, IdempotencyStrategy.FAIL, "fail")
    [document] = (await cluster.wait_for([first], done=lambda d: "w" in d.state.tasks)).values()
    assert document.state.idempotency_key == key

    # While it runs these are refused; the signal may overtake some of them (another topic), and
    # then one of them, or of the next ten, starts the second execution: never more than one.
    during = await publish_starts(cluster, key, IdempotencyStrategy.FAIL_ON_RUNNING, "again")
    await cluster.client.signal(first, "w", {}, TaskStatus.COMPLETED)
    await cluster.wait_for([first])
    after = await publish_starts(cluster, key, IdempotencyStrategy.FAIL_ON_RUNNING, "after")
    second = idempotency.keyed_workflow_id(WAITING["name"], key, 1)
    await cluster.wait_for([second], done=lambda d: "w" in d.state.tasks)
    # the start that made the second delivered again once it ended: its own start, not a new one
    await cluster.client.signal(second, "w", {}, TaskStatus.COMPLETED)
    await cluster.wait_for([second])
    starter = (await cluster.store.load_workflow(second)).state.started_by  # type: ignore[union-attr]
    await deliver(cluster, [s for s in [*during, *after] if s.id == starter])
    await asyncio.sleep(2)
    assert idempotency.keyed_workflow_id(WAITING["name"], key, 2) not in await cluster.store.load_workflows(
        [idempotency.keyed_workflow_id(WAITING["name"], key, 2)]
    )
    # nothing started under the ids the senders chose
    chosen = [f"{tag}-{n}" for tag in ("fail", "again", "after") for n in range(COPIES)]
    running = await cluster.store.list_workflows(name=WAITING["name"], limit=100)  # any status
    assert sorted(d.workflow_id for d in running) == sorted([first, second]), chosen
    started_by = (await cluster.store.load_workflow(second)).state.started_by  # type: ignore[union-attr]
    assert started_by is not None and started_by.split("-")[0] in ("again", "after")
