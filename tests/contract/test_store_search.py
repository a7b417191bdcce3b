"""Workflow search, the same on both stores (shared/search.py): each query form, an exact total,
sort, paging, free text, and an index that follows status changes and removal."""

from __future__ import annotations

from typing import Any

import pytest

from shared.models.documents import WorkflowDocument
from shared.models.runtime import WorkflowState, WorkflowStatus
from shared.ports.store import Commit, Store, commit_one
from shared.search import SearchRequest, parse_query, parse_sort

T0 = 1_700_000_000_000


def execution(n: int, name: str, status: WorkflowStatus, **state: object) -> WorkflowDocument:
    workflow_id = f"wf-{n:02d}"
    return WorkflowDocument(
        workflow_id=workflow_id,
        version=1,
        state=WorkflowState(
            workflow_id=workflow_id,
            workflow_name=name,
            workflow_version=1 + n % 2,
            status=status,
            create_time=T0 + n * 1000,
            start_time=T0 + n * 1000,
            end_time=T0 + n * 1000 + 500 if status.is_terminal else 0,
            input={"order": f"order-{n}"},
            **state,
        ),
        updated_at=T0 + n * 1000 + 500,
    )


@pytest.fixture
async def stored(store: Store) -> Store:
    """Twelve executions: orders 0-5 (even running, odd completed), refunds 6-11 (failed), each
    correlated by its parity."""
    for n in range(12):
        name, status = ("order", WorkflowStatus.RUNNING if n % 2 == 0 else WorkflowStatus.COMPLETED)
        if n >= 6:
            name, status = "refund", WorkflowStatus.FAILED
        assert await commit_one(store, execution(n, name, status, correlation_id=f"corr-{n % 2}"), 0)
    return store


async def ids(
    store: Store,
    query: str | None,
    *,
    sort: str | None = None,
    start: int = 0,
    size: int = 100,
    text: str | None = None,
) -> tuple[int, list[str]]:
    total, documents = await store.search_workflows(
        SearchRequest(parse_query(query), text, parse_sort(sort), start, size)
    )
    return total, [d.workflow_id for d in documents]


async def test_each_query_form(stored: Store) -> None:
    assert await ids(stored, "workflowType = order AND status = RUNNING", sort="startTime:ASC") == (
        3,
        ["wf-00", "wf-02", "wf-04"],
    )
    total, found = await ids(stored, "workflowType IN (order, refund) AND status IN (COMPLETED, FAILED)")
    assert total == 9 and len(found) == 9
    assert (await ids(stored, f"startTime > {T0 + 9000}"))[1] == ["wf-11", "wf-10"]  # newest first
    assert (await ids(stored, f"startTime BETWEEN {T0 + 2000} AND {T0 + 3000}", sort="startTime"))[1] == [
        "wf-02",
        "wf-03",
    ]
    assert (await ids(stored, 'correlationId = "corr-1" AND workflowType = "order"', sort="workflowId"))[
        1
    ] == [
        "wf-01",
        "wf-03",
        "wf-05",
    ]
    assert (await ids(stored, "workflowId = 'wf-07' OR workflowId = wf-08", sort="workflowId"))[1] == [
        "wf-07",
        "wf-08",
    ]
    assert (await ids(stored, "workflowId STARTS_WITH 'wf-1'", sort="workflowId"))[1] == ["wf-10", "wf-11"]
    assert (await ids(stored, "workflowId = wf-1*", sort="workflowId"))[1] == ["wf-10", "wf-11"]
    assert (await ids(stored, "endTime IS NULL AND workflowType = order"))[0] == 3
    assert (await ids(stored, "status != RUNNING"))[0] == 9
    assert (await ids(stored, "version >= 2 AND workflowType = refund", sort="workflowId"))[1] == [
        "wf-07",
        "wf-09",
        "wf-11",
    ]
    assert (await ids(stored, f"updateTime < {T0 + 1000}"))[1] == ["wf-00"]


async def test_total_is_exact_while_paging_in_sort_order(stored: Store) -> None:
    pages = [await ids(stored, None, sort="workflowId:DESC", start=start, size=5) for start in (0, 5, 10)]
    assert [total for total, _ in pages] == [12, 12, 12]
    assert [wid for _, page in pages for wid in page] == [f"wf-{n:02d}" for n in range(11, -1, -1)]
    assert await ids(stored, "status = RUNNING", size=0) == (3, [])
    sorted_by_two = (await ids(stored, "workflowType = order", sort="status:ASC|startTime:DESC"))[1]
    assert sorted_by_two == ["wf-05", "wf-03", "wf-01", "wf-04", "wf-02", "wf-00"]


async def test_free_text_matches_the_document(stored: Store) -> None:
    assert await ids(stored, None, text="ORDER-7") == (1, ["wf-07"])
    assert (await ids(stored, "status = FAILED", text="order-1"))[1] == ["wf-11", "wf-10"]
    assert await ids(stored, None, text="order-1", size=0) == (3, [])  # order-1, -10, -11
    assert await ids(stored, None, text="order-1", sort="workflowId:ASC", start=1, size=1) == (3, ["wf-10"])
    assert await ids(stored, None, text="order-.") == (0, [])  # text, not a pattern


async def test_mongo_state_is_stored_compressed_and_the_text_form_before_still_reads(
    mongo_store: Any,
) -> None:
    """The state is zlib in a BSON binary (mongo_opaque); a document written before that holds
    the JSON text, which loads and is found by free text all the same."""
    import zlib

    from shared.adapters.mongo_opaque import opaque_text

    for n in (1, 2):
        assert await commit_one(mongo_store, execution(n, "order", WorkflowStatus.RUNNING), 0)
    raw = await mongo_store._workflows.find_one({"_id": "wf-01"})
    assert isinstance(raw["state"], bytes)
    text = zlib.decompress(raw["state"]).decode()
    assert '"order":"order-1"' in text
    await mongo_store._workflows.update_one({"_id": "wf-01"}, {"$set": {"state": opaque_text(raw["state"])}})
    assert isinstance((await mongo_store._workflows.find_one({"_id": "wf-01"}))["state"], str)
    loaded = await mongo_store.load_workflows(["wf-01", "wf-02"])
    assert loaded["wf-01"].state.input == {"order": "order-1"}
    assert loaded["wf-02"].state.input == {"order": "order-2"}
    assert await ids(mongo_store, None, text="ORDER-1") == (1, ["wf-01"])
    assert await ids(mongo_store, None, text="order-2") == (1, ["wf-02"])


async def test_the_index_follows_the_end_of_an_execution_and_its_removal(stored: Store) -> None:
    running = (await stored.load_workflows(["wf-00"]))["wf-00"]
    ended = running.model_copy(
        update={
            "version": 2,
            "state": running.state.model_copy(
                update={"status": WorkflowStatus.TERMINATED, "end_time": T0 + 99}
            ),
            "updated_at": T0 + 99_000,
        }
    )
    [won] = await stored.commit_workflows([Commit(ended, 1, read_at=T0, base_updated_at=running.updated_at)])
    assert won
    assert (await ids(stored, "status = TERMINATED"))[1] == ["wf-00"]
    assert (await ids(stored, "status = RUNNING AND workflowType = order"))[0] == 2
    assert await stored.remove_workflow("wf-00")
    assert await ids(stored, "status = TERMINATED") == (0, [])


async def test_task_records_by_query(store: Store) -> None:
    from shared.models.runtime import TaskState, TaskStatus
    from shared.search import TASK_FIELDS

    def record(n: int, status: TaskStatus) -> TaskState:
        return TaskState(
            task_id=f"task-{n}",
            task_type="charge" if n % 2 else "notify",
            kind="SIMPLE",
            task_def_name="charge" if n % 2 else "notify",
            reference_task_name=f"step{n}",
            workflow_instance_id=f"wf-{n % 3}",
            workflow_type="order",
            status=status,
            seq=n,
            start_time=T0 + n,
            end_time=T0 + n + 1,
            output_data={"receipt": f"r-{n}"},
        )

    await store.upsert_tasks(
        [record(n, TaskStatus.FAILED if n % 4 == 1 else TaskStatus.COMPLETED) for n in range(8)]
    )

    async def found(query: str | None, **extra: object) -> tuple[int, list[str]]:
        request = SearchRequest(
            parse_query(query, TASK_FIELDS),
            extra.get("text"),
            parse_sort(extra.get("sort"), TASK_FIELDS),
            0,
            100,  # type: ignore[arg-type]
        )
        total, tasks = await store.search_tasks(request)
        return total, [t.task_id for t in tasks]

    assert await found("taskType = charge AND status = FAILED", sort="startTime:ASC") == (
        2,
        ["task-1", "task-5"],
    )
    assert (await found("workflowId = 'wf-0'", sort="startTime:ASC"))[1] == ["task-0", "task-3", "task-6"]
    assert (await found(f"startTime > {T0 + 5}", sort="startTime:DESC"))[1] == ["task-7", "task-6"]
    assert (await found(None, text="r-4"))[1] == ["task-4"]
    assert (await found("status IN (COMPLETED)"))[0] == 6


async def test_documents_stored_before_search_fields_are_filled_in_by_housekeeping(
    store: Store, adapter: str
) -> None:
    """An upgrade: executions already stored carry none of the top-level searched fields on
    MongoDB (SQLite indexes its old documents when the search table is created)."""
    for n in range(3):
        assert await commit_one(
            store, execution(n, "old", WorkflowStatus.COMPLETED, correlation_id="legacy"), 0
        )
    if adapter == "mongo":
        unset = {"$unset": {"startTime": "", "workflowVersion": "", "correlationId": "", "endTime": ""}}
        for collection in (store._workflows, store._finished):  # type: ignore[attr-defined]
            await collection.update_many({"name": "old"}, unset)
        assert (await ids(store, "correlationId = legacy"))[0] == 0  # as an older version left them
    await store.housekeeping(T0)
    assert await ids(store, "correlationId = legacy", sort="startTime:ASC") == (
        3,
        ["wf-00", "wf-01", "wf-02"],
    )
