"""The decider keeps the snapshots it resolved from registered definitions while the store's
definitions generation reads the same (services/decider/snapshot.py, SnapshotMemo): a start after
any change to a definition — the workflow's, a task's, a replaced version, a new latest version,
a change written by another process — runs on the changed one. Real DeciderHandlers on the real
store adapters and the embedded bus."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from services.decider.handler import DeciderHandler
from shared.adapters.embedded_bus import EmbeddedBus
from shared.core.validation import parse_task_def, parse_workflow_def
from shared.models.messages import StartWorkflow
from shared.ports.bus import Received
from shared.ports.store import Store, commit_one
from shared.topics import Topics
from tests.contract.test_store_contract import document

pytestmark = pytest.mark.integration
NOW = 1_800_000_000_000
TOPICS = Topics()


def definition(*task_names: str, version: int = 1) -> dict[str, Any]:
    return {
        "name": "memo_flow",
        "version": version,
        "tasks": [{"name": name, "taskReferenceName": f"r{i}"} for i, name in enumerate(task_names)],
    }


class CountingReads:
    """The real store, counting the reads a snapshot is resolved from."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.definition_reads = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def get_workflow_def(self, name: str, version: int | None = None) -> Any:
        self.definition_reads += 1
        return await self._store.get_workflow_def(name, version)


@pytest.fixture
async def bus(tmp_path: Path) -> AsyncIterator[EmbeddedBus]:
    bus = EmbeddedBus(str(tmp_path / "bus.db"))
    yield bus
    await bus.stop()


async def start(decider: DeciderHandler, store: Store, number: int, version: int | None = None) -> Any:
    """Start one execution in a batch of its own (a new round, as every start batch is); its
    snapshot."""
    workflow_id = f"wf-memo-{number}"
    message = StartWorkflow(
        id=f"start:{workflow_id}", workflow_id=workflow_id, name="memo_flow", version=version
    )
    received = Received(
        topic=TOPICS.workflow_start,
        value=message.to_bytes(),
        key=workflow_id,
        headers={},
        partition=0,
        offset=number,
    )
    await decider.handle_batch([received])
    found = await store.load_workflow(workflow_id)
    assert found is not None and found.definition is not None, found
    return found.definition


def retries(snapshot: Any) -> list[int]:
    return [task.task_definition.retry_count for task in snapshot.tasks]


async def test_a_start_runs_on_the_definitions_as_they_are_now(store: Store, bus: EmbeddedBus) -> None:
    await store.put_task_def(parse_task_def({"name": "memo_a", "retryCount": 1}))
    await store.put_task_def(parse_task_def({"name": "memo_b", "retryCount": 2}))
    await store.put_workflow_def(parse_workflow_def(definition("memo_a")))
    counting = CountingReads(store)
    decider = DeciderHandler(counting, bus, TOPICS, lambda: NOW)  # type: ignore[arg-type]
    kept = await store.definitions_generation() is not None

    first = await start(decider, store, 1)
    assert [t.name for t in first.tasks] == ["memo_a"] and retries(first) == [1]
    again = await start(decider, store, 2)
    assert again == first
    assert counting.definition_reads == (1 if kept else 2), "resolved once while nothing changed"

    await store.put_task_def(parse_task_def({"name": "memo_a", "retryCount": 4}))  # a TaskDef changed
    assert retries(await start(decider, store, 3)) == [4]

    await store.put_workflow_def(parse_workflow_def(definition("memo_a", "memo_b")))  # version 1 replaced
    assert [t.name for t in (await start(decider, store, 4)).tasks] == ["memo_a", "memo_b"]

    await store.put_workflow_def(parse_workflow_def(definition("memo_b", version=2)))  # a new latest
    latest = await start(decider, store, 5)
    assert (latest.version, [t.name for t in latest.tasks]) == (2, ["memo_b"])
    assert [t.name for t in (await start(decider, store, 6, version=1)).tasks] == ["memo_a", "memo_b"]

    assert latest.tasks[0].task_definition.retry_count == 2
    await store.delete_task_def("memo_b")  # a new execution embeds none from now on
    assert (await start(decider, store, 7)).tasks[0].task_definition is None


async def test_the_generation_moves_with_every_definition_change_and_nothing_else(store: Store) -> None:
    generation = await store.definitions_generation()
    if generation is None:  # MongoDB: the memo keeps nothing, every start resolves afresh
        return
    seen = [generation]

    async def moved() -> bool:
        now = await store.definitions_generation()
        assert now is not None
        changed = now != seen[-1]
        seen.append(now)
        return changed

    await store.put_workflow_def(parse_workflow_def(definition("memo_a")))
    assert await moved()
    await store.put_workflow_def(parse_workflow_def(definition("memo_a")))  # the same body again
    assert await moved()
    await store.put_task_def(parse_task_def({"name": "memo_a"}))
    assert await moved()
    assert await store.delete_task_def("memo_a")
    assert await moved()
    assert await store.delete_workflow_def("memo_flow", 1)
    assert await moved()
    assert await create_workflow(store)
    assert not await moved(), "a workflow's commit is no definition change"


async def create_workflow(store: Store) -> bool:
    return await commit_one(store, document("wf-generation"), 0)


async def test_a_change_written_by_another_process_moves_it(sqlite_store: Store, sqlite_path: str) -> None:
    """A definition changed outside this adapter (another process, a hand-run statement): the
    triggers on the tables move the generation all the same."""
    before = await sqlite_store.definitions_generation()
    with sqlite3.connect(sqlite_path) as connection:
        connection.execute(
            "INSERT INTO store_task_defs (name, body) VALUES ('memo_x', '{\"name\": \"memo_x\"}')"
        )
    assert await sqlite_store.definitions_generation() != before
