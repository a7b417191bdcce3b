"""The Conductor-compatible HTTP API on a real `cairn dev` process: status codes and messages
for bad input, stale results, WAIT tasks completed by reference, and exclusive task hand-out."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from shared.topics import Topics
from tests.devserver import DevServer

pytestmark = pytest.mark.integration


@pytest.fixture
async def api(dev_server: DevServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=dev_server.url, timeout=30) as client:
        yield client


def name(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


async def register(api: httpx.AsyncClient, workflow: dict[str, Any], *task_defs: dict[str, Any]) -> None:
    if task_defs:
        response = await api.post("/api/metadata/taskdefs", json=list(task_defs))
        assert response.status_code == 200, response.text
    response = await api.post("/api/metadata/workflow", json=workflow)
    assert response.status_code == 200, response.text


async def wait_for(
    api: httpx.AsyncClient, workflow_id: str, check: Any, within_s: float = 30
) -> dict[str, Any]:
    deadline = time.monotonic() + within_s
    while True:
        body: dict[str, Any] = (await api.get(f"/api/workflow/{workflow_id}")).json()
        if check(body):
            return body
        if time.monotonic() > deadline:
            raise AssertionError(f"workflow {workflow_id} never reached the expected state: {body}")
        await asyncio.sleep(0.05)


async def poll_one(api: httpx.AsyncClient, task_type: str, within_s: float = 30) -> dict[str, Any]:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        response = await api.get(f"/api/tasks/poll/batch/{task_type}", params={"count": 1, "timeout": 1000})
        assert response.status_code == 200, response.text
        if response.json():
            task: dict[str, Any] = response.json()[0]
            return task
    raise AssertionError(f"no {task_type} task to poll")


async def test_invalid_definition_is_400_naming_the_field_path(api: httpx.AsyncClient) -> None:
    bad = {
        "name": name("bad"),
        "tasks": [{"name": "a", "taskReferenceName": "a"}, {"name": "b", "type": "FORK"}],
    }
    response = await api.post("/api/metadata/workflow", json=bad)
    assert response.status_code == 400
    body = response.json()
    assert "tasks[1].type" in body["message"] and "unknown task type 'FORK'" in body["message"]
    assert {"tasks[1].type", "tasks[1].taskReferenceName"} <= {e["path"] for e in body["validationErrors"]}

    good = {"name": name("good"), "tasks": [{"name": "a", "taskReferenceName": "a"}]}
    response = await api.put("/api/metadata/workflow", json=[good, bad])
    assert response.status_code == 400 and "[1].tasks[1].type" in response.json()["message"]
    assert (await api.get(f"/api/metadata/workflow/{good['name']}")).status_code == 404, "nothing stored"

    response = await api.post("/api/metadata/taskdefs", json=[{"name": "t", "retryCount": "many"}])
    assert response.status_code == 400 and "[0].retryCount" in response.json()["message"]


async def test_unknown_names_and_ids_are_404(api: httpx.AsyncClient) -> None:
    response = await api.post("/api/workflow/no_such_workflow", json={})
    assert response.status_code == 404 and "no_such_workflow" in response.json()["message"]
    response = await api.post("/api/workflow", json={"name": "no_such_workflow"})
    assert response.status_code == 404
    assert (await api.get("/api/metadata/workflow/no_such_workflow")).status_code == 404
    assert (await api.get("/api/metadata/taskdefs/no_such_task")).status_code == 404
    assert (await api.get("/api/workflow/no-such-id")).status_code == 404
    assert (await api.get("/api/tasks/no-such-task")).status_code == 404


async def test_result_for_unknown_task_is_404(api: httpx.AsyncClient) -> None:
    workflow = {"name": name("wait"), "tasks": [{"name": "w", "taskReferenceName": "w", "type": "WAIT"}]}
    await register(api, workflow)
    workflow_id = (await api.post(f"/api/workflow/{workflow['name']}", json={})).text
    result = {"workflowInstanceId": workflow_id, "taskId": "no-such-task", "status": "COMPLETED"}
    response = await api.post("/api/tasks", json=result)
    assert response.status_code == 404 and "no-such-task" in response.json()["message"]
    response = await api.post("/api/tasks", json={**result, "workflowInstanceId": "no-such-workflow"})
    assert response.status_code == 404
    response = await api.post("/api/tasks", json={"taskId": "x", "status": "DONE"})
    assert response.status_code == 400
    assert {e["path"] for e in response.json()["validationErrors"]} >= {"workflowInstanceId", "status"}


async def test_result_for_a_retried_execution_is_409_and_changes_nothing(api: httpx.AsyncClient) -> None:
    task_type = name("flaky")
    workflow = {"name": name("retrying"), "tasks": [{"name": task_type, "taskReferenceName": "t"}]}
    await register(api, workflow, {"name": task_type, "retryCount": 2, "retryDelaySeconds": 0})
    workflow_id = (await api.post(f"/api/workflow/{workflow['name']}", json={"x": 1})).text

    first = await poll_one(api, task_type)
    assert first["workflowInstanceId"] == workflow_id and first["status"] == "IN_PROGRESS"
    failed = {
        "workflowInstanceId": workflow_id,
        "taskId": first["taskId"],
        "status": "FAILED",
        "reasonForIncompletion": "boom",
    }
    assert (await api.post("/api/tasks", json=failed)).status_code == 200
    second = await poll_one(api, task_type)
    assert second["taskId"] != first["taskId"] and second["retryCount"] == 1
    before = await wait_for(
        api, workflow_id, lambda w: [t["status"] for t in w["tasks"]] == ["FAILED", "IN_PROGRESS"]
    )

    late = {
        "workflowInstanceId": workflow_id,
        "taskId": first["taskId"],
        "status": "COMPLETED",
        "outputData": {"late": True},
    }
    response = await api.post("/api/tasks", json=late)
    assert response.status_code == 409 and "no longer current" in response.json()["message"]
    await asyncio.sleep(0.5)
    after = (await api.get(f"/api/workflow/{workflow_id}")).json()
    assert after["status"] == "RUNNING" and after["tasks"] == before["tasks"]

    done = {
        "workflowInstanceId": workflow_id,
        "taskId": second["taskId"],
        "status": "COMPLETED",
        "outputData": {"ok": 2},
    }
    assert (await api.post("/api/tasks", json=done)).status_code == 200
    finished = await wait_for(api, workflow_id, lambda w: w["status"] == "COMPLETED")
    assert finished["output"] == {"ok": 2}
    assert [t["status"] for t in finished["tasks"]] == ["FAILED", "COMPLETED"]
    response = await api.post("/api/tasks", json=done)
    assert response.status_code == 409, "a second report for a finished execution"
    task = (await api.get(f"/api/tasks/{second['taskId']}")).json()
    assert task["status"] == "COMPLETED" and task["retryCount"] == 1 and task["outputData"] == {"ok": 2}


async def test_wait_task_completed_by_reference(api: httpx.AsyncClient) -> None:
    workflow = {
        "name": name("approval"),
        "tasks": [{"name": "approve", "taskReferenceName": "approve", "type": "WAIT"}],
        "outputParameters": {"approvedBy": "${approve.output.by}"},
    }
    await register(api, workflow)
    workflow_id = (await api.post(f"/api/workflow/{workflow['name']}", json={})).text
    await wait_for(api, workflow_id, lambda w: [t["referenceTaskName"] for t in w["tasks"]] == ["approve"])
    response = await api.post(f"/api/tasks/{workflow_id}/approve/COMPLETED", json={"by": "ana"})
    assert response.status_code == 200, response.text
    finished = await wait_for(api, workflow_id, lambda w: w["status"] == "COMPLETED")
    assert finished["output"] == {"approvedBy": "ana"}
    response = await api.post(f"/api/tasks/{workflow_id}/approve/COMPLETED", json={"by": "bob"})
    assert response.status_code == 409
    response = await api.post(f"/api/tasks/{workflow_id}/nope/COMPLETED", json={})
    assert response.status_code == 404


async def test_a_polled_worker_task_completed_by_reference_carries_its_started_report(
    api: httpx.AsyncClient, dev_server: DevServer
) -> None:
    """Completing a SIMPLE task by reference is the worker's report made by hand: it goes out
    right after the hand-out's started report, which `cairn dev` holds back for the task's result
    (services/api/started.py), so the decider applies the start and the end in order."""
    task_type = name("by_hand")
    workflow = {"name": name("by_hand_flow"), "tasks": [{"name": task_type, "taskReferenceName": "t"}]}
    await register(api, workflow, {"name": task_type})
    workflow_id = (await api.post(f"/api/workflow/{workflow['name']}", json={})).text
    polled = await poll_one(api, task_type)
    response = await api.post(
        f"/api/tasks/{workflow_id}/t/COMPLETED", json={"done": True}, params={"workerid": "ana"}
    )
    assert response.status_code == 200 and response.text == polled["taskId"], response.text
    finished = await wait_for(api, workflow_id, lambda w: w["status"] == "COMPLETED")
    [task] = finished["tasks"]
    assert task["status"] == "COMPLETED" and task["outputData"] == {"done": True}
    assert task["workerId"] == "ana"
    with sqlite3.connect(dev_server.db) as connection:
        reports = [
            json.loads(value)
            for (value,) in connection.execute(
                "SELECT value FROM bus_messages WHERE topic = ? AND key = ? ORDER BY offset",
                (Topics().task_result, workflow_id),
            )
        ]
    assert [(r["status"], r["id"].split(":")[0]) for r in reports] == [
        ("IN_PROGRESS", "started"),
        ("COMPLETED", "result"),
    ]


async def test_terminate_search_running_and_remove(api: httpx.AsyncClient) -> None:
    workflow = {"name": name("held"), "tasks": [{"name": "w", "taskReferenceName": "w", "type": "WAIT"}]}
    await register(api, workflow)
    ids = [(await api.post(f"/api/workflow/{workflow['name']}", json={"i": i})).text for i in range(3)]
    running = (await api.get(f"/api/workflow/running/{workflow['name']}")).json()
    assert sorted(running) == sorted(ids)
    response = await api.delete(f"/api/workflow/{ids[0]}/remove")
    assert response.status_code == 409, "a running workflow is not removed"
    assert (await api.delete(f"/api/workflow/{ids[0]}", params={"reason": "test"})).status_code == 200
    terminated = await wait_for(api, ids[0], lambda w: w["status"] == "TERMINATED")
    assert terminated["reasonForIncompletion"] == "test"
    found = (
        await api.get("/api/workflow/search", params={"workflowType": workflow["name"], "status": "RUNNING"})
    ).json()
    assert sorted(r["workflowId"] for r in found["results"]) == sorted(ids[1:])
    assert (await api.delete(f"/api/workflow/{ids[0]}/remove")).status_code == 200
    assert (await api.get(f"/api/workflow/{ids[0]}")).status_code == 404


async def test_running_workflows_of_a_workflow_named_like_a_route_segment(api: httpx.AsyncClient) -> None:
    """GET /api/workflow/running/history lists the running workflows named "history", as
    Conductor's literal segment wins; it was once taken for the history of a workflow "running"."""
    workflow = {"name": "history", "tasks": [{"name": "w", "taskReferenceName": "w", "type": "WAIT"}]}
    await register(api, workflow)
    started = (await api.post("/api/workflow/history", json={})).text
    running = await api.get("/api/workflow/running/history")
    assert running.status_code == 200 and started in running.json()


async def test_concurrent_long_pollers_never_get_the_same_execution(dev_server: DevServer) -> None:
    task_type = name("shared")
    count = 120
    workflow = {
        "name": name("fanout"),
        "tasks": [
            {"name": task_type, "taskReferenceName": "t", "inputParameters": {"i": "${workflow.input.i}"}}
        ],
    }
    received: dict[str, list[str]] = {"a": [], "b": [], "c": []}

    async def poller(who: str, stop: asyncio.Event) -> None:
        async with httpx.AsyncClient(base_url=dev_server.url, timeout=30) as client:
            while not stop.is_set():
                response = await client.get(
                    f"/api/tasks/poll/batch/{task_type}", params={"count": 7, "timeout": 500, "workerid": who}
                )
                assert response.status_code == 200, response.text
                for task in response.json():
                    received[who].append(task["taskId"])
                    result = {
                        "workflowInstanceId": task["workflowInstanceId"],
                        "taskId": task["taskId"],
                        "status": "COMPLETED",
                        "outputData": {"by": who, "i": task["inputData"]["i"]},
                    }
                    answer = await client.post("/api/tasks", json=result)
                    assert answer.status_code in (200, 409), answer.text

    async with httpx.AsyncClient(base_url=dev_server.url, timeout=30) as api:
        await register(api, workflow)
        stop = asyncio.Event()
        pollers = [asyncio.create_task(poller(who, stop)) for who in received]
        ids = await asyncio.gather(
            *(api.post(f"/api/workflow/{workflow['name']}", json={"i": i}) for i in range(count))
        )
        workflow_ids = [response.text for response in ids]
        try:
            for workflow_id in workflow_ids:
                await wait_for(api, workflow_id, lambda w: w["status"] == "COMPLETED", within_s=120)
        finally:
            stop.set()
            await asyncio.gather(*pollers)
    everything = [task_id for tasks in received.values() for task_id in tasks]
    assert len(everything) == len(set(everything)) == count, "an execution was handed out twice"
    assert sum(1 for tasks in received.values() if tasks) >= 2, "the pollers did not compete"


async def test_a_dispatch_delivered_twice_is_handed_out_once(
    dev_server: DevServer, api: httpx.AsyncClient
) -> None:
    """The bus may deliver a task message again (redelivery after a crash, a rebalance). The
    store claim keeps a second poller from receiving an execution another poller holds."""
    from cairn.http_worker import task_from_conductor
    from shared.adapters.embedded_bus import EmbeddedBus
    from shared.messaging import outgoing
    from shared.topics import Topics

    task_type = name("twice")
    workflow = {"name": name("held_task"), "tasks": [{"name": task_type, "taskReferenceName": "t"}]}
    await register(api, workflow)
    workflow_id = (await api.post(f"/api/workflow/{workflow['name']}", json={})).text
    held = await poll_one(api, task_type)  # poller A holds it and has not reported yet

    bus = EmbeddedBus(str(dev_server.db))  # another process on the same state file
    try:
        again = task_from_conductor(held)
        await bus.publish([outgoing(Topics().tasks(task_type), again, workflow_id)])
    finally:
        await bus.stop()
    response = await api.get(f"/api/tasks/poll/batch/{task_type}", params={"count": 5, "timeout": 3000})
    assert response.status_code == 200 and response.json() == [], "the held execution was handed out again"

    done = {"workflowInstanceId": workflow_id, "taskId": held["taskId"], "status": "COMPLETED"}
    assert (await api.post("/api/tasks", json=done)).status_code == 200
    await wait_for(api, workflow_id, lambda w: w["status"] == "COMPLETED")


async def test_update_v2_reports_and_hands_over_the_next_task(api: httpx.AsyncClient) -> None:
    task_type = name("v2")
    workflow = {
        "name": name("v2flow"),
        "tasks": [{"name": task_type, "taskReferenceName": "t"}],
        "outputParameters": {"got": "${t.output.got}"},
    }
    await register(api, workflow)
    ids = [(await api.post(f"/api/workflow/{workflow['name']}", json={})).text for _ in range(2)]
    first = await poll_one(api, task_type)
    await asyncio.sleep(0.3)  # let the second dispatch reach the api
    report = {
        "workflowInstanceId": first["workflowInstanceId"],
        "taskId": first["taskId"],
        "status": "COMPLETED",
        "outputData": {"got": 1},
        "workerId": "w",
    }
    response = await api.post("/api/tasks/update-v2", json=report)
    assert response.status_code == 200, response.text
    second = response.json()
    assert second["taskType"] == task_type and second["workflowInstanceId"] != first["workflowInstanceId"]
    report = {
        "workflowInstanceId": second["workflowInstanceId"],
        "taskId": second["taskId"],
        "status": "COMPLETED",
        "outputData": {"got": 2},
        "workerId": "w",
    }
    response = await api.post("/api/tasks/update-v2", json=report)
    assert response.status_code == 204
    outputs = [(await wait_for(api, i, lambda w: w["status"] == "COMPLETED"))["output"]["got"] for i in ids]
    assert sorted(outputs) == [1, 2]
    response = await api.post("/api/tasks/update-v2", json=report)
    assert response.status_code == 409, "the same answers as POST /api/tasks"


async def test_polling_a_task_type_that_cannot_be_a_topic_is_400(api: httpx.AsyncClient) -> None:
    response = await api.get("/api/tasks/poll/batch/bad type!", params={"timeout": 0})
    assert response.status_code == 400 and "taskType" in response.json()["message"]
    assert (await api.get("/health")).status_code == 200


async def test_failure_workflow_runs_when_a_workflow_fails(api: httpx.AsyncClient) -> None:
    task_type = name("doomed")
    cleanup = {
        "name": name("cleanup"),
        "tasks": [{"name": "w", "taskReferenceName": "w", "type": "WAIT"}],
        "outputParameters": {"failed": "${workflow.input.workflowId}"},
    }
    workflow = {
        "name": name("payment"),
        "failureWorkflow": cleanup["name"],
        "tasks": [{"name": task_type, "taskReferenceName": "charge"}],
    }
    await register(api, cleanup)
    await register(api, workflow, {"name": task_type, "retryCount": 0})
    workflow_id = (await api.post(f"/api/workflow/{workflow['name']}", json={"amount": 5})).text
    task = await poll_one(api, task_type)
    terminal = {
        "workflowInstanceId": workflow_id,
        "taskId": task["taskId"],
        "status": "FAILED_WITH_TERMINAL_ERROR",
        "reasonForIncompletion": "card declined",
    }
    assert (await api.post("/api/tasks", json=terminal)).status_code == 200
    failed = await wait_for(api, workflow_id, lambda w: w["status"] == "FAILED")
    failure_id = failed["output"]["conductor.failure_workflow"]
    handler = await wait_for(api, failure_id, lambda w: w["status"] == "RUNNING" and w["tasks"])
    assert handler["workflowName"] == cleanup["name"]
    assert (
        handler["input"]["workflowId"] == workflow_id
        and handler["input"]["failedReferenceTaskName"] == "charge"
    )
    assert "card declined" in handler["input"]["reason"] and handler["input"]["input"] == {"amount": 5}
