"""Issue 16: a hand-out's "started" report waits briefly for the task's result, so the decider
applies both in one decision; it is never lost on the way (services/api/started.py).

The real TaskDispatcher over the embedded bus and the SQLite store (one file, no servers), the
answers sent through `HandOutResponse` as the poll routes send them. What reaches the task-result
topic is read from the bus's own table."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from services.clock import now_ms
from shared.messaging import outgoing
from shared.models.messages import TaskResult
from shared.models.runtime import TaskStatus
from tests.integration.test_handout_requeue import (
    BOUND_S,
    CONFIRM_S,
    TASK_TYPE,
    TOPICS,
    Api,
    acknowledged,
    answer,
    claim_id,
    committed,
    dispatch,
    open_api,
    publish,
    task_message,
)

LONG_DELAY_S = 30.0
"""Longer than any test here: a report that goes out did not wait for the delay."""


def results_topic(api: Api) -> list[tuple[str, str, str | None]]:
    """(status, message id, worker id) of every message on the task-result topic, in order."""
    with sqlite3.connect(api.path) as connection:
        rows = connection.execute(
            "SELECT value FROM bus_messages WHERE topic = ? ORDER BY partition, offset", (TOPICS.task_result,)
        ).fetchall()
    found = []
    for (value,) in rows:
        body = json.loads(value)
        found.append((body["status"], body["id"], body.get("workerId")))
    return found


async def until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + BOUND_S
    while not condition():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.02)


def api_fixture(delay_s: float) -> Callable[[Path], AsyncIterator[Api]]:
    async def make(tmp_path: Path) -> AsyncIterator[Api]:
        async with open_api(tmp_path, started_report_delay_s=delay_s) as api:
            yield api

    return make


held_back = pytest.fixture(api_fixture(LONG_DELAY_S))
short_delay = pytest.fixture(api_fixture(0.3))
no_delay = pytest.fixture(api_fixture(0.0))


def result_of(task_id: str, workflow_id: str, status: TaskStatus) -> TaskResult:
    return TaskResult(
        id=f"result:{task_id}:{uuid.uuid4()}",
        workflow_instance_id=workflow_id,
        task_id=task_id,
        status=status,
        worker_id="w1",
    )


async def test_a_quick_result_carries_its_started_report_and_settles_the_dispatch(held_back: Api) -> None:
    api = held_back
    await api.dispatcher.poll(TASK_TYPE, "w0", 1, 0)  # join the group
    task = await dispatch(api)
    hand_out = await api.dispatcher.poll(TASK_TYPE, "w1", 1, BOUND_S)
    assert await answer(hand_out)
    await asyncio.sleep(0.3)
    assert results_topic(api) == [], "the report went out without waiting for the result"
    assert committed(api) == 0, "the dispatch was acknowledged before its started report was out"

    result = result_of(task.task_id, task.workflow_instance_id, TaskStatus.COMPLETED)
    await api.dispatcher.started.publish_with(
        task.task_id, [outgoing(TOPICS.task_result, result, task.workflow_instance_id)]
    )
    assert results_topic(api) == [
        ("IN_PROGRESS", f"started:{task.task_id}:1", "w1"),
        ("COMPLETED", result.id, "w1"),
    ]
    await acknowledged(api, 1)


async def test_a_task_still_running_is_reported_alone_when_the_delay_is_up(short_delay: Api) -> None:
    api = short_delay
    await api.dispatcher.poll(TASK_TYPE, "w0", 1, 0)
    task = await dispatch(api)
    hand_out = await api.dispatcher.poll(TASK_TYPE, "w1", 1, BOUND_S)
    assert await answer(hand_out)
    await until(lambda: bool(results_topic(api)), "the held report never went out")
    assert results_topic(api) == [("IN_PROGRESS", f"started:{task.task_id}:1", "w1")]
    await acknowledged(api, 1)
    # The result that comes later goes out alone: the report is not sent twice.
    result = result_of(task.task_id, task.workflow_instance_id, TaskStatus.COMPLETED)
    await api.dispatcher.started.publish_with(
        task.task_id, [outgoing(TOPICS.task_result, result, task.workflow_instance_id)]
    )
    assert [status for status, _, _ in results_topic(api)] == ["IN_PROGRESS", "COMPLETED"]


async def test_with_no_delay_the_report_is_out_before_the_answer(no_delay: Api) -> None:
    api = no_delay
    await api.dispatcher.poll(TASK_TYPE, "w0", 1, 0)
    task = await dispatch(api)
    hand_out = await api.dispatcher.poll(TASK_TYPE, "w1", 1, BOUND_S)
    assert results_topic(api) == [("IN_PROGRESS", f"started:{task.task_id}:1", "w1")]
    assert await answer(hand_out)
    await acknowledged(api, 1)


async def test_a_dispatch_held_by_an_api_that_died_with_its_report_is_reported_for_it(held_back: Api) -> None:
    """The holder's api died after its answer went out, its report still held back: its batch
    was never acknowledged, so the bus delivers the dispatch again to another api. The dead
    api's claim was confirmed (renewed to the response timeout), so the copy is dropped as held
    — and reported started on the holder's behalf, so the task's response timeout applies."""
    api = held_back
    await api.dispatcher.poll(TASK_TYPE, "w0", 1, 0)
    task = task_message()
    assert await api.store.claim_task(claim_id(task), "holder/dead-api", now_ms(), 3_600_000)
    await publish(api, task)  # the redelivered dispatch
    assert (await api.dispatcher.poll(TASK_TYPE, "w2", 1, 4 * CONFIRM_S)).tasks == []
    await acknowledged(api, 1)
    assert results_topic(api) == [("IN_PROGRESS", f"started:{task.task_id}:1", None)]


async def test_two_members_of_a_types_group_hand_out_every_dispatch(tmp_path: Path) -> None:
    """CAIRN_API_DISPATCH_CONSUMERS=2: the type's partitions are shared by two members, each
    acknowledging its own batches; every dispatch is handed out once and acknowledged."""
    async with open_api(tmp_path, consumers=2) as api:
        await api.dispatcher.poll(TASK_TYPE, "w0", 1, 0)
        assert len(api.dispatcher._queues[TASK_TYPE].subscriptions) == 2
        tasks = [task_message() for _ in range(8)]  # eight workflows: keys over every partition
        await publish(api, *tasks)
        handed: list[str] = []
        deadline = time.monotonic() + BOUND_S
        while len(handed) < len(tasks):
            assert time.monotonic() < deadline, f"handed out {len(handed)} of {len(tasks)}"
            hand_out = await api.dispatcher.poll(TASK_TYPE, "w1", 8, 0.5)
            handed += [task["taskId"] for task in hand_out.tasks]
            await answer(hand_out)
        assert sorted(handed) == sorted(task.task_id for task in tasks)
        await acknowledged(api, len(tasks))
