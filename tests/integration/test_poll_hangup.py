"""A long-poll whose worker hung up (its process died mid-poll) is never handed a task: the
task goes to a live poller at once instead of waiting out its response timeout."""

from __future__ import annotations

import asyncio
import socket

import httpx
import pytest

from tests.devserver import DevServer

pytestmark = pytest.mark.integration


def open_long_poll(port: int, task_type: str, worker_id: str) -> socket.socket:
    """Send a 20 s long-poll and return the socket without reading the answer."""
    connection = socket.create_connection(("127.0.0.1", port))
    path = f"/api/tasks/poll/batch/{task_type}?workerid={worker_id}&count=1&timeout=20000"
    connection.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    return connection


async def test_a_task_is_not_handed_to_a_poller_that_hung_up(dev_server: DevServer) -> None:
    async with httpx.AsyncClient(base_url=dev_server.url, timeout=30) as api:
        task_def = {
            "name": "hangup_task",
            "retryCount": 0,
            "responseTimeoutSeconds": 60,
            "timeoutSeconds": 120,
        }
        workflow = {"name": "hangup_flow", "tasks": [{"name": "hangup_task", "taskReferenceName": "t"}]}
        (await api.post("/api/metadata/taskdefs", json=[task_def])).raise_for_status()
        (await api.post("/api/metadata/workflow", json=workflow)).raise_for_status()
        # Join the task type's queue first, so the dead poll below is really waiting in it.
        (await api.get("/api/tasks/poll/batch/hangup_task", params={"timeout": 100})).raise_for_status()
        dead = open_long_poll(dev_server.port, "hangup_task", "dead-worker")
        await asyncio.sleep(0.5)
        dead.close()  # the worker process is gone; its poll is still parked in the api
        await asyncio.sleep(0.5)
        workflow_id = (await api.post("/api/workflow/hangup_flow", json={})).text
        await asyncio.sleep(1.5)  # the task arrives while only the dead poll is parked
        polled = await api.get(
            "/api/tasks/poll/batch/hangup_task",
            params={"workerid": "live-worker", "count": 1, "timeout": 5000},
        )
        assert [t["workflowInstanceId"] for t in polled.json()] == [workflow_id], "handed to the dead poller"
        [task] = polled.json()
        assert task["workerId"] == "live-worker" and task["pollCount"] == 1
