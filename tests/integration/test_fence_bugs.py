"""Issue 12 point 4, the two MongoDB fence bugs, each forced on real store adapters.

1. A decider frozen past the fences' retention: it read version v, another decider committed
   v+1 .. v+3, housekeeping pruned the old fences, then the frozen one woke. Before the fix its
   fence `W#v+1` could be inserted again (the old one was gone) and its stale document replaced
   the newer one (on FerretDB) or was reported a win (on MongoDB).
2. A losing commit's task records: both deciders read v and decided differently for one task;
   the winner committed first, then the loser wrote its records (before its fence, as the old
   adapter did) over the winner's, and history showed what never happened.

Both run on every store adapter (SQLite's conditional update and single transaction never had
either bug; the tests keep it that way)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from services.decider.handler import DeciderHandler
from shared.adapters.embedded_bus import EmbeddedBus
from shared.models.documents import WorkflowDocument
from shared.models.messages import TaskResult
from shared.models.runtime import TaskStatus
from shared.ports.store import Commit, Store
from shared.topics import Topics
from tests.integration.test_decider_races import NOW, pipeline_start, received, register_pipeline

pytestmark = pytest.mark.integration


class Frozen:
    """The real store, except that the first commit waits for `thaw` (a decider stopped between
    its read and its commit), and `read` is set once the first read happened."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.read = asyncio.Event()
        self.thaw = asyncio.Event()
        self.outcomes: list[bool] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def load_workflows(
        self, workflow_ids: Sequence[str], running_only: bool = False
    ) -> dict[str, WorkflowDocument]:
        documents = await self._store.load_workflows(workflow_ids, running_only)
        self.read.set()
        return documents

    async def commit_workflows(self, commits: Sequence[Commit]) -> list[bool]:
        if not self.outcomes:
            await self.thaw.wait()
        won = await self._store.commit_workflows(commits)
        self.outcomes.extend(won)
        return won


def result(document: WorkflowDocument, ref: str, n: int, suffix: str = "") -> TaskResult:
    task = document.state.tasks[ref]
    return TaskResult(
        id=f"result:{task.task_id}{suffix}",
        workflow_instance_id=document.workflow_id,
        task_id=task.task_id,
        status=TaskStatus.COMPLETED,
        output_data={"n": n},
    )


async def started(store: Store, bus: EmbeddedBus, topics: Topics, workflow_id: str) -> WorkflowDocument:
    await register_pipeline(store)
    await DeciderHandler(store, bus, topics, lambda: NOW).handle_batch(
        [received(topics, pipeline_start(workflow_id), 0)]
    )
    document = await store.load_workflow(workflow_id)
    assert document is not None and document.version == 1
    return document


async def test_a_decider_frozen_past_the_fence_retention_cannot_commit_over_newer_state(
    store: Store, fresh_store: Store, tmp_path: Path
) -> None:
    topics = Topics()
    bus = EmbeddedBus(str(tmp_path / "bus.db"))
    try:
        document = await started(store, bus, topics, "wf-frozen")
        frozen = Frozen(fresh_store)
        # Its decision began 20 minutes ago by the wall clock: frozen since it read (SIGSTOP, a
        # GC pause), longer than the fences' 10-minute retention.
        stale = DeciderHandler(frozen, bus, topics, lambda: int(time.time() * 1000) - 20 * 60_000)  # type: ignore[arg-type]
        # The frozen decider reads v1 and decides on a result for `add` (a duplicate delivery).
        late = asyncio.create_task(
            stale.handle_batch([received(topics, result(document, "add", 3, ":late"), 1)])
        )
        await frozen.read.wait()
        # Meanwhile the live decider takes the workflow through v2 .. v4 to the end.
        live = DeciderHandler(store, bus, topics, lambda: NOW + 10)
        await live.handle_batch([received(topics, result(document, "add", 3), 2)])
        for offset, (ref, n) in enumerate((("mul", 9), ("fmt", 0)), start=3):
            current = await store.load_workflow("wf-frozen")
            assert current is not None
            if ref == "fmt":
                task = current.state.tasks[ref]
                message = TaskResult(
                    id=f"result:{task.task_id}",
                    workflow_instance_id="wf-frozen",
                    task_id=task.task_id,
                    status=TaskStatus.COMPLETED,
                    output_data={"text": "done"},
                )
            else:
                message = result(current, ref, n)
            await live.handle_batch([received(topics, message, offset)])
        finished = await store.load_workflow("wf-frozen")
        assert finished is not None and finished.state.status.value == "COMPLETED"
        # Housekeeping runs an hour later: every fence is past its retention (10 minutes).
        await store.housekeeping(NOW + 3_600_000)
        frozen.thaw.set()
        await late
        assert frozen.outcomes[0] is False, "the frozen decider's stale commit was taken"
        after = await store.load_workflow("wf-frozen")
        assert after is not None
        assert after.version == finished.version
        assert after.state.status.value == "COMPLETED"
        assert after.state.output == finished.state.output
    finally:
        await bus.stop()


async def test_a_losing_commit_never_overwrites_the_winners_task_records(
    store: Store, fresh_store: Store, tmp_path: Path
) -> None:
    topics = Topics()
    bus = EmbeddedBus(str(tmp_path / "bus.db"))
    try:
        document = await started(store, bus, topics, "wf-records")
        loser_store = Frozen(fresh_store)
        loser = DeciderHandler(loser_store, bus, topics, lambda: NOW + 5)  # type: ignore[arg-type]
        # Two different reports for one execution (a worker that answered twice), one per decider.
        losing = asyncio.create_task(
            loser.handle_batch([received(topics, result(document, "add", 100, ":b"), 1)])
        )
        await loser_store.read.wait()
        winner = DeciderHandler(store, bus, topics, lambda: NOW + 10)
        await winner.handle_batch([received(topics, result(document, "add", 3, ":a"), 2)])
        loser_store.thaw.set()  # the loser commits only after the winner's commit is whole
        await losing
        assert loser_store.outcomes[0] is False
        add_id = document.state.tasks["add"].task_id
        record = await store.get_task(add_id)
        assert record is not None
        assert record.output_data == {"n": 3}, "the losing decision's task record overwrote the winner's"
        final = await store.load_workflow("wf-records")
        assert final is not None and final.state.tasks["add"].output_data == {"n": 3}
    finally:
        await bus.stop()
