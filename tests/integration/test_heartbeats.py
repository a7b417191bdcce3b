"""Worker heartbeats on a real `cairn dev`: a task that runs three times its TaskDef's
responseTimeoutSeconds completes in one execution when its HTTP worker beats (automatically, or by
calling `cairn.heartbeat()`), and is TIMED_OUT and retried when it does not; a worker returning
`InProgress(n)` gets the same task back n seconds later. The first tests need no server: they pin
down when beats are sent and that they stop with the function."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from cairn import InProgress, heartbeat
from cairn.http_worker import HttpWorkerRunner
from cairn.worker import WorkerSpec, execute, heartbeat_interval
from shared.models.messages import TaskMessage, TaskResult
from shared.models.runtime import TaskStatus
from tests.devserver import DevServer
from tests.integration.test_api import wait_for

pytestmark = pytest.mark.integration

RESPONSE_TIMEOUT_S = 2
WORK_S = 6.0  # three response timeouts: a task that is not kept alive times out at least once


def task_message(response_timeout_seconds: int) -> TaskMessage:
    return TaskMessage(
        id="dispatch:t1:1",
        task_id="t1",
        task_type="hb",
        task_def_name="hb",
        reference_task_name="hb",
        workflow_instance_id="wf1",
        workflow_type="wf",
        poll_count=1,
        response_timeout_seconds=response_timeout_seconds,
    )


class Beats:
    """A heartbeat sender that records when each beat was sent."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.results: list[TaskResult] = []

    async def __call__(self, beat: TaskResult) -> bool:
        self.times.append(time.monotonic())
        self.results.append(beat)
        return True


def test_interval_is_a_third_of_the_response_timeout_and_at_least_half_a_second() -> None:
    assert heartbeat_interval(3600) == 1200
    assert heartbeat_interval(3) == 1
    assert heartbeat_interval(1) == 0.5
    assert heartbeat_interval(0) is None


def test_heartbeat_outside_a_task_does_nothing_and_in_progress_needs_a_delay() -> None:
    heartbeat()  # a worker function called directly, as in a unit test
    with pytest.raises(ValueError, match="callback_after_seconds"):
        InProgress(0)


async def test_auto_beats_run_while_a_plain_function_blocks_and_stop_when_it_returns() -> None:
    """A plain function blocks its thread, not the loop: beats keep going (interval 0.5 s for a
    1 s response timeout), each with its own message id, and none is sent after the result."""
    beats = Beats()

    def blocking(task_input: dict[str, Any]) -> dict[str, Any]:
        time.sleep(1.8)
        return {"ok": True}

    started = time.monotonic()
    result = await execute(WorkerSpec("hb", blocking), task_message(1), "w1", send_heartbeat=beats)
    returned = time.monotonic()
    assert result.status is TaskStatus.COMPLETED and result.output_data == {"ok": True}
    assert 3 <= len(beats.times) <= 4, [t - started for t in beats.times]
    assert all(b.status is TaskStatus.IN_PROGRESS and b.task_id == "t1" for b in beats.results)
    assert len({b.id for b in beats.results}) == len(beats.results), "the decider dedupes repeated ids"
    count = len(beats.times)
    await asyncio.sleep(1.2)
    assert len(beats.times) == count and beats.times[-1] < returned, "a beat after the function returned"


async def test_manual_beats_only_when_auto_is_off() -> None:
    beats = Beats()

    def calls_heartbeat(task_input: dict[str, Any]) -> None:
        time.sleep(1.2)  # two auto intervals: would beat twice if auto were on
        heartbeat()
        time.sleep(0.3)

    await execute(
        WorkerSpec("hb", calls_heartbeat), task_message(1), "w1", send_heartbeat=beats, auto_heartbeat=False
    )
    assert len(beats.times) == 1


async def test_beats_asked_for_during_a_send_are_merged_and_a_stale_answer_stops_them() -> None:
    """20 heartbeat() calls during one slow send make one more beat, not 20; the sender then
    answers "no longer current" (an HTTP 409) and later calls send nothing."""
    sent: list[TaskResult] = []

    async def slow_send(beat: TaskResult) -> bool:
        sent.append(beat)
        await asyncio.sleep(0.3)
        return len(sent) < 2

    def chatty(task_input: dict[str, Any]) -> None:
        for _ in range(20):
            heartbeat()
            time.sleep(0.01)
        time.sleep(0.6)
        for _ in range(5):
            heartbeat()
        time.sleep(0.2)

    await execute(
        WorkerSpec("hb", chatty), task_message(60), "w1", send_heartbeat=slow_send, auto_heartbeat=False
    )
    assert len(sent) == 2


async def test_in_progress_result_carries_the_callback_and_output() -> None:
    async def not_yet(task_input: dict[str, Any]) -> InProgress:
        return InProgress(5, {"checked": 1})

    result = await execute(WorkerSpec("hb", not_yet), task_message(60), "w1")
    assert result.status is TaskStatus.IN_PROGRESS
    assert result.callback_after_seconds == 5 and result.output_data == {"checked": 1}


# --- against a real `cairn dev` -------------------------------------------------------------


@pytest.fixture
async def api(dev_server: DevServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=dev_server.url, timeout=30) as client:
        yield client


async def start(api: httpx.AsyncClient, task_type: str) -> str:
    """Register a one-task workflow whose task has a 2 s response timeout and one retry; start it."""
    task_def = {
        "name": task_type,
        "retryCount": 1,
        "retryDelaySeconds": 0,
        "responseTimeoutSeconds": RESPONSE_TIMEOUT_S,
        "timeoutSeconds": 60,
    }
    workflow = {"name": f"wf_{task_type}", "tasks": [{"name": task_type, "taskReferenceName": "long"}]}
    assert (await api.post("/api/metadata/taskdefs", json=[task_def])).status_code == 200
    assert (await api.post("/api/metadata/workflow", json=workflow)).status_code == 200
    response = await api.post(f"/api/workflow/{workflow['name']}", json={})
    assert response.status_code == 200, response.text
    return response.text


def statuses(workflow: dict[str, Any]) -> list[str]:
    return [task["status"] for task in workflow["tasks"]]


@asynccontextmanager
async def running(
    url: str, task_type: str, function: Callable[..., Any], *, auto_heartbeat: bool = True
) -> AsyncIterator[None]:
    """An HttpWorkerRunner in this process, stopped (in-flight tasks finished) on exit."""
    stop = asyncio.Event()
    runner = HttpWorkerRunner(
        url, [WorkerSpec(task_type, function)], long_poll_ms=1000, auto_heartbeat=auto_heartbeat
    )
    job = asyncio.create_task(runner.run(stop))
    try:
        yield
    finally:
        stop.set()
        await asyncio.wait_for(job, 30)


def long_worker(
    calls: list[float], release: threading.Event, *, is_async: bool, beat_by_hand: bool
) -> Callable[..., Any]:
    """Works for WORK_S (or until `release`), calling `heartbeat()` every 0.5 s if `beat_by_hand`."""

    def still_working() -> bool:
        if beat_by_hand:
            heartbeat()
        return time.monotonic() - calls[-1] < WORK_S and not release.is_set()

    async def async_work(task_input: dict[str, Any]) -> dict[str, Any]:
        calls.append(time.monotonic())
        for _ in range(int(WORK_S / 0.5) + 1):
            if not still_working():
                break
            await asyncio.sleep(0.5)
        return {"worked": True}

    def sync_work(task_input: dict[str, Any]) -> dict[str, Any]:
        calls.append(time.monotonic())
        while still_working():
            release.wait(0.5)
        return {"worked": True}

    return async_work if is_async else sync_work


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


@pytest.mark.parametrize("is_async", [False, True], ids=["plain", "async"])
async def test_auto_heartbeats_keep_a_long_task_in_one_execution(
    api: httpx.AsyncClient, cairn_server_url: str, is_async: bool
) -> None:
    task_type = unique("hb_auto")
    calls: list[float] = []
    work = long_worker(calls, threading.Event(), is_async=is_async, beat_by_hand=False)
    async with running(cairn_server_url, task_type, work):
        workflow_id = await start(api, task_type)
        done = await wait_for(api, workflow_id, lambda w: w["status"] != "RUNNING")
    assert done["status"] == "COMPLETED", done
    assert statuses(done) == ["COMPLETED"], "exactly one execution, none TIMED_OUT"
    assert len(calls) == 1
    assert done["tasks"][0]["endTime"] - done["tasks"][0]["startTime"] >= (WORK_S - 0.5) * 1000


async def test_without_heartbeats_a_long_task_times_out_and_is_retried(
    api: httpx.AsyncClient, cairn_server_url: str
) -> None:
    """The control: the same worker with heartbeats off is TIMED_OUT after 2 s of silence."""
    task_type = unique("hb_off")
    calls: list[float] = []
    release = threading.Event()
    work = long_worker(calls, release, is_async=False, beat_by_hand=False)
    async with running(cairn_server_url, task_type, work, auto_heartbeat=False):
        workflow_id = await start(api, task_type)
        timed_out = await wait_for(api, workflow_id, lambda w: "TIMED_OUT" in statuses(w))
        release.set()  # let the first attempt and the retry finish at once
        done = await wait_for(api, workflow_id, lambda w: w["status"] != "RUNNING")
    first = timed_out["tasks"][0]
    assert first["status"] == "TIMED_OUT" and "responseTimeoutSeconds" in first["reasonForIncompletion"]
    assert first["endTime"] - first["startTime"] < WORK_S * 1000, "timed out while its worker still ran"
    assert done["status"] == "COMPLETED" and statuses(done) == ["TIMED_OUT", "COMPLETED"], done


@pytest.mark.parametrize("is_async", [False, True], ids=["plain", "async"])
async def test_manual_heartbeats_keep_a_long_task_in_one_execution(
    api: httpx.AsyncClient, cairn_server_url: str, is_async: bool
) -> None:
    task_type = unique("hb_manual")
    calls: list[float] = []
    work = long_worker(calls, threading.Event(), is_async=is_async, beat_by_hand=True)
    async with running(cairn_server_url, task_type, work, auto_heartbeat=False):
        workflow_id = await start(api, task_type)
        done = await wait_for(api, workflow_id, lambda w: w["status"] != "RUNNING")
    assert done["status"] == "COMPLETED", done
    assert statuses(done) == ["COMPLETED"], "exactly one execution, none TIMED_OUT"
    assert len(calls) == 1


async def test_in_progress_hands_the_task_back_after_the_callback_delay(
    api: httpx.AsyncClient, cairn_server_url: str
) -> None:
    task_type = unique("hb_callback")
    calls: list[tuple[float, int]] = []

    def check_later(task_input: dict[str, Any], task: TaskMessage) -> dict[str, Any] | InProgress:
        calls.append((time.monotonic(), task.poll_count))
        if len(calls) == 1:
            return InProgress(1, {"first": True})
        return {"done": True}

    async with running(cairn_server_url, task_type, check_later):
        workflow_id = await start(api, task_type)
        done = await wait_for(api, workflow_id, lambda w: w["status"] != "RUNNING")
    assert done["status"] == "COMPLETED" and statuses(done) == ["COMPLETED"], done
    assert done["tasks"][0]["outputData"] == {"first": True, "done": True}
    assert [poll for _, poll in calls] == [1, 2], "the same execution, handed out a second time"
    assert calls[1][0] - calls[0][0] >= 1.0, "handed back before callbackAfterSeconds"
