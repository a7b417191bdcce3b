"""The store port's contract for code workflows' histories (docs/code-workflows.md): chunks are
written with the commit that made them and only if it won, read back in order by any reader, and
removed with the workflow. Runs against every adapter, like test_store_contract."""

from __future__ import annotations

from shared.ports.store import Commit, HistoryChunk, Store, commit_one, stitch_history
from tests.contract.test_store_contract import create, document


def chunk(first: int, *names: str, generation: int = 0, workflow_id: str = "wf-1") -> HistoryChunk:
    return HistoryChunk(workflow_id, generation, first, [{"type": "EventRaised", "name": n} for n in names])


async def test_history_of_winning_commits_only_in_order(store: Store, fresh_store: Store) -> None:
    await create(store, document(version=1))
    assert await store.commit_workflows([Commit(document(version=2), 1, history=[chunk(0, "a", "b")])]) == [
        True
    ]
    won = await store.commit_workflows([Commit(document(version=3), 2, history=[chunk(2, "c")])])
    rival = [chunk(3, "loser")]  # a rival decided on version 2 too, and lost: it writes nothing
    lost = await store.commit_workflows([Commit(document(version=3), 2, history=rival)])
    assert won == [True] and lost == [False]
    written = [e["name"] for c in await store.load_history("wf-1", 0, [0, 2, 3]) for e in c.events]
    assert "loser" not in written
    for reader in (store, fresh_store):
        events = stitch_history(await reader.load_history("wf-1", 0, [0, 2]))
        assert [e["name"] for e in events] == ["a", "b", "c"]
        assert stitch_history(await reader.load_history("wf-1", 0, [0, 2]), 2) == events[:2]
        assert stitch_history(await reader.load_history("wf-1", 0, [0])) == events[:2]  # only those asked for
        assert await reader.load_history("wf-1", 1, [0]) == []


async def test_each_generation_has_its_own_history_and_removal_takes_all(store: Store) -> None:
    await create(store, document(version=1))
    assert await commit_one(store, document(version=2), 1)
    assert await store.commit_workflows(
        [Commit(document(version=3), 2, history=[chunk(0, "old"), chunk(0, "new", generation=1)])]
    ) == [True]
    assert [e["name"] for e in stitch_history(await store.load_history("wf-1", 1, [0]))] == ["new"]
    assert await store.remove_workflow("wf-1")
    assert await store.load_history("wf-1", 0, [0]) == [] and await store.load_history("wf-1", 1, [0]) == []


def test_stitching_stops_at_a_gap() -> None:
    chunks = [chunk(0, "a"), chunk(3, "d"), chunk(1, "b", "c")]
    assert [e["name"] for e in stitch_history(chunks)] == ["a", "b", "c", "d"]
    assert [e["name"] for e in stitch_history([chunk(0, "a"), chunk(2, "c")])] == ["a"]
