"""Issue 12 point 5: a task claimed for an HTTP poller by a `cairn dev` that died before the poll
was answered is handed out again within seconds of the restart, not after its
responseTimeoutSeconds (3600 s here, Conductor's default).

The test hook CAIRN_FAULT_KILL_AFTER_CLAIM makes the api SIGKILL its own process right after it
claimed a task of the marked type for a poller: the claim is in the store, the "started" report
on the bus, and the poller never gets its answer. The engine is restarted on the same state file
without the hook, and the same poller keeps polling. The measured delay (from the kill to the
poller holding the task again) is printed; only a generous bound is asserted."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.devserver import DevServer

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

MARKED = "rehand_marked"
PLAIN = "rehand_plain"
WORKER = "rehand-poller"
RESPONSE_TIMEOUT_S = 3600
BOUND_S = 30.0


def poll(api: httpx.Client, task_type: str) -> list[dict[str, Any]]:
    response = api.get(
        f"/api/tasks/poll/batch/{task_type}", params={"workerid": WORKER, "count": 1, "timeout": 1000}
    )
    response.raise_for_status()
    tasks: list[dict[str, Any]] = response.json()
    return tasks


def complete(api: httpx.Client, task: dict[str, Any]) -> None:
    report = {
        "workflowInstanceId": task["workflowInstanceId"],
        "taskId": task["taskId"],
        "status": "COMPLETED",
        "outputData": {"by": WORKER},
        "workerId": WORKER,
    }
    assert api.post("/api/tasks", json=report).status_code == 200


def poll_until_handed(api: httpx.Client, task_type: str, within_s: float) -> dict[str, Any]:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        tasks = poll(api, task_type)
        if tasks:
            return tasks[0]
    raise AssertionError(f"no {task_type} task handed out within {within_s:.0f} s")


def test_a_task_claimed_by_a_process_that_died_is_handed_out_again_in_seconds(tmp_path: Path) -> None:
    server = DevServer(tmp_path, None, CAIRN_FAULT_KILL_AFTER_CLAIM=MARKED)
    server.start()
    task_defs = [
        {"name": name, "retryCount": 0, "responseTimeoutSeconds": RESPONSE_TIMEOUT_S}
        for name in (PLAIN, MARKED)
    ]
    workflow = {
        "name": "rehand_flow",
        "tasks": [
            {"name": PLAIN, "taskReferenceName": "plain"},
            {"name": MARKED, "taskReferenceName": "marked"},
        ],
    }
    try:
        with httpx.Client(base_url=server.url, timeout=30) as api:
            assert api.post("/api/metadata/taskdefs", json=task_defs).status_code == 200
            assert api.post("/api/metadata/workflow", json=workflow).status_code == 200
            workflow_id = api.post("/api/workflow/rehand_flow", json={}).text
            # The hook does nothing to other task types.
            complete(api, poll_until_handed(api, PLAIN, within_s=30))
            # The marked task is claimed for this poller; the process dies before answering.
            with pytest.raises(httpx.TransportError):
                poll_until_handed(api, MARKED, within_s=30)
            assert server.process.popen is not None
            assert server.process.popen.wait(30) == -9, server.process.log_tail()
            killed_at = time.monotonic()
            assert "CAIRN_FAULT_KILL_AFTER_CLAIM" in server.process.log_tail()

            del server.env["CAIRN_FAULT_KILL_AFTER_CLAIM"]
            server.start()  # same state file, same port
            task = poll_until_handed(api, MARKED, within_s=BOUND_S + 30)
            rehand_s = time.monotonic() - killed_at
            print(f"\nre-hand after the api died between claim and answer: {rehand_s:.2f} s")
            assert task["workflowInstanceId"] == workflow_id and task["workerId"] == WORKER
            assert rehand_s < BOUND_S, f"handed out again after {rehand_s:.1f} s"
            complete(api, task)
            deadline = time.monotonic() + 30
            while (status := api.get(f"/api/workflow/{workflow_id}").json()["status"]) != "COMPLETED":
                assert time.monotonic() < deadline, status
                time.sleep(0.1)
    finally:
        assert server.process.stop() == 0, server.process.log_tail()
