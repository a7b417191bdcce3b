"""Event handlers on `cairn dev` (embedded bus): the `/api/event` API, and the events service
acting on what EVENT tasks publish — to a `kafka:` topic (a start_workflow handler) and to a
`conductor` queue (a complete_task handler finishing another workflow's WAIT)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.devserver import DevServer

pytestmark = pytest.mark.integration
WITHIN_S = 30.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    dev = DevServer(Path(tmp_path_factory.mktemp("events")), None, CAIRN_EVENTS_REFRESH_S="0.3")
    dev.start()
    yield dev
    assert dev.process.stop() == 0, dev.process.log_tail()


@pytest.fixture(scope="module")
def http(server: DevServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=30) as client:
        yield client


def handler(name: str, event: str, *actions: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"name": name, "event": event, "actions": list(actions), "active": True, **extra}


def register(http: httpx.Client, *definitions: dict[str, Any]) -> None:
    for definition in definitions:
        http.post("/api/metadata/workflow", json=definition).raise_for_status()


def until(http: httpx.Client, path: str, test: Any, **params: Any) -> Any:
    deadline = time.monotonic() + WITHIN_S
    while True:
        answer = http.get(path, params=params)
        if answer.status_code == 200 and test(answer.json()):
            return answer.json()
        assert time.monotonic() < deadline, f"{path}: {answer.status_code} {answer.text[:500]}"
        time.sleep(0.1)


def test_the_event_handler_api(http: httpx.Client) -> None:
    name = f"h_{uuid.uuid4().hex[:8]}"
    body = handler(name, "kafka:orders", {"action": "start_workflow", "start_workflow": {"name": "x"}})
    assert http.post("/api/event", json=body).status_code == 200
    again = http.post("/api/event", json=body)
    assert (
        again.status_code == 409
        and f"EventHandler with name {name} already exists!" in again.json()["message"]
    )
    assert http.put("/api/event", json={**body, "active": False}).status_code == 200
    listed = [h for h in http.get("/api/event").json() if h["name"] == name]
    assert listed and listed[0]["active"] is False and listed[0]["actions"][0]["action"] == "start_workflow"
    assert [
        h["name"] for h in http.get("/api/event/kafka:orders", params={"activeOnly": "false"}).json()
    ] == [name]
    assert http.get("/api/event/kafka:orders").json() == []  # activeOnly by default
    assert http.put("/api/event", json={**body, "name": "nobody"}).status_code == 404
    assert http.delete(f"/api/event/{name}").status_code == 200
    assert http.delete(f"/api/event/{name}").status_code == 404
    for bad, named in (
        ({**body, "event": "sqs:queue"}, "event"),
        ({**body, "actions": []}, "actions"),
        (
            {**body, "actions": [{"action": "complete_task", "complete_task": {"output": {}}}]},
            "actions[0].complete_task",
        ),
        ({**body, "actions": [{"action": "launch_rocket"}]}, "actions.0.action"),
        ({**body, "condition": "$.x ==", "evaluatorType": "javascript"}, "condition"),
    ):
        answer = http.post("/api/event", json=bad)
        assert answer.status_code == 400 and any(
            p["path"] == named for p in answer.json()["validationErrors"]
        ), (named, answer.text)


def test_an_event_on_a_kafka_topic_starts_a_workflow_once(http: httpx.Client) -> None:
    tag = uuid.uuid4().hex[:8]
    topic = f"orders_{tag}"
    target = {
        "name": f"on_order_{tag}",
        "version": 1,
        "tasks": [
            {
                "name": "set",
                "taskReferenceName": "set",
                "type": "SET_VARIABLE",
                "inputParameters": {"o": "${workflow.input.orderId}"},
            }
        ],
        "outputParameters": {
            "order": "${workflow.input.orderId}",
        },
    }
    emitter = {
        "name": f"emit_{tag}",
        "version": 1,
        "tasks": [
            {
                "name": "emit",
                "taskReferenceName": "emit",
                "type": "EVENT",
                "sink": f"kafka:{topic}",
                "inputParameters": {"orderId": "${workflow.input.orderId}", "kind": "${workflow.input.kind}"},
            }
        ],
    }
    register(http, target, emitter)
    body = handler(
        f"start_{tag}",
        f"kafka:{topic}",
        {
            "action": "start_workflow",
            "start_workflow": {
                "name": target["name"],
                "input": {"orderId": "${orderId}"},
                "correlationId": "order-${orderId}",
            },
        },
        condition="$.kind == 'new'",
    )
    http.post("/api/event", json=body).raise_for_status()
    time.sleep(1.0)  # the events service picks the handler up within CAIRN_EVENTS_REFRESH_S
    for kind, order in (("new", "o-1"), ("old", "o-2")):
        http.post(
            f"/api/workflow/{emitter['name']}", json={"orderId": order, "kind": kind}
        ).raise_for_status()
    until(
        http,
        "/api/workflow/search",
        lambda body: body["totalHits"] >= 1 and body["results"][0]["status"] == "COMPLETED",
        query=f"workflowType = {target['name']}",
    )
    time.sleep(1.0)  # the second event (condition false) starts nothing
    found = http.get("/api/workflow/search", params={"query": f"workflowType = {target['name']}"}).json()
    assert found["totalHits"] == 1
    started = http.get(f"/api/workflow/{found['results'][0]['workflowId']}").json()
    assert started["output"] == {"order": "o-1"}
    assert started["correlationId"] == "order-o-1"
    assert started["input"]["conductor.event.name"] == f"kafka:{topic}"


def test_an_event_on_a_conductor_queue_completes_a_waiting_task(http: httpx.Client) -> None:
    tag = uuid.uuid4().hex[:8]
    waiting = {
        "name": f"waiting_{tag}",
        "version": 1,
        "tasks": [{"name": "approval", "taskReferenceName": "approval", "type": "WAIT"}],
        "outputParameters": {"approved": "${approval.output.approved}"},
    }
    approver = {
        "name": f"approver_{tag}",
        "version": 1,
        "tasks": [
            {
                "name": "tell",
                "taskReferenceName": "tell",
                "type": "EVENT",
                "sink": "conductor",
                "inputParameters": {"target": "${workflow.input.target}", "approved": True},
            }
        ],
    }
    register(http, waiting, approver)
    queue = f"conductor:{approver['name']}:tell"
    body = handler(
        f"approve_{tag}",
        queue,
        {
            "action": "complete_task",
            "complete_task": {
                "workflowId": "${target}",
                "taskRefName": "approval",
                "output": {"approved": "${approved}"},
            },
        },
    )
    http.post("/api/event", json=body).raise_for_status()
    time.sleep(1.0)
    target = http.post(f"/api/workflow/{waiting['name']}", json={}).text
    told = http.post(f"/api/workflow/{approver['name']}", json={"target": target}).text
    done = until(http, f"/api/workflow/{target}", lambda w: w["status"] == "COMPLETED")
    assert done["output"] == {"approved": True}
    assert done["tasks"][0]["outputData"]["conductor.event.name"] == queue
    emitted = http.get(f"/api/workflow/{told}").json()
    assert emitted["tasks"][0]["outputData"]["event_produced"] == queue
