"""GroupCommit: the writes of one loop turn share one transaction, each caller returns only after
that transaction's COMMIT, and a write that raises is rolled back alone."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from shared.adapters.sqlite_group import GroupCommit
from shared.adapters.sqlite_lane import SqliteLane
from shared.adapters.sqlite_sql import connect


@pytest.fixture
async def lane(tmp_path: Path) -> AsyncIterator[SqliteLane]:
    lane = SqliteLane(lambda same_thread: connect(str(tmp_path / "group.db"), same_thread), "test-group")
    await lane.open()
    await lane.run(lambda c: c.execute("CREATE TABLE t (v INTEGER UNIQUE)"))
    yield lane
    await lane.close()


def insert(value: int) -> Callable[[sqlite3.Connection], int]:
    def work(connection: sqlite3.Connection) -> int:
        connection.execute("INSERT INTO t (v) VALUES (?)", (value,))
        return value

    return work


async def values(lane: SqliteLane) -> list[int]:
    rows = await lane.run(lambda c: c.execute("SELECT v FROM t ORDER BY v").fetchall())
    return [v for (v,) in rows]


async def test_the_writes_of_one_turn_share_one_transaction(lane: SqliteLane) -> None:
    grouped = GroupCommit(lane)
    results = await asyncio.gather(*(grouped.write(insert(v)) for v in range(10)))
    assert results == list(range(10))
    assert (grouped.groups, grouped.writes) == (1, 10)
    assert lane.inline_calls == 1
    assert await values(lane) == list(range(10))


async def test_writes_of_later_turns_get_their_own_transaction(lane: SqliteLane) -> None:
    grouped = GroupCommit(lane)
    for v in range(3):
        assert await grouped.write(insert(v)) == v
    assert (grouped.groups, grouped.writes) == (3, 3)


async def test_a_write_that_raises_is_rolled_back_alone(lane: SqliteLane) -> None:
    grouped = GroupCommit(lane)

    def half_then_fail(connection: sqlite3.Connection) -> None:
        connection.execute("INSERT INTO t (v) VALUES (100)")
        connection.execute("INSERT INTO t (v) VALUES (1)")  # taken by the first write: UNIQUE fails

    outcomes = await asyncio.gather(
        grouped.write(insert(1)),
        grouped.write(half_then_fail),
        grouped.write(insert(2)),
        return_exceptions=True,
    )
    assert outcomes[0] == 1 and outcomes[2] == 2
    assert isinstance(outcomes[1], sqlite3.IntegrityError)
    assert await values(lane) == [1, 2], "the failed write's first insert (100) stayed"
    assert grouped.groups == 1


async def test_each_caller_returns_after_the_commit(lane: SqliteLane, tmp_path: Path) -> None:
    """What each caller wrote is visible to another connection when its call returns."""
    grouped = GroupCommit(lane)
    other = sqlite3.connect(tmp_path / "group.db", isolation_level=None)
    seen: list[list[int]] = []

    async def write_then_look(v: int) -> None:
        await grouped.write(insert(v))
        seen.append(sorted(v for (v,) in other.execute("SELECT v FROM t")))

    try:
        await asyncio.gather(*(write_then_look(v) for v in range(5)))
    finally:
        other.close()
    assert seen == [[0, 1, 2, 3, 4]] * 5


async def test_a_held_write_lock_sends_the_whole_group_to_the_thread_once(
    lane: SqliteLane, tmp_path: Path
) -> None:
    grouped = GroupCommit(lane)
    holder = sqlite3.connect(tmp_path / "group.db", isolation_level=None, check_same_thread=False)
    try:
        holder.execute("BEGIN IMMEDIATE")
        holder.execute("INSERT INTO t (v) VALUES (50)")
        asyncio.get_running_loop().call_later(0.3, holder.execute, "COMMIT")
        results = await asyncio.gather(*(grouped.write(insert(v)) for v in range(3)))
    finally:
        holder.close()
    assert results == [0, 1, 2]
    assert lane.fallbacks == 1 and lane.inline_calls == 0
    assert await values(lane) == [0, 1, 2, 50], "each write ran once, after the holder's commit"


async def test_a_cancelled_caller_does_not_strand_the_others(lane: SqliteLane) -> None:
    grouped = GroupCommit(lane)
    first = asyncio.ensure_future(grouped.write(insert(1)))
    second = asyncio.ensure_future(grouped.write(insert(2)))
    await asyncio.sleep(0)  # both are queued
    first.cancel()
    assert await asyncio.wait_for(second, 5) == 2
    assert first.cancelled()
    assert await values(lane) == [1, 2], "a write already queued stands, as an inline write would"


async def test_a_group_cancelled_on_the_thread_fails_its_callers_and_the_next_write_commits(
    lane: SqliteLane, tmp_path: Path
) -> None:
    """A loop shutting down cancels every task, a group waiting on the lane's thread too: its
    callers must not wait for ever, and later writes still get groups of their own."""
    grouped = GroupCommit(lane)
    holder = sqlite3.connect(tmp_path / "group.db", isolation_level=None, check_same_thread=False)
    try:
        holder.execute("BEGIN IMMEDIATE")  # the group finds the lock held: to the thread it goes
        waiting = asyncio.ensure_future(grouped.write(insert(1)))
        for _ in range(100):
            await asyncio.sleep(0.01)
            if grouped._threaded:
                break
        [on_thread] = grouped._threaded
        on_thread.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(waiting, 5)
        holder.execute("ROLLBACK")
    finally:
        holder.close()
    assert await asyncio.wait_for(grouped.write(insert(2)), 5) == 2
    assert 2 in await values(lane)


async def test_a_failed_commit_fails_the_whole_group(lane: SqliteLane) -> None:
    """A deferred foreign key is checked at COMMIT: the group's one transaction fails, and
    every caller gets the error (nothing of it is stored)."""
    await lane.run(lambda c: c.execute("PRAGMA foreign_keys = ON"), inline=True)
    await lane.run(
        lambda c: c.execute("CREATE TABLE child (p INTEGER REFERENCES t (v) DEFERRABLE INITIALLY DEFERRED)"),
        inline=True,
    )
    grouped = GroupCommit(lane)

    def orphan(connection: sqlite3.Connection) -> None:
        connection.execute("INSERT INTO child (p) VALUES (999)")

    outcomes = await asyncio.gather(grouped.write(insert(1)), grouped.write(orphan), return_exceptions=True)
    assert all(isinstance(o, sqlite3.IntegrityError) for o in outcomes), outcomes
    assert await values(lane) == []


async def test_a_store_closed_before_its_group_runs_refuses_the_write(tmp_path: Path) -> None:
    """The store's grouped writes never open a closed file again (a bus's may: it opens on use)."""
    from shared.adapters.sqlite_store import SqliteStore

    store = SqliteStore(str(tmp_path / "store.db"))
    await store.open()
    claim = asyncio.ensure_future(store.claim_task("task:1", "w", 1, 1000))
    await asyncio.sleep(0)  # asked for: the group waits for its flush
    await store.close()  # before the group's flush has run
    with pytest.raises(RuntimeError, match="closed"):
        await asyncio.wait_for(claim, 5)
    assert not store._lane.is_open
