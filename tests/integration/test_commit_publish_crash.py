"""A decider that dies between its commit and its outbox publish, forced (issue 4, point 6);
and a rejected transition made visible (point 3). Real DeciderHandler and Sweeper on the real
store adapters (MongoDB protocol and SQLite) and the embedded bus."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from services.decider.handler import DeciderHandler
from services.sweeper.handler import Sweeper
from shared.adapters.embedded_bus import EmbeddedBus
from shared.core.validation import parse_task_def, parse_workflow_def
from shared.models.messages import DecideRequest, StartWorkflow, TaskResult
from shared.models.runtime import TaskStatus
from shared.ports.bus import Outgoing, Received
from shared.ports.store import Store
from shared.topics import Topics
from tests.e2e.definitions import PIPELINE
from tests.integration.test_decider_races import dispatches, pipeline_start, received, register_pipeline
from tests.metrics import counter_value, metric_reader

pytestmark = pytest.mark.integration
NOW = 1_800_000_000_000
GRACE_MS = 2_000


class ProcessDied(BaseException):
    """Stands for SIGKILL: nothing after it in the dying process runs."""


class DiesOnFirstDispatch:
    """The real bus, except that the first publish carrying a task dispatch kills the 'process'."""

    def __init__(self, bus: EmbeddedBus, topics: Topics) -> None:
        self._bus = bus
        self._topics = topics
        self.died = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._bus, name)

    async def publish(self, messages: Sequence[Outgoing]) -> None:
        if not self.died and any(m.topic.startswith(self._topics.tasks("")) for m in messages):
            self.died = True
            raise ProcessDied
        await self._bus.publish(messages)


async def start_and_die(store: Store, bus: EmbeddedBus, topics: Topics) -> Received:
    """Register the pipeline and decide its start on a decider that dies before publishing."""
    await register_pipeline(store)
    delivery = received(topics, pipeline_start("wf-crash"), 0)
    dying = DiesOnFirstDispatch(bus, topics)
    with pytest.raises(ProcessDied):
        await DeciderHandler(store, dying, topics, lambda: NOW).handle_batch([delivery])  # type: ignore[arg-type]
    document = await store.load_workflow("wf-crash")
    assert document is not None and document.version == 1, "the decision was committed"
    assert document.outbox, "and its outbox never went out"
    return delivery


async def test_crash_after_commit_is_repaired_by_the_redelivered_event(store: Store, tmp_path: Path) -> None:
    topics, bus_file = Topics(), tmp_path / "bus.db"
    bus = EmbeddedBus(str(bus_file))
    try:
        delivery = await start_and_die(store, bus, topics)
        assert not bus_file.exists() or dispatches(bus_file, topics.tasks("%")) == []
        # The batch was never acknowledged, so it comes back, to a new decider process.
        await DeciderHandler(store, bus, topics, lambda: NOW + 50).handle_batch([delivery])
        sent = dispatches(bus_file, topics.tasks("%"))
        document = await store.load_workflow("wf-crash")
        assert document is not None and document.version == 1, "nothing decided twice"
        assert [(m.task_id, m.poll_count) for m in sent] == [(document.state.tasks["add"].task_id, 1)]
    finally:
        await bus.stop()


async def test_crash_after_commit_is_repaired_by_the_first_sweep_after_the_grace(
    store: Store, tmp_path: Path
) -> None:
    """The event that caused the decision is gone (acknowledged by a buggy or SIGKILLed
    consumer); the sweeper's next pass past the outbox grace finds the unsent outbox."""
    topics, bus_file = Topics(), tmp_path / "bus.db"
    bus = EmbeddedBus(str(bus_file))
    try:
        await start_and_die(store, bus, topics)
        now = [NOW + GRACE_MS - 1]
        sweeper = Sweeper(
            store, bus, topics, lambda: now[0], GRACE_MS, stale_after_ms=10**9, stale_interval_ms=10**9
        )
        assert await sweeper.sweep_once() == [], "not before the grace period"
        now[0] = NOW + GRACE_MS + 1
        assert await sweeper.sweep_once() == ["wf-crash"], "found by the first sweep after it"
        [request] = [
            DecideRequest.model_validate_json(value) for value in _values(bus_file, topics.decide_request)
        ]
        delivery = Received(
            topic=topics.decide_request,
            value=request.to_bytes(),
            key="wf-crash",
            headers={},
            partition=0,
            offset=0,
        )
        await DeciderHandler(store, bus, topics, lambda: now[0]).handle_batch([delivery])
        document = await store.load_workflow("wf-crash")
        assert document is not None
        assert [(m.task_id, m.poll_count) for m in dispatches(bus_file, topics.tasks("%"))] == [
            (document.state.tasks["add"].task_id, 1)
        ]
    finally:
        await bus.stop()


async def test_a_rejected_late_result_is_logged_and_counted(
    store: Store, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    metric_reader()
    topics, bus_file = Topics(), tmp_path / "bus.db"
    bus = EmbeddedBus(str(bus_file))
    try:
        await store.put_task_def(parse_task_def({"name": "e2e_add", "retryCount": 1, "retryDelaySeconds": 0}))
        await store.put_workflow_def(parse_workflow_def(PIPELINE))
        decider = DeciderHandler(store, bus, topics, lambda: NOW)
        start = StartWorkflow(
            id="start:wf-late",
            workflow_id="wf-late",
            name="e2e_pipeline",
            input={"n": 1, "add": 2, "label": "x"},
        )
        await decider.handle_batch([received(topics, start, 0)])
        document = await store.load_workflow("wf-late")
        assert document is not None
        first = document.state.tasks["add"].task_id

        def result(result_id: str, status: TaskStatus) -> Received:
            message = TaskResult(id=result_id, workflow_instance_id="wf-late", task_id=first, status=status)
            return received(topics, message, 1)

        await decider.handle_batch([result("r-fail", TaskStatus.FAILED)])  # retried: a new execution
        before = counter_value("cairn.decider.rejected", reason="result_superseded")
        version = (await store.load_workflow("wf-late")).version  # type: ignore[union-attr]
        with caplog.at_level(logging.WARNING, logger="services.decider.handler"):
            await decider.handle_batch([result("r-late", TaskStatus.COMPLETED)])
        assert counter_value("cairn.decider.rejected", reason="result_superseded") == before + 1
        assert f"rejected (result_superseded): result for task {first} ignored" in caplog.text
        assert (await store.load_workflow("wf-late")).version == version  # type: ignore[union-attr]
    finally:
        await bus.stop()


def _values(bus_file: Path, topic: str) -> list[bytes]:
    import sqlite3

    with sqlite3.connect(bus_file) as connection:
        try:
            rows = connection.execute("SELECT value FROM bus_messages WHERE topic = ?", (topic,)).fetchall()
        except sqlite3.OperationalError:  # nothing published yet: the bus creates its tables lazily
            return []
    return [value for (value,) in rows]
