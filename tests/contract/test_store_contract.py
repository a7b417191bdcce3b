"""The store port's contract. Every adapter runs this same suite: MongoDB (a real server, see
deploy/local/up.sh) and SQLite (a file under the test's tmp_path)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from shared.models.definitions import TaskDef, WorkflowDef
from shared.models.documents import TimerRecord, WorkflowDocument
from shared.models.messages import WorkflowEvent
from shared.models.runtime import TaskState, TaskStatus, WorkflowState, WorkflowStatus
from shared.ports.store import Commit, Store, commit_one, heads_of


def document(workflow_id: str = "wf-1", version: int = 1, **state: object) -> WorkflowDocument:
    return WorkflowDocument(
        workflow_id=workflow_id,
        version=version,
        state=WorkflowState(workflow_id=workflow_id, workflow_name="w", workflow_version=1, **state),
        updated_at=1000,
    )


async def create(store: Store, doc: WorkflowDocument) -> bool:
    assert doc.version == 1
    return await commit_one(store, doc, 0)


def task(
    task_id: str, seq: int, workflow_id: str = "wf-1", status: TaskStatus = TaskStatus.SCHEDULED
) -> TaskState:
    return TaskState(
        task_id=task_id,
        task_type="t",
        kind="SIMPLE",
        task_def_name="t",
        reference_task_name=f"r{seq}",
        workflow_instance_id=workflow_id,
        workflow_type="w",
        status=status,
        seq=seq,
    )


async def test_definitions_latest_and_by_version(store: Store) -> None:
    for version in (1, 3, 2):
        await store.put_workflow_def(
            WorkflowDef.model_validate(
                {"name": "w", "version": version, "tasks": [{"name": "a", "taskReferenceName": "a"}]}
            )
        )
    latest = await store.get_workflow_def("w")
    assert latest is not None and latest.version == 3
    second = await store.get_workflow_def("w", 2)
    assert second is not None and second.version == 2
    assert await store.get_workflow_def("w", 9) is None
    assert await store.get_workflow_def("nope") is None
    assert [await store.has_workflow_def(*key) for key in (("w",), ("w", 2), ("w", 9), ("nope",))] == [
        True,
        True,
        False,
        False,
    ]
    assert [d.version for d in await store.list_workflow_defs()] == [1, 2, 3]
    assert await store.delete_workflow_def("w", 3) is True
    assert await store.delete_workflow_def("w", 3) is False
    latest = await store.get_workflow_def("w")
    assert latest is not None and latest.version == 2
    assert await store.has_workflow_def("w", 3) is False and await store.has_workflow_def("w") is True
    await store.put_task_def(TaskDef(name="a", retry_count=7))
    await store.put_task_def(TaskDef(name="a", retry_count=5))
    found = await store.get_task_defs(["a", "missing"])
    assert list(found) == ["a"] and found["a"].retry_count == 5
    assert await store.delete_task_def("a") is True
    assert await store.delete_task_def("a") is False
    assert await store.get_task_defs(["a"]) == {}


async def test_create_is_exclusive_and_roundtrips(store: Store) -> None:
    doc = document(input={"x": [1, {"y": None}]})
    doc.outbox.append(
        WorkflowEvent(id="e1", event="completed", workflow_id="wf-1", workflow_name="w", status="COMPLETED")
    )
    assert await create(store, doc)
    assert not await create(store, document())
    loaded = await store.load_workflow("wf-1")
    assert loaded == doc
    assert await store.load_workflow("absent") is None


async def test_commit_is_conditional_on_version(store: Store) -> None:
    await create(store, document(version=1))
    assert await commit_one(store, document(version=2, status=WorkflowStatus.COMPLETED), expected_version=1)
    # A stale writer (it read version 1) cannot commit over version 2.
    assert not await commit_one(store, document(version=2, status=WorkflowStatus.FAILED), expected_version=1)
    loaded = await store.load_workflow("wf-1")
    assert loaded is not None and loaded.version == 2 and loaded.state.status is WorkflowStatus.COMPLETED
    assert not await commit_one(store, document("ghost", version=2), expected_version=1)
    with pytest.raises(ValueError):
        await commit_one(store, document(version=5), expected_version=2)


async def test_concurrent_commits_exactly_one_wins(store: Store) -> None:
    for trial in range(20):
        workflow_id = f"race-{trial}"
        await create(store, document(workflow_id, version=1))
        results = await asyncio.gather(
            *(commit_one(store, document(workflow_id, version=2, correlation_id=str(i)), 1) for i in range(8))
        )
        assert sum(results) == 1, f"trial {trial}: {sum(results)} writers committed version 2"
        winner = results.index(True)
        loaded = await store.load_workflow(workflow_id)
        assert loaded is not None and loaded.version == 2 and loaded.state.correlation_id == str(winner)


async def test_stale_writer_after_unmaterialised_commit_is_fenced(store: Store) -> None:
    """A writer that read version 1 while version 2 was committed elsewhere must lose, and the
    loser's reload must show version 2."""
    await create(store, document(version=1))
    assert await commit_one(store, document(version=2, correlation_id="first"), 1)
    assert not await commit_one(store, document(version=2, correlation_id="late"), 1)
    assert await commit_one(store, document(version=3, correlation_id="third"), 2)
    loaded = await store.load_workflow("wf-1")
    assert loaded is not None and (loaded.version, loaded.state.correlation_id) == (3, "third")


async def test_group_commit_mixes_creates_updates_winners_and_losers(store: Store) -> None:
    await create(store, document("a", version=1))
    await create(store, document("b", version=1))
    assert await commit_one(store, document("b", version=2, correlation_id="b2"), 1)
    results = await store.commit_workflows(
        [
            Commit(document("a", version=2, correlation_id="a2"), 1, [task("ta", 1, "a")]),
            Commit(document("b", version=2), 1, [task("tb", 1, "b")]),  # stale: b is at 2 already
            Commit(document("c", version=1), 0, [task("tc", 1, "c")]),
            Commit(document("a", version=1), 0),  # create of an existing workflow
        ]
    )
    assert results == [True, False, True, False]
    loaded = await store.load_workflows(["a", "b", "c", "zz"])
    assert {k: v.version for k, v in loaded.items()} == {"a": 2, "b": 2, "c": 1}
    assert loaded["a"].state.correlation_id == "a2" and loaded["b"].state.correlation_id == "b2"
    # Task records are written before the commit point, losers' included (a retry rewrites them).
    assert [t.task_id for t in await store.list_tasks("a")] == ["ta"]
    assert [t.task_id for t in await store.list_tasks("c")] == ["tc"]


async def test_outbox_mark_sent_and_sweep_queries(store: Store) -> None:
    doc = document(version=1)
    doc.outbox = [
        WorkflowEvent(
            id=f"e{i}", event="completed", workflow_id="wf-1", workflow_name="w", status="COMPLETED"
        )
        for i in range(3)
    ]
    doc.updated_at = 500
    await create(store, doc)
    await create(store, document("stale", version=1))
    done = document("done", version=1, status=WorkflowStatus.COMPLETED)
    await create(store, done)
    assert await store.find_unpublished(older_than=1000, limit=10) == ["wf-1"]
    assert await store.find_unpublished(older_than=400, limit=10) == []
    # Both are RUNNING with nothing that could move them: due since their update time (0).
    assert await store.find_needing_attention(2000, None, 10) == [(0, "stale"), (0, "wf-1")]
    assert await store.find_needing_attention(0, None, 10) == []
    await store.mark_outboxes_sent([("wf-1", 0)])  # a stale version's publisher changes nothing
    loaded = await store.load_workflow("wf-1")
    assert loaded is not None and len(loaded.outbox) == 3
    assert [m.id for m in loaded.outbox] == ["e0", "e1", "e2"]
    await store.mark_outboxes_sent([("wf-1", 1)])
    loaded = await store.load_workflow("wf-1")
    assert loaded is not None and loaded.outbox == [] and loaded.version == 1
    assert await store.find_unpublished(older_than=1000, limit=10) == []
    # A newer commit that carries no outbox leaves nothing to publish.
    assert await commit_one(store, document(version=2), 1)
    loaded = await store.load_workflow("wf-1")
    assert loaded is not None and loaded.outbox == []


async def test_task_records_upsert_idempotently(store: Store) -> None:
    await store.upsert_tasks([task("t2", 2), task("t1", 1)])
    await store.upsert_tasks([task("t1", 1, status=TaskStatus.COMPLETED)])
    await store.upsert_tasks([task("o1", 1, workflow_id="other")])
    listed = await store.list_tasks("wf-1")
    assert [(t.task_id, t.status) for t in listed] == [
        ("t1", TaskStatus.COMPLETED),
        ("t2", TaskStatus.SCHEDULED),
    ]
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


class ClaimantDiedError(Exception):
    """Stands for a timer replica killed in the middle of a claim."""


class _DiesOnWrite:
    """A MongoDB collection as a process sees it that dies at its first write to it: reads pass."""

    WRITES = frozenset(
        {
            "update_one",
            "update_many",
            "bulk_write",
            "replace_one",
            "find_one_and_update",
            "find_one_and_replace",
        }
    )

    def __init__(self, collection: Any) -> None:
        self._collection = collection

    def __getattr__(self, name: str) -> Any:
        if name in self.WRITES:

            async def die(*args: object, **kwargs: object) -> None:
                raise ClaimantDiedError(name)

            return die
        return getattr(self._collection, name)


async def die_mid_claim(adapter: str, store: Store, now: int, lease_ms: int) -> None:
    """A timer replica starts claiming the due timers and dies before it has finished.

    MongoDB: it dies after its claim records are inserted and before the timer documents are
    written (the gap between the two). SQLite claims in one transaction, so a claimant dies either
    before it (leaving nothing) or after it (leaving a whole claim that nobody fires): the latter."""
    if adapter != "mongo":
        assert await store.claim_due_timers(now=now, owner="dead", lease_ms=lease_ms, limit=100)
        return
    raw: Any = store
    timers = raw._timers
    raw._timers = _DiesOnWrite(timers)
    try:
        with pytest.raises(ClaimantDiedError):
            await store.claim_due_timers(now=now, owner="dead", lease_ms=lease_ms, limit=100)
    finally:
        raw._timers = timers
    assert await raw._timer_claims.count_documents({}) > 0, "the claimant died before the gap"


async def claim_concurrently(stores: list[Store], now: int, lease_ms: int = 1000) -> list[tuple[str, str]]:
    """(claimer, timer id) of every claim made by eight concurrent claimers across `stores`."""
    results = await asyncio.gather(
        *(
            adapter.claim_due_timers(now=now, owner=f"c{i}", lease_ms=lease_ms, limit=100)
            for i, adapter in enumerate(stores * (8 // len(stores)))
        )
    )
    claims = [(f"c{i}", timer.timer_id) for i, timers in enumerate(results) for timer in timers]
    for i, timers in enumerate(results):
        assert all(t.claimed_by == f"c{i}" and t.claim_until == now + lease_ms for t in timers)
    return claims


async def test_timer_whose_claimant_died_mid_claim_is_claimed_again_once(
    adapter: str, store: Store, fresh_store: Store
) -> None:
    """The port's promise: a timer whose claimant died is claimed again once the lease runs out —
    by exactly one of several concurrent claimers (two processes), and again after that one dies."""
    for trial in range(3):
        timer_id = f"t{trial}"
        await store.upsert_timer(TimerRecord(timer_id=timer_id, workflow_id="wf", fire_at=100))
        await die_mid_claim(adapter, fresh_store, now=200, lease_ms=1000)
        # While the dead claimant's lease lasts, nobody fires the timer.
        assert await claim_concurrently([store, fresh_store], now=1199) == []
        # Once it has run out, exactly one claimer does, and holds it for its own lease.
        claims = await claim_concurrently([store, fresh_store], now=1200)
        assert [timer for _, timer in claims] == [timer_id], f"trial {trial}: {claims}"
        assert await claim_concurrently([fresh_store, store], now=2199) == []
        # The winner dies too (it never deletes the timer), and the arm request is redelivered.
        await store.upsert_timer(TimerRecord(timer_id=timer_id, workflow_id="wf", fire_at=100))
        again = await claim_concurrently([fresh_store, store], now=2200)
        assert [timer for _, timer in again] == [timer_id], f"trial {trial}: after {claims} died: {again}"
        await store.delete_timers([timer_id])
        assert await claim_concurrently([store, fresh_store], now=10_000) == []


async def test_housekeeping_keeps_timer_claims_and_prunes_those_of_gone_timers(
    adapter: str, store: Store, fresh_store: Store
) -> None:
    """Housekeeping long after a claim ran out must not let two claimers in (a timer that still
    exists keeps its claim records); on MongoDB it prunes claim records whose timer is gone."""
    day = 24 * 3600 * 1000
    for timer_id in ("kept", "orphaned", "deleted"):
        await store.upsert_timer(TimerRecord(timer_id=timer_id, workflow_id="wf", fire_at=100))
    await die_mid_claim(adapter, fresh_store, now=200, lease_ms=1000)
    await store.delete_timers(["deleted"])
    raw: Any = store
    if adapter == "mongo":
        assert await raw._timer_claims.count_documents({"_id": {"$regex": "^deleted@"}}) == 0
        # Records whose timer is gone without them: "orphaned" was deleted by a process that died
        # before it removed the claim records (or a claimant that had read the timer just before
        # its deletion inserted after it); "legacy" is from the adapter's previous version.
        await raw._timers.delete_one({"_id": "orphaned"})
        await raw._timer_claims.insert_one({"_id": "legacy@0", "owner": "old", "at": 200})
        # A gone timer's chain whose last claim is recent: it goes whole or not at all.
        await raw._timer_claims.insert_many(
            [
                {"_id": "recent@0", "timerId": "recent", "owner": "x", "at": 200, "claimUntil": 1200},
                {
                    "_id": "recent@1200",
                    "timerId": "recent",
                    "owner": "y",
                    "at": day - 1000,
                    "claimUntil": day,
                },
            ]
        )
    else:
        await store.delete_timers(["orphaned"])

    await store.housekeeping(now=2000)  # young records of gone timers stay a while
    if adapter == "mongo":
        assert await raw._timer_claims.count_documents({"_id": {"$in": ["orphaned@0", "legacy@0"]}}) == 2

    await store.housekeeping(now=day)
    if adapter == "mongo":
        remaining = sorted([r["_id"] async for r in raw._timer_claims.find({}, {"_id": 1})])
        assert remaining == ["kept@0", "recent@0", "recent@1200"], "only gone timers' old chains go"
    assert [timer for _, timer in await claim_concurrently([store, fresh_store], now=day)] == ["kept"]
    # All its records are old now, but the timer still exists: they stay, and so does exclusivity.
    await store.housekeeping(now=2 * day)
    if adapter == "mongo":
        remaining = sorted([r["_id"] async for r in raw._timer_claims.find({}, {"_id": 1})])
        assert remaining == ["kept@0", "kept@1200"]
    assert [timer for _, timer in await claim_concurrently([fresh_store, store], now=2 * day)] == ["kept"]


@pytest.mark.integration
async def test_mongo_timer_stuck_under_the_previous_claim_format_is_claimed_again(
    mongo_store: Any, mongo_fresh_store: Any
) -> None:
    """The previous adapter version's claim record (`<timerId>@<claimUntil>` with only `owner` and
    `at`) left by a claimant that died mid-claim: the timer is claimed once that claimant's lease,
    counted from `at`, has run out."""
    await mongo_store.upsert_timer(TimerRecord(timer_id="stuck", workflow_id="wf", fire_at=100))
    await mongo_store._timer_claims.insert_one({"_id": "stuck@0", "owner": "dead", "at": 200})
    assert await claim_concurrently([mongo_store, mongo_fresh_store], now=1199) == []
    claims = await claim_concurrently([mongo_fresh_store, mongo_store], now=1200)
    assert [timer for _, timer in claims] == ["stuck"]


async def test_definition_snapshot_roundtrips_through_a_cold_reader(store: Store, fresh_store: Store) -> None:
    definition = WorkflowDef.model_validate(
        {
            "name": "w",
            "tasks": [
                {"name": "a", "taskReferenceName": "a", "taskDefinition": {"name": "a", "retryCount": 1}}
            ],
        }
    )
    doc = document("snap", version=1)
    doc.definition = definition
    assert await create(store, doc)
    second = document("snap2", version=1)
    second.definition = definition.model_copy(deep=True)  # same content: stored once, same result
    assert await create(store, second)
    assert (await store.load_workflow("snap")).definition == definition  # type: ignore[union-attr]
    loaded = await fresh_store.load_workflows(["snap", "snap2"])  # another process: nothing cached
    assert loaded["snap"].definition == definition and loaded["snap2"].definition == definition


async def test_definition_snapshot_of_a_losing_commit_does_not_go_missing(
    store: Store, fresh_store: Store
) -> None:
    """The same definition object first rides on a commit that loses, then on one that wins: the
    winner's snapshot must be readable by a process that has nothing cached."""
    definition = WorkflowDef.model_validate(
        {"name": "w", "version": 4, "tasks": [{"name": "a", "taskReferenceName": "a"}]}
    )
    assert await create(store, document("taken", version=1))
    loser = document("taken", version=1)
    loser.definition = definition
    assert not await create(store, loser)
    winner = document("later", version=1)
    winner.definition = definition
    assert await create(store, winner)
    loaded = await fresh_store.load_workflow("later")
    assert loaded is not None and loaded.definition == definition


async def test_list_workflows_filters_and_orders_newest_first(store: Store) -> None:
    specs = [
        ("old", "w", WorkflowStatus.RUNNING, 100),
        ("done", "w", WorkflowStatus.COMPLETED, 300),
        ("other", "v", WorkflowStatus.RUNNING, 400),
        ("new", "w", WorkflowStatus.RUNNING, 500),
        ("mid", "v", WorkflowStatus.FAILED, 200),
    ]
    for workflow_id, name, status, updated_at in specs:
        doc = document(workflow_id, status=status)
        doc.state.workflow_name = name
        doc.updated_at = updated_at
        assert await create(store, doc)

    async def listed(**filters: object) -> list[str]:
        return [d.workflow_id for d in await store.list_workflows(**filters)]  # type: ignore[arg-type]

    assert await listed() == ["new", "other", "done", "mid", "old"]
    assert await listed(limit=2) == ["new", "other"]
    assert await listed(status=WorkflowStatus.RUNNING) == ["new", "other", "old"]
    assert await listed(name="w") == ["new", "done", "old"]
    assert await listed(name="w", status=WorkflowStatus.RUNNING, limit=1) == ["new"]
    assert await listed(name="v", status=WorkflowStatus.COMPLETED) == []
    assert await listed(name="nope") == []
    # A commit moves a workflow to the front and into its new status.
    assert await commit_one(store, document("old", version=2, status=WorkflowStatus.COMPLETED), 1)
    moved = await store.list_workflows(status=WorkflowStatus.COMPLETED)
    assert [(d.workflow_id, d.version) for d in moved] == [("old", 2), ("done", 1)]
    # Listed documents are what load_workflow returns.
    [newest] = await store.list_workflows(name="w", status=WorkflowStatus.RUNNING, limit=1)
    assert newest == await store.load_workflow("new")


async def test_find_task_workflow_live_and_history(store: Store, fresh_store: Store) -> None:
    live = document("wf-live", tasks={"r1": task("live-1", 1, "wf-live")})
    assert await create(store, live)
    assert await store.find_task_workflow("live-1") == "wf-live"
    # A later commit adds an execution, and records a finished one as history.
    finished = task("live-1", 1, "wf-live", status=TaskStatus.COMPLETED)
    second = document("wf-live", version=2, tasks={"r1": finished, "r2": task("live-2", 2, "wf-live")})
    [won] = await store.commit_workflows([Commit(second, 1, [finished])])
    assert won
    assert await store.find_task_workflow("live-1") == "wf-live"
    assert await store.find_task_workflow("live-2") == "wf-live"
    # History only: a retried execution no longer in the document.
    await store.upsert_tasks([task("hist-1", 1, "wf-hist", status=TaskStatus.FAILED)])
    assert await store.find_task_workflow("hist-1") == "wf-hist"
    assert await store.find_task_workflow("absent") is None
    # Another process sees the same.
    assert await fresh_store.find_task_workflow("live-2") == "wf-live"
    assert await fresh_store.find_task_workflow("hist-1") == "wf-hist"


async def test_remove_workflow_deletes_execution_and_history(store: Store, fresh_store: Store) -> None:
    first = document("wf-gone", tasks={"r1": task("gone-1", 1, "wf-gone")})
    assert await create(store, first)
    done = task("gone-1", 1, "wf-gone", status=TaskStatus.COMPLETED)
    final = document("wf-gone", version=2, status=WorkflowStatus.COMPLETED, tasks={"r1": done})
    assert (await store.commit_workflows([Commit(final, 1, [done])])) == [True]
    assert await create(store, document("wf-kept"))

    assert await store.remove_workflow("wf-gone")
    assert await fresh_store.load_workflow("wf-gone") is None
    assert await fresh_store.list_tasks("wf-gone") == []
    assert await fresh_store.find_task_workflow("gone-1") is None
    assert not await store.remove_workflow("wf-gone"), "removing twice reports nothing removed"
    assert await fresh_store.load_workflow("wf-kept") is not None
    # The id is free again: a new execution under it starts from version 1.
    assert await create(store, document("wf-gone"))


async def test_claim_task_exclusive_until_lease_expires(store: Store) -> None:
    results = await asyncio.gather(
        store.claim_task("t1", "w1", now=1000, lease_ms=500),
        store.claim_task("t1", "w2", now=1000, lease_ms=500),
    )
    assert sorted(results) == [False, True]
    # Live: nobody gets it, the holder included.
    assert not await store.claim_task("t1", "w1", now=1200, lease_ms=500)
    assert not await store.claim_task("t1", "w3", now=1499, lease_ms=500)
    # Another execution is independent.
    assert await store.claim_task("t2", "w3", now=1200, lease_ms=500)
    # Once the lease has run out, the next claim wins, and holds for its own lease.
    assert await store.claim_task("t1", "w3", now=1500, lease_ms=500)
    assert not await store.claim_task("t1", "w1", now=1999, lease_ms=500)
    assert await store.claim_task("t1", "w1", now=2600, lease_ms=500)
    # Housekeeping never frees a live claim.
    await store.housekeeping(now=2700)
    assert not await store.claim_task("t1", "w2", now=2700, lease_ms=500)
    with pytest.raises(ValueError):
        await store.claim_task("t3", "w1", now=1000, lease_ms=0)


async def test_claim_task_exclusive_across_processes(store: Store, fresh_store: Store) -> None:
    for trial in range(10):
        task_id = f"race-{trial}"
        results = await asyncio.gather(
            *(
                adapter.claim_task(task_id, f"w{i}", now=1000, lease_ms=60_000)
                for i, adapter in enumerate([store, fresh_store] * 4)
            )
        )
        assert sum(results) == 1, f"trial {trial}: {sum(results)} claimers won"
        expired = await asyncio.gather(
            *(
                adapter.claim_task(task_id, f"w{i}", now=61_000, lease_ms=60_000)
                for i, adapter in enumerate([fresh_store, store] * 4)
            )
        )
        assert sum(expired) == 1, f"trial {trial}: {sum(expired)} claimers won after expiry"


async def test_renew_task_claim_extends_the_holders_claim_only(store: Store) -> None:
    """The api's hand-out: a short claim, renewed to the response timeout once the poller has
    its answer (services/api/dispatch.py)."""
    assert await store.claim_task("t1", "h1", now=1000, lease_ms=500)
    # Another holder cannot renew a claim that is live, nor take it.
    assert not await store.renew_task_claim("t1", "h2", now=1200, lease_ms=60_000)
    assert not await store.claim_task("t1", "h2", now=1499, lease_ms=500)
    # The holder can, and the renewed claim keeps rivals out past the short lease.
    assert await store.renew_task_claim("t1", "h1", now=1200, lease_ms=60_000)
    assert not await store.claim_task("t1", "h2", now=1500, lease_ms=500)
    assert not await store.renew_task_claim("t1", "h2", now=30_000, lease_ms=500)
    await store.housekeeping(now=30_000)
    assert not await store.claim_task("t1", "h2", now=61_199, lease_ms=500)
    # A renewal never shortens a claim.
    assert await store.renew_task_claim("t1", "h1", now=2000, lease_ms=500)
    assert not await store.claim_task("t1", "h2", now=61_000, lease_ms=500)
    assert await store.claim_task("t1", "h2", now=61_300, lease_ms=500)

    # The short lease ran out and a rival claimed: the late renewal fails, the rival keeps it.
    assert await store.claim_task("t2", "h1", now=1000, lease_ms=500)
    assert await store.claim_task("t2", "h2", now=1600, lease_ms=500)
    assert not await store.renew_task_claim("t2", "h1", now=1700, lease_ms=60_000)
    assert not await store.claim_task("t2", "h3", now=2099, lease_ms=500)

    # Ran out with nobody claiming since: the late renewal still holds it (pruned or not).
    assert await store.claim_task("t3", "h1", now=1000, lease_ms=500)
    assert await store.renew_task_claim("t3", "h1", now=1600, lease_ms=60_000)
    assert not await store.claim_task("t3", "h2", now=2000, lease_ms=500)
    assert await store.claim_task("t4", "h1", now=1000, lease_ms=500)
    await store.housekeeping(now=1600)
    assert await store.renew_task_claim("t4", "h1", now=1600, lease_ms=60_000)
    assert not await store.claim_task("t4", "h2", now=2000, lease_ms=500)
    with pytest.raises(ValueError):
        await store.renew_task_claim("t4", "h1", now=2000, lease_ms=0)


async def test_renew_task_claim_races_a_rival_claim_to_one_winner(store: Store, fresh_store: Store) -> None:
    """A late renewal and a rival's claim of the run-out claim at the same moment: exactly one
    holds the execution afterwards, on one adapter instance or two."""
    for trial in range(10):
        task_id = f"renew-race-{trial}"
        assert await store.claim_task(task_id, "holder", now=1000, lease_ms=500)
        results = await asyncio.gather(
            store.renew_task_claim(task_id, "holder", now=2000, lease_ms=60_000),
            fresh_store.claim_task(task_id, "rival", now=2000, lease_ms=60_000),
            store.claim_task(task_id, "rival-2", now=2000, lease_ms=60_000),
        )
        assert sum(results) == 1, f"trial {trial}: {results}"


async def test_mongo_reopen_creates_no_index(mongo_url: str, unique: str) -> None:
    """A service (re)starting on an existing database only reads the index list: on FerretDB 1.x
    a createIndexes racing other writers of the database deadlocked the whole server."""
    from pymongo import monitoring

    from shared.adapters.mongo_store import MongoStore

    class Commands(monitoring.CommandListener):
        def __init__(self) -> None:
            self.names: list[str] = []

        def started(self, event: monitoring.CommandStartedEvent) -> None:
            self.names.append(event.command_name)

        def succeeded(self, event: monitoring.CommandSucceededEvent) -> None: ...

        def failed(self, event: monitoring.CommandFailedEvent) -> None: ...

    database = f"cairn_reopen_{unique}"
    first_commands, second_commands = Commands(), Commands()
    first = MongoStore(mongo_url, database, event_listeners=[first_commands])
    await first.open()
    assert "createIndexes" in first_commands.names, "a new database gets its indexes"
    second = MongoStore(mongo_url, database, event_listeners=[second_commands])
    await second.open()
    assert "listIndexes" in second_commands.names and "createIndexes" not in second_commands.names
    await first.close()
    await second._client.drop_database(database)
    await second.close()


async def test_user_keys_with_dots_and_dollars_round_trip(store: Store) -> None:
    """Inputs, outputs and definitions are the user's: keys such as "a.b" or "$x" are kept as
    they are (FerretDB refuses them as field names; before, every commit of such a workflow
    failed and its decider batch came back forever)."""
    odd = {"a.b": 1, "$x": {"c.d": [1, {"$e": 2}]}, "conductor.failure_workflow": "wf-f"}
    done = task("odd-1", 1, "wf-odd", status=TaskStatus.COMPLETED).model_copy(
        update={"input_data": odd, "output_data": odd}
    )
    doc = document("wf-odd", input=odd, output=odd, variables=odd, timers={}, tasks={"r1": done})
    assert await create(store, doc)
    await store.upsert_tasks([done])
    loaded = await store.load_workflow("wf-odd")
    assert loaded is not None and loaded.state.output == odd and loaded.state.tasks["r1"].output_data == odd
    stored = await store.get_task("odd-1")
    assert stored is not None and stored.input_data == odd and stored.output_data == odd
    definition = WorkflowDef.model_validate(
        {
            "name": "odd",
            "tasks": [
                {"name": "a", "taskReferenceName": "a", "inputParameters": {"x.y": "${workflow.input.a}"}}
            ],
            "outputParameters": {"$out.put": "${a.output}"},
        }
    )
    await store.put_workflow_def(definition)
    assert await store.get_workflow_def("odd") == definition
    await store.put_task_def(TaskDef(name="odd", input_template={"k.ey": 1}))
    assert (await store.get_task_defs(["odd"]))["odd"].input_template == {"k.ey": 1}


async def test_heads_say_what_the_document_says(store: Store, fresh_store: Store) -> None:
    """load_heads answers the api's hand-out and result checks without the whole document: the
    workflow's status and each current execution's id, status, attempt and deliveries."""
    running = task("t-1", 1).model_copy(update={"dispatch_count": 2, "task_type": "charge"})
    done = task("t-2", 2, status=TaskStatus.COMPLETED).model_copy(update={"retry_count": 1})
    doc = document(tasks={"r1": running, "r2": done}, status=WorkflowStatus.RUNNING)
    assert await create(store, doc)
    assert await create(store, document("wf-2", status=WorkflowStatus.COMPLETED))
    heads = await fresh_store.load_heads(["wf-1", "wf-2", "nope"])
    assert set(heads) == {"wf-1", "wf-2"}
    one = heads["wf-1"]
    assert one.status is WorkflowStatus.RUNNING and set(one.executions) == {"r1", "r2"}
    first = one.by_task_id("t-1")
    assert first is not None and (first.reference_task_name, first.task_type) == ("r1", "charge")
    assert (first.status, first.dispatch_count, first.retry_count) == (TaskStatus.SCHEDULED, 2, 0)
    second = one.executions["r2"]
    assert (second.task_id, second.status, second.retry_count) == ("t-2", TaskStatus.COMPLETED, 1)
    assert heads["wf-2"].status is WorkflowStatus.COMPLETED and heads["wf-2"].executions == {}
    assert heads["wf-1"] == heads_of(await fresh_store.load_workflow("wf-1"))  # type: ignore[arg-type]


async def test_heads_of_running_executions_look_among_finished_ones_where_that_is_cheap(
    store: Store, fresh_store: Any
) -> None:
    """An api's start polls with `running_only` until its execution is readable. One that finished
    in its first decision is found at once where a look for a missing id is an index lookup
    (SQLite, MongoDB); FerretDB, where that look scans, leaves finished ones out (found by the
    start's last look). Before, MongoDB left them out too: such a start waited the full 5 s."""
    assert await create(store, document("wf-done", status=WorkflowStatus.COMPLETED))
    assert await create(store, document("wf-run", status=WorkflowStatus.RUNNING))
    ids = ["wf-done", "wf-run", "wf-none"]
    if getattr(fresh_store, "_lookups_by_id_indexed", True) is False:  # FerretDB
        assert set(await fresh_store.load_heads(ids, running_only=True)) == {"wf-run"}
        fresh_store._lookups_by_id_indexed = True  # what open() finds on MongoDB
    assert set(await fresh_store.load_heads(ids, running_only=True)) == {"wf-done", "wf-run"}
    assert set(await fresh_store.load_heads(ids)) == {"wf-done", "wf-run"}


async def test_sqlite_heads_of_a_row_written_before_the_heads_column(tmp_path: Any) -> None:
    """A state file from before heads were kept: the column is added on open and such rows are
    read with SQLite's JSON functions."""
    import sqlite3

    from shared.adapters.sqlite_store import SqliteStore

    path = str(tmp_path / "old.db")
    store = SqliteStore(path)
    await store.open()
    running = task("t-1", 1).model_copy(update={"dispatch_count": 3})
    assert await create(store, document(tasks={"r1": running}))
    await store.close()
    with sqlite3.connect(path) as connection:
        connection.execute("UPDATE store_workflows SET heads = NULL")
    reopened = SqliteStore(path)
    await reopened.open()
    try:
        heads = await reopened.load_heads(["wf-1"])
        assert heads["wf-1"] == heads_of(await reopened.load_workflow("wf-1"))  # type: ignore[arg-type]
        assert heads["wf-1"].executions["r1"].dispatch_count == 3
    finally:
        await reopened.close()


async def test_attention_times_page_past_healthy_idle_workflows(store: Store) -> None:
    """Issue 12 point 4: the sweeper's scan is by attention time with a cursor. A WAIT for a
    person has none; a timer is due at its fire time; a SCHEDULED worker task at its update."""
    from shared.models.runtime import PendingTimer

    waiting = task("t-wait", 1, "idle")
    waiting.kind, waiting.status = "WAIT", TaskStatus.IN_PROGRESS
    await create(store, document("idle", tasks={"r1": waiting}))
    timer = PendingTimer(timer_id="x", purpose="wait", fire_at=300, task_id="t-timed")
    timed = task("t-timed", 1, "timed")
    timed.kind, timed.status = "WAIT", TaskStatus.IN_PROGRESS
    await create(store, document("timed", tasks={"r1": timed}, timers={"x": timer}))
    for n in range(3):
        scheduled = task(f"t-{n}", 1, f"queued-{n}")
        scheduled.update_time = 100
        await create(store, document(f"queued-{n}", tasks={"r1": scheduled}))
    first = await store.find_needing_attention(1000, None, 2)
    assert first == [(100, "queued-0"), (100, "queued-1")]
    rest = await store.find_needing_attention(1000, first[-1], 2)
    assert rest == [(100, "queued-2"), (300, "timed")]
    assert await store.find_needing_attention(1000, rest[-1], 2) == []
    assert await store.find_needing_attention(200, None, 10) == [
        (100, "queued-0"),
        (100, "queued-1"),
        (100, "queued-2"),
    ]
