"""The HTTP worker on a real `cairn dev`: it reports through Conductor's update-v2, and a task
that answer brings back runs in the same slot without another poll."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from cairn.http_api import ApiResponse, ApiSession
from cairn.http_worker import HttpWorkerRunner
from cairn.worker import WorkerSpec
from tests.devserver import DevServer
from tests.integration.test_api import wait_for

pytestmark = pytest.mark.integration

WORKFLOWS = 12


@pytest.fixture
async def api(dev_server: DevServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=dev_server.url, timeout=30) as client:
        yield client


async def test_reports_bring_back_the_next_task_so_a_slot_polls_once(
    api: httpx.AsyncClient, dev_server: DevServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    task_type = f"chained_{uuid.uuid4().hex[:8]}"
    task = {"name": task_type, "taskReferenceName": "t", "inputParameters": {"i": "${workflow.input.i}"}}
    definition = {"name": f"wf_{task_type}", "tasks": [task]}
    task_def = {"name": task_type, "retryCount": 0}
    assert (await api.post("/api/metadata/taskdefs", json=[task_def])).status_code == 200
    assert (await api.post("/api/metadata/workflow", json=definition)).status_code == 200
    ids = [
        (await api.post(f"/api/workflow/{definition['name']}", json={"i": i})).text for i in range(WORKFLOWS)
    ]
    for workflow_id in ids:  # every task is queued before the worker starts
        await wait_for(api, workflow_id, lambda w: bool(w["tasks"]))

    paths: Counter[str] = Counter()
    real_request = ApiSession.request

    async def counting(self: ApiSession, method: str, path: str, **kwargs: Any) -> ApiResponse:
        paths[path.rsplit("/", 1)[0] if "/poll/" in path else path] += 1
        return await real_request(self, method, path, **kwargs)

    monkeypatch.setattr(ApiSession, "request", counting)
    ran: list[int] = []

    def work(task_input: dict[str, Any]) -> dict[str, Any]:
        ran.append(task_input["i"])
        return {"double": task_input["i"] * 2}

    stop = asyncio.Event()
    runner = HttpWorkerRunner(dev_server.url, [WorkerSpec(task_type, work)], concurrency=1, long_poll_ms=500)
    job = asyncio.create_task(runner.run(stop))
    try:
        for i, workflow_id in enumerate(ids):
            done = await wait_for(api, workflow_id, lambda w: w["status"] == "COMPLETED")
            assert done["tasks"][0]["outputData"] == {"double": i * 2}
    finally:
        stop.set()
        await asyncio.wait_for(job, 30)
    assert sorted(ran) == list(range(WORKFLOWS)), "each task ran once"
    assert paths["/api/tasks/update-v2"] == WORKFLOWS, paths
    polls = paths["/api/tasks/poll/batch"]
    assert polls < WORKFLOWS / 2, f"the reports should have carried most next tasks: {paths}"


async def test_a_report_answered_by_fastapis_route_hands_the_next_task_out_once(
    api: httpx.AsyncClient,
) -> None:
    """A report with a JSON content type of its own (`application/vnd.cairn+json`) is answered by
    FastAPI's route, not the fast one (services/api/fast_routes.py); the task it brings back is
    handed out once: the route still sees the client's connection, not a made-up hang-up that
    would put the task back in the queue while sending it."""
    task_type = f"replayed_{uuid.uuid4().hex[:8]}"
    definition = {"name": f"wf_{task_type}", "tasks": [{"name": task_type, "taskReferenceName": "t"}]}
    assert (await api.post("/api/metadata/taskdefs", json=[{"name": task_type}])).status_code == 200
    assert (await api.post("/api/metadata/workflow", json=definition)).status_code == 200
    ids = [(await api.post(f"/api/workflow/{definition['name']}", json={})).text for _ in range(2)]
    for workflow_id in ids:
        await wait_for(api, workflow_id, lambda w: bool(w["tasks"]))
    first = (
        await api.get(f"/api/tasks/poll/batch/{task_type}", params={"count": 1, "timeout": 1000})
    ).json()[0]
    report = {
        "workflowInstanceId": first["workflowInstanceId"],
        "taskId": first["taskId"],
        "status": "COMPLETED",
        "workerId": "w",
    }
    answer = await api.post(
        "/api/tasks/update-v2",
        content=json.dumps(report).encode(),
        headers={"content-type": "application/vnd.cairn+json"},
    )
    assert answer.status_code == 200, answer.text
    second = answer.json()
    assert second["taskId"] != first["taskId"] and second["workflowInstanceId"] in ids
    again = await api.get(f"/api/tasks/poll/batch/{task_type}", params={"count": 1, "timeout": 500})
    assert again.json() == [], "the task brought back by the report was handed out again"
