"""The MongoDB adapter on FerretDB's PostgreSQL backend, at FerretDB's default pool of 50.

FerretDB 1.24 answers an update statement that matches a document while still holding the
connection of the query that found it, and takes a second connection to write. One `update`
command of K such statements holds K connections at once (docs/research/ferretdb-backends.md,
section 2): a group commit of 50 running executions, or a timer pass claiming 50 timers, sent
as one bulk write, took the whole pool and waited for a 51st forever, wedging the server for
every client. These tests send exactly such batches; each fails with a timeout where the
adapter sends them in one command.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
from pymongo import monitoring

from shared.adapters.mongo_codec import UPDATES_PER_COMMAND
from shared.adapters.mongo_store import MongoStore
from shared.models.definitions import TaskDef
from shared.models.documents import TimerRecord, WorkflowDocument
from shared.models.runtime import TaskState, TaskStatus, WorkflowState
from shared.ports.store import Commit
from tests.ferretdb_postgresql import ferretdb_on_postgresql

FERRETDB_DEFAULT_POOL = 50
BATCH = 80
"""More statements than the pool has connections, and several commands' worth of them."""


@pytest.fixture(scope="module")
def ferretdb_pg_url() -> Iterator[str]:
    with ferretdb_on_postgresql() as url:
        yield url


@pytest.fixture
def update_sizes() -> UpdateSizes:
    return UpdateSizes()


@pytest.fixture
async def store(ferretdb_pg_url: str, update_sizes: UpdateSizes) -> AsyncIterator[MongoStore]:
    # A short bound on every operation: a deadlocked server fails the test in seconds.
    adapter = MongoStore(
        ferretdb_pg_url,
        f"cairn_pg_{uuid.uuid4().hex[:10]}",
        timeout_ms=15_000,
        event_listeners=[update_sizes],
    )
    await adapter.open()
    yield adapter
    await adapter.close()


def _document(workflow_id: str, version: int, task: TaskState) -> WorkflowDocument:
    state = WorkflowState(workflow_id=workflow_id, workflow_name="w", workflow_version=1)
    state.tasks[task.task_id] = task
    return WorkflowDocument(workflow_id=workflow_id, version=version, state=state, updated_at=1000 + version)


def _task(workflow_id: str, status: TaskStatus) -> TaskState:
    return TaskState(
        task_id=f"{workflow_id}-t",
        task_type="t",
        kind="SIMPLE",
        task_def_name="t",
        reference_task_name="r",
        workflow_instance_id=workflow_id,
        workflow_type="w",
        status=status,
        seq=1,
    )


class UpdateSizes(monitoring.CommandListener):
    """The number of statements in each `update` command the store sends, and the most such
    commands that were ever on their way at once."""

    def __init__(self) -> None:
        self.sizes: list[int] = []
        self.in_flight: set[int] = set()
        self.most_in_flight = 0

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name == "update":
            self.sizes.append(len(event.command.get("updates", [])))
            self.in_flight.add(event.request_id)
            self.most_in_flight = max(self.most_in_flight, len(self.in_flight))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        self.in_flight.discard(event.request_id)

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        self.in_flight.discard(event.request_id)


async def _commit_twice(store: MongoStore, workflow_id: str) -> None:
    task = _task(workflow_id, TaskStatus.SCHEDULED)
    assert await store.commit_workflows([Commit(_document(workflow_id, 1, task), 0, tasks=[task])]) == [True]
    again = Commit(_document(workflow_id, 2, task), 1, tasks=[task], base_updated_at=1001)
    assert await store.commit_workflows([again]) == [True]


async def test_the_store_bounds_update_commands_on_postgresql_only(store: MongoStore, mongo_url: str) -> None:
    """Found at the first update (a collection to read a plan of); CI's own FerretDB runs on
    SQLite, which has no pool: there one command carries them all."""
    await _commit_twice(store, "sized")
    assert store._update_commands_sized and store._updates_per_command == UPDATES_PER_COMMAND
    on_sqlite = MongoStore(mongo_url, f"cairn_sqlite_{uuid.uuid4().hex[:10]}")
    await on_sqlite.open()
    try:
        await _commit_twice(on_sqlite, "sized")
        assert on_sqlite._update_commands_sized and on_sqlite._updates_per_command is None
    finally:
        await on_sqlite._client.drop_database(on_sqlite._db.name)
        await on_sqlite.close()


async def test_a_group_commit_larger_than_the_pool_commits(
    store: MongoStore, update_sizes: UpdateSizes
) -> None:
    assert BATCH > FERRETDB_DEFAULT_POOL
    ids = [f"pg-{i:03d}" for i in range(BATCH)]
    scheduled = [_task(w, TaskStatus.SCHEDULED) for w in ids]
    created = await store.commit_workflows(
        [Commit(_document(w, 1, t), 0, tasks=[t]) for w, t in zip(ids, scheduled, strict=True)]
    )
    assert all(created)
    # Every execution at once: the read model's replaces and the task records' overwrites
    # (each record exists) are BATCH matching update statements each.
    completed = [_task(w, TaskStatus.COMPLETED) for w in ids]
    committed = await store.commit_workflows(
        [
            Commit(_document(w, 2, t), 1, tasks=[t], read_at=None, base_updated_at=1001)
            for w, t in zip(ids, completed, strict=True)
        ]
    )
    assert all(committed)
    loaded = await store.load_workflows(ids)
    assert {w: d.version for w, d in loaded.items()} == dict.fromkeys(ids, 2)
    records = [await store.get_task(t.task_id) for t in completed[:: BATCH // 8]]
    assert [r.status if r else None for r in records] == [TaskStatus.COMPLETED] * len(records)
    # The read model's replaces and the records' overwrites, BATCH each, in commands of at most 8.
    assert max(update_sizes.sizes) == UPDATES_PER_COMMAND
    assert sum(update_sizes.sizes) >= 2 * BATCH


async def test_a_timer_pass_claiming_more_timers_than_the_pool_claims_them(store: MongoStore) -> None:
    for i in range(BATCH):
        await store.upsert_timer(TimerRecord(timer_id=f"due-{i:03d}", workflow_id="wf", fire_at=100))
    claimed = await store.claim_due_timers(now=200, owner="a", lease_ms=1000, limit=BATCH)
    assert len(claimed) == BATCH
    assert await store.claim_due_timers(now=300, owner="b", lease_ms=1000, limit=BATCH) == []


async def test_update_commands_from_every_path_take_turns(
    store: MongoStore, update_sizes: UpdateSizes
) -> None:
    """A group commit, a timer pass, timer upserts and definition writes at once, as the
    decider's consumers, the timer service and the api run in one process (`cairn dev`): one
    update command on its way at a time, so the process never holds more than 9 connections."""
    ids = [f"turns-{i:03d}" for i in range(40)]
    tasks = [_task(w, TaskStatus.SCHEDULED) for w in ids]
    assert all(
        await store.commit_workflows(
            [Commit(_document(w, 1, t), 0, tasks=[t]) for w, t in zip(ids, tasks, strict=True)]
        )
    )
    for i in range(40):
        await store.upsert_timer(TimerRecord(timer_id=f"turn-{i:03d}", workflow_id="wf", fire_at=100))
    await store.put_task_def(TaskDef(name="turns"))
    update_sizes.most_in_flight = 0
    await asyncio.gather(
        store.commit_workflows(
            [
                Commit(_document(w, 2, t), 1, tasks=[t], base_updated_at=1001)
                for w, t in zip(ids, tasks, strict=True)
            ]
        ),
        store.claim_due_timers(now=200, owner="a", lease_ms=1000, limit=40),
        *(
            store.upsert_timer(TimerRecord(timer_id=f"turn-{i:03d}", workflow_id="wf", fire_at=100))
            for i in range(10)
        ),
        *(store.put_task_def(TaskDef(name="turns", retry_count=i)) for i in range(10)),
    )
    assert update_sizes.most_in_flight == 1
