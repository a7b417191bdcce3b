"""Issue 12 point 5: a hand-out whose answer never reached its poller goes out again within
seconds, and the bus batch is acknowledged only once a poller has its answer.

The real TaskDispatcher over the embedded bus and the SQLite store (one file, no servers), with a
short confirmation time; the answers go through `HandOutResponse` as the poll routes send them.
Only generous bounds are asserted on time."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from services.api.dispatch import TaskDispatcher, is_stale
from services.api.handout import HandOut, HandOutResponse
from services.clock import now_ms
from shared.adapters.embedded_bus import EmbeddedBus
from shared.adapters.sqlite_store import SqliteStore
from shared.messaging import outgoing
from shared.models.messages import TaskMessage
from shared.models.runtime import TaskStatus, WorkflowStatus
from shared.ports.store import ExecutionHead, WorkflowHeads
from shared.topics import Topics

CONFIRM_S = 0.5
TASK_TYPE = "handout_task"
TOPICS = Topics()
BOUND_S = 10.0


@dataclass
class Api:
    dispatcher: TaskDispatcher
    bus: EmbeddedBus
    store: SqliteStore
    path: str


@contextlib.asynccontextmanager
async def open_api(tmp_path: Path, **dispatcher_options: Any) -> AsyncIterator[Api]:
    """A dispatcher over a fresh state file, with a short confirmation time unless told."""
    path = str(tmp_path / "cairn.db")
    store = SqliteStore(path)
    await store.open()
    bus = EmbeddedBus(path)
    await bus.ensure_topics([TOPICS.tasks(TASK_TYPE), TOPICS.task_result])
    await bus.start()
    dispatcher = TaskDispatcher(
        bus, store, TOPICS, now_ms, **{"handout_confirm_s": CONFIRM_S, **dispatcher_options}
    )
    try:
        yield Api(dispatcher, bus, store, path)
    finally:
        await dispatcher.aclose()
        await bus.stop()
        await store.close()


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    async with open_api(tmp_path) as opened:
        yield opened


def task_message(workflow_id: str | None = None) -> TaskMessage:
    return TaskMessage(
        id=f"dispatch:{uuid.uuid4()}",
        task_id=str(uuid.uuid4()),
        task_type=TASK_TYPE,
        task_def_name=TASK_TYPE,
        reference_task_name="t",
        workflow_instance_id=workflow_id or str(uuid.uuid4()),
        workflow_type="flow",
        poll_count=1,
        response_timeout_seconds=3600,
    )


async def publish(api: Api, *tasks: TaskMessage) -> None:
    await api.bus.publish([outgoing(TOPICS.tasks(TASK_TYPE), t, t.workflow_instance_id) for t in tasks])


async def dispatch(api: Api) -> TaskMessage:
    task = task_message()
    await publish(api, task)
    return task


def claim_id(task: TaskMessage) -> str:
    return f"{task.task_id}:{task.poll_count}"


async def answer(hand_out: HandOut, *, hung_up: bool = False) -> list[bytes]:
    """Send the poll's answer as the route does; `hung_up`: the poller closed its connection."""
    sent: list[bytes] = []

    async def receive() -> dict[str, Any]:
        if hung_up:
            return {"type": "http.disconnect"}
        await asyncio.Event().wait()  # a live connection: nothing more to read
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            sent.append(message["body"])

    await HandOutResponse(hand_out.tasks, hand_out)({"type": "http"}, receive, send)  # type: ignore[arg-type]
    return sent


def committed(api: Api) -> int:
    """Messages of the task topic the api's worker group has acknowledged."""
    with sqlite3.connect(api.path) as connection:
        row = connection.execute(
            "SELECT COALESCE(SUM(committed), 0) FROM bus_offsets WHERE grp = ? AND topic = ?",
            (TOPICS.workers(TASK_TYPE), TOPICS.tasks(TASK_TYPE)),
        ).fetchone()
    return int(row[0])


async def acknowledged(api: Api, count: int) -> None:
    deadline = time.monotonic() + BOUND_S
    while committed(api) < count:
        assert time.monotonic() < deadline, f"the bus batch was not acknowledged ({committed(api)})"
        await asyncio.sleep(0.05)


async def test_an_answer_never_sent_puts_the_task_back_and_only_a_confirmation_acknowledges(
    api: Api,
) -> None:
    await api.dispatcher.poll(TASK_TYPE, "w0", 1, 0)  # join the group
    task = await dispatch(api)
    first = await api.dispatcher.poll(TASK_TYPE, "w1", 1, BOUND_S)
    assert [t["taskId"] for t in first.tasks] == [task.task_id]
    # Claimed for the confirmation time only, and not acknowledged: the answer is not out.
    assert not await api.store.claim_task(claim_id(task), "rival", now_ms(), 60_000)
    await asyncio.sleep(0.3)
    assert committed(api) == 0

    started = time.monotonic()  # first's answer is never sent (the route failed, say)
    second = await api.dispatcher.poll(TASK_TYPE, "w2", 1, BOUND_S)
    print(f"\nunconfirmed hand-out handed out again after {time.monotonic() - started:.2f} s")
    assert [t["taskId"] for t in second.tasks] == [task.task_id]
    assert second.tasks[0]["workerId"] == "w2"

    assert await answer(second)  # sent: confirmed, claimed for the response timeout, acknowledged
    await acknowledged(api, 1)
    assert not await api.store.claim_task(claim_id(task), "rival", now_ms() + 5_000, 60_000)
    assert (await api.dispatcher.poll(TASK_TYPE, "w3", 1, 3 * CONFIRM_S)).tasks == []


async def test_a_poller_that_hung_up_leaves_its_tasks_to_the_next_poll_at_once(api: Api) -> None:
    await api.dispatcher.poll(TASK_TYPE, "w0", 1, 0)
    workflow_id = str(uuid.uuid4())  # one key: one partition, one batch
    tasks = [task_message(workflow_id), task_message(workflow_id)]
    await publish(api, *tasks)
    await asyncio.sleep(0.3)  # both dispatches reach the api's queue
    gone = await api.dispatcher.poll(TASK_TYPE, "gone", 2, BOUND_S)
    assert len(gone.tasks) == 2
    await answer(gone, hung_up=True)  # nothing to confirm: the tasks go back now
    # A poll that does not wait at all gets them (this api renews its own short claim).
    again = await api.dispatcher.poll(TASK_TYPE, "live", 2, 0)
    assert sorted(t["taskId"] for t in again.tasks) == sorted(t.task_id for t in tasks)
    await asyncio.sleep(0.3)
    assert committed(api) == 0
    await answer(again)
    await acknowledged(api, 2)


async def test_a_dispatch_claimed_by_an_api_that_died_goes_out_once_that_claim_runs_out(api: Api) -> None:
    """The dead api's hand-out was never confirmed: its claim is short. The bus delivers the
    unacknowledged dispatch again (here: the same message, published to this api)."""
    await api.dispatcher.poll(TASK_TYPE, "w0", 1, 0)
    task = task_message()
    assert await api.store.claim_task(claim_id(task), "dead-api", now_ms(), int(CONFIRM_S * 1000))
    await publish(api, task)
    started = time.monotonic()
    hand_out = await api.dispatcher.poll(TASK_TYPE, "w1", 1, BOUND_S)
    print(f"\nhanded out {time.monotonic() - started:.2f} s after the dead api's claim was seen")
    assert [t["taskId"] for t in hand_out.tasks] == [task.task_id]
    await answer(hand_out)
    await acknowledged(api, 1)


async def test_a_dispatch_another_poller_holds_for_good_is_dropped_and_acknowledged(api: Api) -> None:
    """A confirmed claim outlives a confirmation time: the redelivered copy is dropped, and its
    batch does not wait for the response timeout."""
    await api.dispatcher.poll(TASK_TYPE, "w0", 1, 0)
    task = await dispatch(api)
    held = await api.dispatcher.poll(TASK_TYPE, "holder", 1, BOUND_S)
    await answer(held)
    await acknowledged(api, 1)
    await publish(api, task)  # delivered again (a rebalance, a lost commit)
    assert (await api.dispatcher.poll(TASK_TYPE, "w2", 1, 4 * CONFIRM_S)).tasks == []
    await acknowledged(api, 2)


def test_a_dispatch_whose_started_report_was_applied_is_not_stale() -> None:
    """After the api died between claim and answer, the workflow shows the task IN_PROGRESS with
    the same dispatch number: the redelivered dispatch is still current."""
    task = TaskMessage(
        id="dispatch:x",
        task_id="task-1",
        task_type=TASK_TYPE,
        task_def_name=TASK_TYPE,
        reference_task_name="t",
        workflow_instance_id="wf-1",
        workflow_type="flow",
        poll_count=1,
    )
    head = ExecutionHead("task-1", "t", TASK_TYPE, TaskStatus.IN_PROGRESS, dispatch_count=1, retry_count=0)
    heads = WorkflowHeads("wf-1", WorkflowStatus.RUNNING, {"t": head})
    assert not is_stale(heads, task)
    redispatched = WorkflowHeads(
        "wf-1",
        WorkflowStatus.RUNNING,
        {"t": ExecutionHead("task-1", "t", TASK_TYPE, TaskStatus.IN_PROGRESS, 2, 0)},
    )
    assert is_stale(redispatched, task)


class OneClaimFails:
    """The real store, except that the first claim of one dispatch fails (a store error)."""

    def __init__(self, store: SqliteStore, failing: str) -> None:
        self._store = store
        self._failing: str | None = failing

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def claim_task(self, task_id: str, worker_id: str, now: int, lease_ms: int) -> bool:
        if task_id == self._failing:
            self._failing = None
            raise sqlite3.OperationalError("disk I/O error")
        return await self._store.claim_task(task_id, worker_id, now, lease_ms)


async def test_a_claim_that_fails_sends_its_dispatch_back_and_the_others_go_out(api: Api) -> None:
    """The claims of a hand-out are made together; one failing fails only its own dispatch,
    which goes back to the bus and out again."""
    await api.dispatcher.poll(TASK_TYPE, "w0", 1, 0)
    workflow_id = str(uuid.uuid4())  # one key: one partition, one batch
    tasks = [task_message(workflow_id), task_message(workflow_id)]
    api.dispatcher.store = OneClaimFails(api.store, claim_id(tasks[0]))  # type: ignore[assignment]
    await publish(api, *tasks)
    await asyncio.sleep(0.3)  # both dispatches reach the api's queue
    first = await api.dispatcher.poll(TASK_TYPE, "w1", 2, BOUND_S)
    assert [t["taskId"] for t in first.tasks] == [tasks[1].task_id]
    await answer(first)
    again = await api.dispatcher.poll(TASK_TYPE, "w2", 2, BOUND_S)
    assert [t["taskId"] for t in again.tasks] == [tasks[0].task_id]
    await answer(again)
    # The batch came back whole: the other dispatch's copy is held by w1, and dropped.
    assert (await api.dispatcher.poll(TASK_TYPE, "w3", 2, 4 * CONFIRM_S)).tasks == []
    await acknowledged(api, 2)
