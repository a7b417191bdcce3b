"""Two deciders, one workflow, the same stale read: the race forced, not hoped for (issue 4, 6).

Both deciders are real DeciderHandlers on real store adapters (two adapter instances on one
database, as two processes would have). A barrier holds each decider after its first read until
both have read, so both decide from the same version. Exactly one commit may win; the loser must
re-read, find the result already applied, and schedule nothing.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from services.decider.handler import DeciderHandler
from shared.adapters.embedded_bus import EmbeddedBus
from shared.core.validation import parse_task_def, parse_workflow_def
from shared.models.documents import WorkflowDocument
from shared.models.messages import StartWorkflow, TaskMessage, TaskResult, TimerFired
from shared.models.runtime import TaskStatus
from shared.ports.bus import Received
from shared.ports.store import Commit, Store
from shared.topics import Topics
from tests.e2e.definitions import FLAKY, PIPELINE, TASK_DEFS

pytestmark = pytest.mark.integration
NOW = 1_800_000_000_000


class ReadTogether:
    """A store whose first `load_workflows` waits until every decider of the race has read,
    and which records each commit's outcome. Everything else is the real adapter."""

    def __init__(self, store: Store, barrier: asyncio.Barrier) -> None:
        self._store = store
        self._barrier = barrier
        self._waited = False
        self.outcomes: list[bool] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def load_workflows(
        self, workflow_ids: Sequence[str], running_only: bool = False
    ) -> dict[str, WorkflowDocument]:
        documents = await self._store.load_workflows(workflow_ids, running_only)
        if not self._waited:
            self._waited = True
            await self._barrier.wait()
        return documents

    async def commit_workflows(self, commits: Sequence[Commit]) -> list[bool]:
        won = await self._store.commit_workflows(commits)
        self.outcomes.extend(won)
        return won


def received(topics: Topics, message: StartWorkflow | TaskResult, offset: int) -> Received:
    topic = topics.workflow_start if isinstance(message, StartWorkflow) else topics.task_result
    return Received(
        topic=topic, value=message.to_bytes(), key="wf-race", headers={}, partition=0, offset=offset
    )


async def register_pipeline(store: Store) -> None:
    for task_def in TASK_DEFS:
        await store.put_task_def(parse_task_def(task_def))
    await store.put_workflow_def(parse_workflow_def(PIPELINE))


def add_completed(workflow_id: str, task_id: str) -> TaskResult:
    """The pipeline's first task ("add") completed by its worker."""
    return TaskResult(
        id=f"result:{task_id}:1",
        workflow_instance_id=workflow_id,
        task_id=task_id,
        status=TaskStatus.COMPLETED,
        output_data={"n": 3},
    )


def pipeline_start(workflow_id: str) -> StartWorkflow:
    return StartWorkflow(
        id=f"start:{workflow_id}",
        workflow_id=workflow_id,
        name="e2e_pipeline",
        input={"n": 1, "add": 2, "label": "x"},
    )


def dispatches(bus_file: Path, topic: str) -> list[TaskMessage]:
    """The task messages on `topic`, a LIKE pattern (`Topics().tasks("%")`: every worker topic)."""
    with sqlite3.connect(bus_file) as connection:
        rows = connection.execute("SELECT value FROM bus_messages WHERE topic LIKE ?", (topic,)).fetchall()
    return [TaskMessage.model_validate_json(value) for (value,) in rows]


@pytest.mark.parametrize("copies", [1, 10])
async def test_two_deciders_same_stale_read_one_commit_no_double_schedule(
    store: Store, fresh_store: Store, tmp_path: Path, copies: int
) -> None:
    first, second = store, fresh_store
    topics = Topics()
    bus_file = tmp_path / "bus.db"
    bus = EmbeddedBus(str(bus_file))
    try:
        await register_pipeline(first)
        start = pipeline_start("wf-race")
        await DeciderHandler(first, bus, topics, lambda: NOW).handle_batch([received(topics, start, 0)])
        document = await second.load_workflow("wf-race")
        assert document is not None and document.version == 1
        add = document.state.tasks["add"]
        done = add_completed("wf-race", add.task_id)

        barrier = asyncio.Barrier(2)
        racers = [ReadTogether(first, barrier), ReadTogether(second, barrier)]
        deciders = [DeciderHandler(racer, bus, topics, lambda: NOW + 10) for racer in racers]  # type: ignore[arg-type]
        # The same result delivered to both (and, with copies=10, ten times in each batch).
        await asyncio.gather(
            *(d.handle_batch([received(topics, done, 1 + i) for i in range(copies)]) for d in deciders)
        )

        outcomes = [racer.outcomes for racer in racers]
        assert sorted(o[0] for o in outcomes) == [False, True], f"exactly one first commit wins: {outcomes}"
        final = await second.load_workflow("wf-race")
        assert final is not None and final.version == 2, "the loser re-read and found nothing to do"
        assert final.state.tasks["add"].status is TaskStatus.COMPLETED
        mul = [m for m in dispatches(bus_file, topics.tasks("%")) if m.reference_task_name == "mul"]
        # One execution, dispatched once: the loser may re-publish the winner's still-unsent
        # outbox (that is how a decision repairs a crash between commit and publish), but only
        # as the same message, which workers and the api's claim recognise by its id.
        assert {(m.task_id, m.poll_count, m.id) for m in mul} == {(mul[0].task_id, 1, mul[0].id)}, mul
        assert mul[0].task_id == final.state.tasks["mul"].task_id
    finally:
        await bus.stop()


WAITING = {
    "name": "race_wait",
    "tasks": [
        {"name": "approve", "taskReferenceName": "approve", "type": "WAIT"},
        {
            "name": "e2e_add",
            "taskReferenceName": "add",
            "inputParameters": {"n": 1, "add": "${approve.output.by}"},
        },
    ],
}


async def test_start_signal_and_timer_delivered_ten_times_change_the_workflow_once(
    store: Store, tmp_path: Path
) -> None:
    from shared.models.messages import Signal, TimerFired

    topics = Topics()
    bus_file = tmp_path / "bus.db"
    bus = EmbeddedBus(str(bus_file))
    try:
        await store.put_task_def(parse_task_def({"name": "e2e_add", "retryCount": 1, "retryDelaySeconds": 5}))
        await store.put_workflow_def(parse_workflow_def(WAITING))
        decider = DeciderHandler(store, bus, topics, lambda: NOW)

        def batch(message: StartWorkflow | TaskResult | Signal | TimerFired, offset: int) -> list[Received]:
            topic = {
                StartWorkflow: topics.workflow_start,
                Signal: topics.workflow_signal,
                TimerFired: topics.timer_fired,
            }.get(type(message), topics.task_result)
            return [
                Received(
                    topic=topic,
                    value=message.to_bytes(),
                    key="wf-dup",
                    headers={},
                    partition=0,
                    offset=offset + i,
                )
                for i in range(10)
            ]

        start = StartWorkflow(id="start:wf-dup", workflow_id="wf-dup", name="race_wait")
        await decider.handle_batch(batch(start, 0))
        await decider.handle_batch(batch(start, 10))  # and again, in a later batch
        document = await store.load_workflow("wf-dup")
        assert document is not None and document.version == 1

        signal = Signal(id="signal:once", workflow_id="wf-dup", task_ref_name="approve", output={"by": 2})
        await decider.handle_batch(batch(signal, 20))
        await decider.handle_batch(batch(signal, 30))
        document = await store.load_workflow("wf-dup")
        assert document is not None and document.version == 2
        add = document.state.tasks["add"]
        failed = TaskResult(
            id="result:fail", workflow_instance_id="wf-dup", task_id=add.task_id, status=TaskStatus.FAILED
        )
        await decider.handle_batch(batch(failed, 40))
        document = await store.load_workflow("wf-dup")
        assert document is not None and document.version == 3
        [timer] = [t for t in document.state.timers.values() if t.purpose == "dispatch"]
        fired = TimerFired(id=f"fired:{timer.timer_id}", workflow_id="wf-dup", timer_id=timer.timer_id)
        await decider.handle_batch(batch(fired, 50))
        await decider.handle_batch(batch(fired, 60))
        document = await store.load_workflow("wf-dup")
        assert document is not None and document.version == 4
        retry = document.state.tasks["add"]
        assert retry.retry_count == 1 and retry.dispatch_count == 1 and retry.input_data == {"n": 1, "add": 2}
        sent = {(m.task_id, m.poll_count) for m in dispatches(bus_file, topics.tasks("%"))}
        assert sent == {(add.task_id, 1), (retry.task_id, 1)}, "each execution dispatched once"
    finally:
        await bus.stop()


async def test_a_cached_copy_does_not_make_a_decider_drop_what_another_replica_made_valid(
    store: Store, fresh_store: Store, tmp_path: Path
) -> None:
    """With three deciders, Kafka's round-robin assignment spreads one workflow's topics over
    different replicas. Decider A commits the start and keeps the document; decider B takes the
    failed result and arms the retry timer; then A gets that timer's firing. Decided on A's copy,
    the timer is unknown: the firing was rejected and dropped, and the workflow stalled until the
    sweeper's stale scan (found by tests/deploy/test_deployment_runs.py[compose+scale]). A
    decision that changes nothing is not fenced by a commit, so it must be made on a fresh read."""
    topics = Topics()
    bus = EmbeddedBus(str(tmp_path / "bus.db"))
    now = NOW
    try:
        for task_def in TASK_DEFS:
            await store.put_task_def(parse_task_def(task_def))
        await store.put_workflow_def(parse_workflow_def(FLAKY))
        replica_a = DeciderHandler(store, bus, topics, lambda: now)
        replica_b = DeciderHandler(fresh_store, bus, topics, lambda: now)

        def delivered(topic: str, message: StartWorkflow | TaskResult | TimerFired) -> list[Received]:
            return [
                Received(
                    topic=topic, value=message.to_bytes(), key="wf-cached", headers={}, partition=0, offset=0
                )
            ]

        start = StartWorkflow(
            id="start:wf-cached", workflow_id="wf-cached", name="e2e_flaky_pipeline", input={"n": 1}
        )
        await replica_a.handle_batch(delivered(topics.workflow_start, start))
        first = (await fresh_store.load_workflow("wf-cached")).state.tasks["flaky"]  # type: ignore[union-attr]
        failed = TaskResult(
            id="failed-1", workflow_instance_id="wf-cached", task_id=first.task_id, status=TaskStatus.FAILED
        )
        await replica_b.handle_batch(delivered(topics.task_result, failed))
        [timer_id] = (await fresh_store.load_workflow("wf-cached")).state.timers  # type: ignore[union-attr]
        now += 5_000  # the retry delay (3 s) has passed
        fired = TimerFired(id=f"fired:{timer_id}", workflow_id="wf-cached", timer_id=timer_id)
        await replica_a.handle_batch(delivered(topics.timer_fired, fired))
        state = (await store.load_workflow("wf-cached")).state  # type: ignore[union-attr]
        retry = state.tasks["flaky"]
        assert (retry.retry_count, retry.status) == (1, TaskStatus.SCHEDULED), state
        assert retry.retried_task_id == first.task_id
        assert not state.timers
    finally:
        await bus.stop()
