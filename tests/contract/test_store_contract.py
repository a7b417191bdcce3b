"""The store port's contract. Every adapter runs this same suite (MongoDB here; SQLite joins it)."""

from __future__ import annotations

import asyncio
import pytest

from shared.models.definitions import TaskDef, WorkflowDef
from shared.models.documents import TimerRecord, WorkflowDocument
from shared.models.messages import WorkflowEvent
from shared.models.runtime import TaskState, TaskStatus, WorkflowState, WorkflowStatus
from shared.ports.store import Store

pytestmark = pytest.mark.integration


@pytest.fixture(params=["mongo"])
def store(request: pytest.FixtureRequest) -> Store:
    """The adapter under test; each adapter's fixture lives in tests/conftest.py."""
    return request.getfixturevalue(f"{request.param}_store")


def document(workflow_id: str = "wf-1", version: int = 1, **state: object) -> WorkflowDocument:
    return WorkflowDocument(
        workflow_id=workflow_id,
        version=version,
        state=WorkflowState(workflow_id=workflow_id, workflow_name="w", workflow_version=1, **state),
        updated_at=1000,
    )


def task(task_id: str, seq: int, workflow_id: str = "wf-1", status: TaskStatus = TaskStatus.SCHEDULED) -> TaskState:
    return TaskState(
        task_id=task_id, task_type="t", kind="SIMPLE", task_def_name="t", reference_task_name=f"r{seq}",
        workflow_instance_id=workflow_id, workflow_type="w", status=status, seq=seq,
    )


async def test_definitions_latest_and_by_version(store: Store) -> None:
    for version in (1, 3, 2):
        await store.put_workflow_def(
            WorkflowDef.model_validate({"name": "w", "version": version, "tasks": [{"name": "a", "taskReferenceName": "a"}]})
        )
    latest = await store.get_workflow_def("w")
    assert latest is not None and latest.version == 3
    second = await store.get_workflow_def("w", 2)
    assert second is not None and second.version == 2
    assert await store.get_workflow_def("w", 9) is None
    assert await store.get_workflow_def("nope") is None
    assert [d.version for d in await store.list_workflow_defs()] == [1, 2, 3]
    await store.put_task_def(TaskDef(name="a", retry_count=7))
    await store.put_task_def(TaskDef(name="a", retry_count=5))
    found = await store.get_task_defs(["a", "missing"])
    assert list(found) == ["a"] and found["a"].retry_count == 5


async def test_create_is_exclusive_and_roundtrips(store: Store) -> None:
    doc = document(input={"x": [1, {"y": None}]})
    doc.outbox.append(WorkflowEvent(id="e1", event="completed", workflow_id="wf-1", workflow_name="w", status="COMPLETED"))
    assert await store.create_workflow(doc)
    assert not await store.create_workflow(document())
    loaded = await store.load_workflow("wf-1")
    assert loaded == doc
    assert await store.load_workflow("absent") is None


async def test_commit_is_conditional_on_version(store: Store) -> None:
    await store.create_workflow(document(version=1))
    assert await store.commit_workflow(document(version=2, status=WorkflowStatus.COMPLETED), expected_version=1)
    # A stale writer (it read version 1) cannot commit over version 2.
    assert not await store.commit_workflow(document(version=2, status=WorkflowStatus.FAILED), expected_version=1)
    loaded = await store.load_workflow("wf-1")
    assert loaded is not None and loaded.version == 2 and loaded.state.status is WorkflowStatus.COMPLETED
    assert not await store.commit_workflow(document("ghost", version=2), expected_version=1)
    with pytest.raises(ValueError):
        await store.commit_workflow(document(version=5), expected_version=2)


async def test_concurrent_commits_exactly_one_wins(store: Store) -> None:
    for trial in range(20):
        workflow_id = f"race-{trial}"
        await store.create_workflow(document(workflow_id, version=1))
        results = await asyncio.gather(
            *(store.commit_workflow(document(workflow_id, version=2, correlation_id=str(i)), 1) for i in range(8))
        )
        assert sum(results) == 1, f"trial {trial}: {sum(results)} writers committed version 2"
        winner = results.index(True)
        loaded = await store.load_workflow(workflow_id)
        assert loaded is not None and loaded.version == 2 and loaded.state.correlation_id == str(winner)


async def test_stale_writer_after_unmaterialised_commit_is_fenced(store: Store) -> None:
    """A writer that read version 1 while version 2 was committed elsewhere must lose, and the
    loser's reload must show version 2."""
    await store.create_workflow(document(version=1))
    assert await store.commit_workflow(document(version=2, correlation_id="first"), 1)
    assert not await store.commit_workflow(document(version=2, correlation_id="late"), 1)
    assert await store.commit_workflow(document(version=3, correlation_id="third"), 2)
    loaded = await store.load_workflow("wf-1")
    assert loaded is not None and (loaded.version, loaded.state.correlation_id) == (3, "third")


async def test_outbox_mark_sent_and_sweep_queries(store: Store) -> None:
    doc = document(version=1)
    doc.outbox = [
        WorkflowEvent(id=f"e{i}", event="completed", workflow_id="wf-1", workflow_name="w", status="COMPLETED")
        for i in range(3)
    ]
    doc.outbox_since = 500
    await store.create_workflow(doc)
    await store.create_workflow(document("stale", version=1))
    done = document("done", version=1, status=WorkflowStatus.COMPLETED)
    await store.create_workflow(done)
    swept = await store.find_workflows_to_sweep(outbox_older_than=1000, running_stale_before=2000, limit=10)
    assert sorted(swept) == ["stale", "wf-1"]
    await store.mark_outbox_sent("wf-1", 0)  # a stale version's publisher changes nothing
    loaded = await store.load_workflow("wf-1")
    assert loaded is not None and len(loaded.outbox) == 3
    await store.mark_outbox_sent("wf-1", 1)
    loaded = await store.load_workflow("wf-1")
    assert loaded is not None and loaded.outbox == [] and loaded.version == 1
    assert await store.find_workflows_to_sweep(outbox_older_than=1000, running_stale_before=0, limit=10) == []


async def test_task_records_upsert_idempotently(store: Store) -> None:
    await store.upsert_tasks([task("t2", 2), task("t1", 1)])
    await store.upsert_tasks([task("t1", 1, status=TaskStatus.COMPLETED)])
    await store.upsert_tasks([task("o1", 1, workflow_id="other")])
    listed = await store.list_tasks("wf-1")
    assert [(t.task_id, t.status) for t in listed] == [("t1", TaskStatus.COMPLETED), ("t2", TaskStatus.SCHEDULED)]
    assert (await store.get_task("t2")) == task("t2", 2)
    assert await store.get_task("nope") is None


async def test_timers_claimed_once_until_lease_expires(store: Store) -> None:
    await store.upsert_timer(TimerRecord(timer_id="due", workflow_id="wf", fire_at=100))
    await store.upsert_timer(TimerRecord(timer_id="due", workflow_id="wf", fire_at=100))  # idempotent
    await store.upsert_timer(TimerRecord(timer_id="later", workflow_id="wf", fire_at=5000))
    first, second = await asyncio.gather(
        store.claim_due_timers(now=200, owner="a", lease_ms=1000, limit=10),
        store.claim_due_timers(now=200, owner="b", lease_ms=1000, limit=10),
    )
    assert sorted(t.timer_id for t in first + second) == ["due"]
    assert await store.claim_due_timers(now=900, owner="c", lease_ms=1000, limit=10) == []
    reclaimed = await store.claim_due_timers(now=1300, owner="c", lease_ms=1000, limit=10)
    assert [(t.timer_id, t.claimed_by) for t in reclaimed] == [("due", "c")]
    await store.delete_timers(["due"])
    assert await store.claim_due_timers(now=10_000, owner="d", lease_ms=1000, limit=10) == [
        TimerRecord(timer_id="later", workflow_id="wf", fire_at=5000, claimed_by="d", claim_until=11_000)
    ]
