"""Issue 12 point 1 and 3 over real HTTP on a real `cairn dev`: every bad input of the issue's
list gets a 4xx in Conductor's error body naming the field, nothing of it is stored, and a trickle
of normal workflows running all along completes with exact outputs.

The trickle's workflows are server-side only (INLINE then JSON_JQ_TRANSFORM), so no worker is
involved and their end-to-end time is the engine's; the figures are printed, not asserted (but a
generous bound catches a wedged partition)."""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tests.devserver import DevServer
from tests.trickle import TRICKLE, Trickle

pytestmark = pytest.mark.integration


@pytest.fixture
async def api(dev_server: DevServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=dev_server.url, timeout=30) as client:
        yield client


def assert_error_body(response: httpx.Response, status: int, *words: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json"), response.text
    body: dict[str, Any] = response.json()
    assert body["status"] == status and set(body) >= {"code", "message", "retryable", "validationErrors"}
    text = body["message"] + " ".join(e["path"] + " " + e["message"] for e in body["validationErrors"])
    for word in words:
        assert word in text, f"{word!r} not in {text!r}"
    assert "Traceback" not in response.text
    return body


def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {"leaf": 1}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


async def stored_count(api: httpx.AsyncClient, workflow_type: str) -> int:
    response = await api.get("/api/workflow/search", params={"workflowType": workflow_type, "size": 100})
    assert response.status_code == 200, response.text
    hits: int = response.json()["totalHits"]
    return hits


async def bad_inputs(api: httpx.AsyncClient) -> None:
    """The issue's list, each one refused the way it says, nothing of it stored."""
    unique = uuid.uuid4().hex[:8]
    # timeouts of 2**63: refused at registration, naming the field
    response = await api.post(
        "/api/metadata/taskdefs",
        json=[{"name": f"big_{unique}", "timeoutSeconds": 2**63, "responseTimeoutSeconds": 2**63}],
    )
    assert_error_body(response, 400, "[0].timeoutSeconds", "[0].responseTimeoutSeconds", "2147483647")
    assert (await api.get(f"/api/metadata/taskdefs/big_{unique}")).status_code == 404

    name = f"hostile_{unique}"
    workflow = {"name": name, "tasks": [{"name": "never_polled", "taskReferenceName": "t"}]}
    assert (await api.post("/api/metadata/workflow", json=workflow)).status_code == 200

    # an input nested 200 deep
    response = await api.post("/api/workflow", json={"name": name, "input": nested(200)})
    assert_error_body(response, 400, "input.a.a", "nested more than 32 levels", "CAIRN_MAX_PAYLOAD_DEPTH")
    # the same in the plain-body start
    response = await api.post(f"/api/workflow/{name}", json=nested(200))
    assert_error_body(response, 400, "input.a.a")
    # ids no URL can reach
    for bad_id in ["a/b", "..", "../../etc/passwd", "x\x00y", "x\ny", "x" * 5000]:
        response = await api.post("/api/workflow", json={"name": name, "workflowId": bad_id})
        body = assert_error_body(response, 400, "workflowId", "not a valid workflow id")
        assert "x" * 100 not in body["message"], "the error must not echo a 5,000-character id back"
    # definition names with / or NUL
    for bad_name in [f"a/{unique}", f"nul\x00{unique}"]:
        response = await api.post(
            "/api/metadata/workflow",
            json={"name": bad_name, "tasks": [{"name": "t", "taskReferenceName": "t"}]},
        )
        assert_error_body(response, 400, "name", "not a valid name")
    # NaN and 1e400 (JSON text Python would read as nan and inf)
    for number in ("NaN", "1e400", "-Infinity"):
        response = await api.post(
            "/api/workflow",
            content=f'{{"name": "{name}", "input": {{"x": [1, {number}]}}}}'.encode(),
            headers={"content-type": "application/json"},
        )
        assert_error_body(response, 400, "input.x[1]", "not a JSON number")
    # a body nested past Python's stack, a body too large, malformed JSON
    response = await api.post(
        "/api/workflow", content=b"[" * 100_000, headers={"content-type": "application/json"}
    )
    assert_error_body(response, 400)
    response = await api.post(
        "/api/workflow",
        content=b'{"name": "' + b"x" * (9 * 1024 * 1024) + b'"}',
        headers={"content-type": "application/json"},
    )
    assert_error_body(response, 413, "CAIRN_API_MAX_REQUEST_BYTES")
    response = await api.post(
        "/api/workflow", content=b'{"name": ', headers={"content-type": "application/json"}
    )
    assert_error_body(response, 400, "JSON")
    # an input larger than a payload may be
    response = await api.post("/api/workflow", json={"name": name, "input": {"blob": "x" * 600_000}})
    assert_error_body(response, 400, "input", "CAIRN_MAX_PAYLOAD_BYTES")
    # a signal too deep for its WAIT (the workflow need not even exist: refused first)
    response = await api.post(f"/api/tasks/{unique}/wait/COMPLETED", json=nested(50))
    assert_error_body(response, 400, "nested more than 32 levels")
    # a path no route has, a method no route takes: Conductor's body, not FastAPI's
    assert_error_body(await api.get("/api/nothing/here"), 404, "no such endpoint")
    assert_error_body(await api.put("/api/workflow/search"), 405, "not allowed")
    # unreachable ids asked for by path are a 404, never a 500
    assert_error_body(await api.get("/api/workflow/" + "x" * 5000), 404, "no workflow")
    assert_error_body(await api.delete("/api/workflow/%00/remove"), 404, "no workflow")

    assert await stored_count(api, name) == 0, "a refused start was stored"


async def test_bad_input_is_refused_whole_while_normal_work_goes_on(api: httpx.AsyncClient) -> None:
    assert (await api.post("/api/metadata/workflow", json=TRICKLE)).status_code == 200
    trickle = Trickle(api)
    running = asyncio.create_task(trickle.run())
    await asyncio.sleep(1)  # the trickle is under way before the first bad input
    for _ in range(3):
        await bad_inputs(api)
    await asyncio.sleep(0.5)
    took = await trickle.finish()
    running.cancel()
    print(
        f"\ntrickle alongside bad input: {len(took)} workflows, "
        f"p50 {statistics.median(took) * 1000:.0f} ms, max {max(took) * 1000:.0f} ms"
    )
    assert len(took) >= 10
    assert max(took) < 10, "a normal workflow waited behind bad input"


async def test_search_and_reads_work_after_every_refusal(api: httpx.AsyncClient) -> None:
    """The issue's 200-deep start made search and `cairn ls` fail whenever it was in the page."""
    await bad_inputs(api)
    response = await api.get("/api/workflow/search", params={"size": 1000})
    assert response.status_code == 200, response.text
    for summary in response.json()["results"][:20]:
        assert (await api.get(f"/api/workflow/{summary['workflowId']}")).status_code == 200


async def test_a_worker_result_past_the_limits_fails_its_task_with_the_reason(api: httpx.AsyncClient) -> None:
    unique = uuid.uuid4().hex[:8]
    task_type = f"hostile_worker_{unique}"
    await api.post("/api/metadata/taskdefs", json=[{"name": task_type, "retryCount": 2}])
    workflow = {"name": f"hostile_result_{unique}", "tasks": [{"name": task_type, "taskReferenceName": "w"}]}
    assert (await api.post("/api/metadata/workflow", json=workflow)).status_code == 200
    workflow_id = (await api.post("/api/workflow", json={"name": workflow["name"]})).text
    deadline = time.monotonic() + 30
    polled: list[dict[str, Any]] = []
    while not polled and time.monotonic() < deadline:
        polled = (await api.get(f"/api/tasks/poll/batch/{task_type}", params={"timeout": 1000})).json()
    [task] = polled
    response = await api.post(
        "/api/tasks",
        json={
            "workflowInstanceId": workflow_id,
            "taskId": task["taskId"],
            "status": "COMPLETED",
            "outputData": {"deep": nested(100)},
        },
    )
    assert response.status_code == 200, response.text  # as Conductor: the update is taken, the task fails
    while time.monotonic() < deadline:
        body = (await api.get(f"/api/workflow/{workflow_id}")).json()
        if body["status"] != "RUNNING":
            break
        await asyncio.sleep(0.05)
    assert body["status"] == "FAILED", body
    [failed] = body["tasks"]  # FAILED_WITH_TERMINAL_ERROR: no retry of a result that cannot fit
    assert failed["status"] == "FAILED_WITH_TERMINAL_ERROR"
    assert "the worker's result was refused: outputData.deep" in failed["reasonForIncompletion"]
    assert failed["outputData"] == {}
