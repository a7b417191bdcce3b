"""Issue 12 point 6 on every store adapter: retention purges a finished execution with everything
it owns and nothing else, and finished executions stay readable (and writable: a late event, a
later restart) wherever the adapter keeps them. MongoDB moves them out of the collection every
decision updates; the MongoDB-only tests here look at the raw collections to show it."""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest

from services.sweeper.handler import Sweeper
from shared.adapters.mongo_store import MongoStore
from shared.models.documents import TimerRecord, WorkflowDocument
from shared.models.runtime import TaskState, TaskStatus, WorkflowState, WorkflowStatus
from shared.ports.bus import Outgoing
from shared.ports.store import Commit, Store, commit_one
from shared.topics import Topics
from tests.contract.test_store_contract import task

NOW = 1_800_000_000_000
DAY = 86_400_000


def record(workflow_id: str, n: int, status: TaskStatus = TaskStatus.COMPLETED) -> TaskState:
    return task(f"{workflow_id}-t{n}", n, workflow_id, status)


def doc(
    workflow_id: str, version: int, status: WorkflowStatus, at: int, *tasks: TaskState
) -> WorkflowDocument:
    state = WorkflowState(
        workflow_id=workflow_id,
        workflow_name="w",
        workflow_version=1,
        status=status,
        tasks={t.reference_task_name: t for t in tasks},
        update_time=at,
    )
    return WorkflowDocument(workflow_id=workflow_id, version=version, state=state, updated_at=at)


async def run_to_end(store: Store, workflow_id: str, ended_at: int, status: WorkflowStatus) -> None:
    """A workflow that ran two tasks (one with a task claim, one retried with a timer) and ended."""
    first, second = (
        record(workflow_id, 1, TaskStatus.IN_PROGRESS),
        record(workflow_id, 2, TaskStatus.SCHEDULED),
    )
    assert await commit_one(
        store, doc(workflow_id, 1, WorkflowStatus.RUNNING, ended_at - 10, first, second), 0
    )
    assert await store.claim_task(first.task_id, "poller", ended_at - 10, 60 * DAY)
    await store.upsert_timer(
        TimerRecord(timer_id=f"{workflow_id}:retry", workflow_id=workflow_id, fire_at=NOW + DAY)
    )
    done = [record(workflow_id, 1), record(workflow_id, 2, TaskStatus.FAILED)]
    final = doc(workflow_id, 2, status, ended_at, *done)
    assert await store.commit_workflows([Commit(final, 1, done)]) == [True]


async def test_purge_takes_a_finished_execution_with_all_it_owns_and_nothing_else(store: Store) -> None:
    await run_to_end(store, "old-done", NOW - 40 * DAY, WorkflowStatus.COMPLETED)
    await run_to_end(store, "old-failed", NOW - 31 * DAY, WorkflowStatus.FAILED)
    await run_to_end(store, "young", NOW - 29 * DAY, WorkflowStatus.COMPLETED)
    running = record("old-running", 1, TaskStatus.IN_PROGRESS)  # a WAIT for a person since long ago
    assert await commit_one(store, doc("old-running", 1, WorkflowStatus.RUNNING, NOW - 90 * DAY, running), 0)

    purged = await store.purge_finished(NOW - 30 * DAY, limit=1)
    assert len(purged) == 1, "the limit bounds one purge"
    purged += await store.purge_finished(NOW - 30 * DAY, limit=100)
    assert sorted(purged) == ["old-done", "old-failed"]
    assert await store.purge_finished(NOW - 30 * DAY, limit=100) == []

    for gone in ("old-done", "old-failed"):
        assert await store.load_workflow(gone) is None
        assert await store.load_heads([gone]) == {}
        assert await store.list_tasks(gone) == []
        assert await store.get_task(f"{gone}-t1") is None
        assert await store.find_task_workflow(f"{gone}-t2") is None
        # Its task claim went too: the (60-day) lease no longer holds another poller off.
        assert await store.claim_task(f"{gone}-t1", "another", NOW, 1000)
    # ... and its timer: only the kept workflow's timer is ever due.
    due = await store.claim_due_timers(NOW + 2 * DAY, "timer", 1000, 100)
    assert [t.workflow_id for t in due] == ["young"]
    listed = {d.workflow_id for d in await store.list_workflows()}
    assert listed == {"young", "old-running"}

    young = await store.load_workflow("young")
    assert young is not None and young.version == 2 and young.state.status is WorkflowStatus.COMPLETED
    assert [t.task_id for t in await store.list_tasks("young")] == ["young-t1", "young-t2"]
    assert not await store.claim_task("young-t1", "another", NOW, 1000), "a kept claim is untouched"
    kept = await store.load_workflow("old-running")
    assert kept is not None and kept.state.status is WorkflowStatus.RUNNING


async def test_finished_executions_stay_readable_and_take_late_commits(
    store: Store, fresh_store: Store
) -> None:
    await run_to_end(store, "wf", NOW - DAY, WorkflowStatus.COMPLETED)
    assert await create_running(store, "other")
    for reader in (store, fresh_store):
        document = await reader.load_workflow("wf")
        assert document is not None and (document.version, document.state.status) == (
            2,
            WorkflowStatus.COMPLETED,
        )
        [heads] = (await reader.load_heads(["wf"])).values()
        assert heads.status is WorkflowStatus.COMPLETED and set(heads.executions) == {"r1", "r2"}
        assert [d.workflow_id for d in await reader.list_workflows(status=WorkflowStatus.COMPLETED)] == ["wf"]
        assert [d.workflow_id for d in await reader.list_workflows(status=WorkflowStatus.RUNNING)] == [
            "other"
        ]
        assert [d.workflow_id for d in await reader.list_workflows()] == ["other", "wf"]
    # A late event on the finished execution commits a new version (still finished) ...
    late = doc("wf", 3, WorkflowStatus.COMPLETED, NOW, record("wf", 1), record("wf", 2, TaskStatus.FAILED))
    assert await commit_one(store, late, 2)
    assert not await commit_one(store, late, 2), "the version check still holds for finished executions"
    # ... and a create under its id loses, as it would to a running one.
    assert not await commit_one(store, doc("wf", 1, WorkflowStatus.RUNNING, NOW), 0)
    # A later run of it (a restart) is running again, and is found among running executions.
    again = doc("wf", 4, WorkflowStatus.RUNNING, NOW + 1, record("wf", 3, TaskStatus.SCHEDULED))
    assert await commit_one(store, again, 3)
    document = await fresh_store.load_workflow("wf")
    assert document is not None and (document.version, document.state.status) == (4, WorkflowStatus.RUNNING)
    assert {d.workflow_id for d in await fresh_store.list_workflows(status=WorkflowStatus.RUNNING)} == {
        "wf",
        "other",
    }
    assert await fresh_store.list_workflows(status=WorkflowStatus.COMPLETED) == []
    assert await fresh_store.purge_finished(NOW + DAY, 100) == [], "a running execution is never purged"


async def create_running(store: Store, workflow_id: str) -> bool:
    return await commit_one(store, doc(workflow_id, 1, WorkflowStatus.RUNNING, NOW - 1), 0)


class NoBus:
    async def publish(self, messages: Sequence[Outgoing]) -> None:
        assert not [json.loads(m.value) for m in messages]


async def test_the_sweeper_purges_past_the_retention_and_zero_keeps_everything(store: Store) -> None:
    await run_to_end(store, "past", NOW - 31 * DAY, WorkflowStatus.TERMINATED)
    await run_to_end(store, "inside", NOW - 29 * DAY, WorkflowStatus.COMPLETED)

    def sweeper(retention_ms: int) -> Sweeper:
        return Sweeper(
            store,
            NoBus(),
            Topics(),
            lambda: NOW,
            30_000,
            365 * DAY,
            365 * DAY,
            retention_ms=retention_ms,  # type: ignore[arg-type]
        )

    await sweeper(0).sweep_once()
    assert await store.load_workflow("past") is not None, "retention 0 keeps every execution"
    await sweeper(30 * DAY).sweep_once()
    assert await store.load_workflow("past") is None
    assert await store.list_tasks("past") == []
    assert await store.load_workflow("inside") is not None
    assert len(await store.list_tasks("inside")) == 2


@pytest.mark.integration
async def test_mongo_keeps_only_running_executions_where_decisions_write(mongo_store: MongoStore) -> None:
    """The collection every decision replaces a document in holds running executions only, so a
    decision's cost does not grow with history (FerretDB scans it for a replace by `_id`)."""
    store = mongo_store
    for n in range(5):
        await run_to_end(store, f"done-{n}", NOW - DAY, WorkflowStatus.COMPLETED)
    assert await create_running(store, "live")
    assert sorted([d["_id"] async for d in store._workflows.find({}, {"_id": 1})]) == ["live"]
    assert await store._finished.count_documents({}) == 5
    # Executions stored in `workflows` by an earlier version move on the next housekeeping.
    straggler = await store._finished.find_one({"_id": "done-0"})
    assert straggler is not None
    await store._finished.delete_one({"_id": "done-0"})
    await store._workflows.insert_one(straggler)
    await store.housekeeping(NOW)
    assert sorted([d["_id"] async for d in store._workflows.find({}, {"_id": 1})]) == ["live"]
    moved = await store.load_workflow("done-0")
    assert moved is not None and moved.state.status is WorkflowStatus.COMPLETED


@pytest.mark.integration
async def test_mongo_a_move_cut_short_is_finished_by_the_next_decision(mongo_store: MongoStore) -> None:
    """A crash between the insert into `finished` and the delete from `workflows` leaves the
    running version there; the next decision on it loses to the fence and rolls it forward."""
    store = mongo_store
    assert await create_running(store, "cut")
    ended = doc("cut", 2, WorkflowStatus.COMPLETED, NOW)
    running_copy = await store._workflows.find_one({"_id": "cut"})
    assert await commit_one(store, ended, 1)
    assert running_copy is not None
    await store._workflows.insert_one(running_copy)  # as if the delete never happened
    stale = await store.load_workflow("cut")
    assert stale is not None and stale.version == 1, "the reader sees the version before"
    assert not await commit_one(store, doc("cut", 2, WorkflowStatus.RUNNING, NOW + 5), 1)
    assert await store._workflows.count_documents({"_id": "cut"}) == 0
    healed = await store.load_workflow("cut")
    assert healed is not None and (healed.version, healed.state.status) == (2, WorkflowStatus.COMPLETED)


@pytest.mark.integration
async def test_mongo_an_id_left_by_a_create_that_died_is_taken(mongo_store: MongoStore) -> None:
    """A create inserts its id into `workflow_ids` first; one that died before writing its
    document must not block the id forever."""
    await mongo_store._ids.insert_one({"_id": "orphan"})
    assert await create_running(mongo_store, "orphan")
    assert not await create_running(mongo_store, "orphan"), "and then the id is taken"


@pytest.mark.integration
async def test_mongo_an_execution_stored_before_the_id_registry_keeps_its_id(mongo_store: MongoStore) -> None:
    """A running execution written before `workflow_ids` existed has no id record; the first
    housekeeping registers it, so once it has finished its id cannot be created again."""
    store = mongo_store
    assert await create_running(store, "old-timer")
    await store._ids.delete_one({"_id": "old-timer"})  # as an earlier version stored it
    await store.housekeeping(NOW)
    assert await store._ids.count_documents({"_id": "old-timer"}) == 1
    assert await commit_one(store, doc("old-timer", 2, WorkflowStatus.COMPLETED, NOW), 1)
    assert not await create_running(store, "old-timer"), "a finished execution's id was created again"


async def test_the_sweeper_searches_for_purges_hourly_not_every_housekeeping(store: Store) -> None:
    """The search scans `finished` on FerretDB: a 30-day retention looks once an hour."""
    clock = [NOW]
    sweeper = Sweeper(
        store,
        NoBus(),
        Topics(),
        lambda: clock[0],
        30_000,
        365 * DAY,
        365 * DAY,
        retention_ms=30 * DAY,  # type: ignore[arg-type]
    )
    await run_to_end(store, "first", NOW - 31 * DAY, WorkflowStatus.COMPLETED)
    await sweeper.sweep_once()
    assert await store.load_workflow("first") is None
    await run_to_end(store, "second", NOW - 31 * DAY, WorkflowStatus.COMPLETED)
    clock[0] = NOW + 2 * 60_000  # the next housekeeping, two minutes on: no search
    await sweeper.sweep_once()
    assert await store.load_workflow("second") is not None
    clock[0] = NOW + 3_600_000
    await sweeper.sweep_once()
    assert await store.load_workflow("second") is None
