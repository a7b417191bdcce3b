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

import uuid
from collections.abc import AsyncIterator, Iterator

import pytest

from shared.adapters.mongo_codec import UPDATES_PER_COMMAND
from shared.adapters.mongo_store import MongoStore
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
async def store(ferretdb_pg_url: str) -> AsyncIterator[MongoStore]:
    # A short bound on every operation: a deadlocked server fails the test in seconds.
    adapter = MongoStore(ferretdb_pg_url, f"cairn_pg_{uuid.uuid4().hex[:10]}", timeout_ms=15_000)
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


def test_the_batches_exceed_the_pool_and_a_command_does_not() -> None:
    assert BATCH > FERRETDB_DEFAULT_POOL
    assert UPDATES_PER_COMMAND < FERRETDB_DEFAULT_POOL // 3  # room for other clients' commands


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


async def test_a_group_commit_larger_than_the_pool_commits(store: MongoStore) -> None:
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


async def test_a_timer_pass_claiming_more_timers_than_the_pool_claims_them(store: MongoStore) -> None:
    for i in range(BATCH):
        await store.upsert_timer(TimerRecord(timer_id=f"due-{i:03d}", workflow_id="wf", fire_at=100))
    claimed = await store.claim_due_timers(now=200, owner="a", lease_ms=1000, limit=BATCH)
    assert len(claimed) == BATCH
    assert await store.claim_due_timers(now=300, owner="b", lease_ms=1000, limit=BATCH) == []
