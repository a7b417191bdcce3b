"""SqliteLane: hot-path work runs on the loop's thread, and falls back to the worker thread,
whole, when another connection holds the write lock."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path

import pytest

from shared.adapters.sqlite_lane import SqliteLane, is_busy
from shared.adapters.sqlite_sql import connect, in_transaction


def _lane(path: Path) -> SqliteLane:
    return SqliteLane(lambda same_thread: connect(str(path), same_thread), "test-lane")


def _insert(value: int) -> object:
    def work(connection: sqlite3.Connection) -> int:
        def statements(c: sqlite3.Connection) -> int:
            c.execute("INSERT INTO t (v) VALUES (?)", (value,))
            return threading.get_ident()

        return in_transaction(connection, statements)

    return work


async def test_inline_work_runs_on_the_loops_thread_and_the_rest_on_the_worker(tmp_path: Path) -> None:
    lane = _lane(tmp_path / "lane.db")
    await lane.open()
    try:
        await lane.run(lambda c: c.execute("CREATE TABLE t (v INTEGER)"))
        loop_thread = threading.get_ident()
        assert await lane.run(_insert(1), inline=True) == loop_thread
        assert await lane.run(_insert(2)) != loop_thread
        assert lane.inline_calls == 1 and lane.fallbacks == 0
        rows = await lane.run(lambda c: c.execute("SELECT v FROM t ORDER BY v").fetchall(), inline=True)
        assert rows == [(1,), (2,)]
    finally:
        await lane.close()


async def test_a_held_write_lock_sends_inline_work_to_the_thread_which_waits_for_it(tmp_path: Path) -> None:
    path = tmp_path / "lane.db"
    lane = _lane(path)
    await lane.open()
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        await lane.run(lambda c: c.execute("CREATE TABLE t (v INTEGER)"))
        holder.execute("BEGIN IMMEDIATE")
        holder.execute("INSERT INTO t (v) VALUES (0)")
        asyncio.get_running_loop().call_later(0.3, holder.execute, "COMMIT")
        loop_thread = threading.get_ident()
        ran_on = await lane.run(_insert(1), inline=True)
        assert ran_on != loop_thread, "the inline call waited on the loop instead of falling back"
        assert lane.fallbacks == 1 and lane.inline_calls == 0
        rows = await lane.run(lambda c: c.execute("SELECT v FROM t ORDER BY v").fetchall(), inline=True)
        assert rows == [(0,), (1,)], "the work ran once, after the holder's commit"
        assert await lane.run(_insert(2), inline=True) == loop_thread  # the lock is free again
    finally:
        holder.close()
        await lane.close()


async def test_other_errors_are_raised_not_retried(tmp_path: Path) -> None:
    lane = _lane(tmp_path / "lane.db")
    await lane.open()
    try:
        with pytest.raises(sqlite3.OperationalError, match="no such table"):
            await lane.run(lambda c: c.execute("SELECT * FROM missing"), inline=True)
        assert lane.fallbacks == 0
    finally:
        await lane.close()


def test_busy_and_locked_are_told_apart_from_other_errors(tmp_path: Path) -> None:
    first = sqlite3.connect(tmp_path / "x.db", isolation_level=None, timeout=0)
    second = sqlite3.connect(tmp_path / "x.db", isolation_level=None, timeout=0)
    try:
        first.execute("BEGIN IMMEDIATE")
        with pytest.raises(sqlite3.OperationalError) as busy:
            second.execute("BEGIN IMMEDIATE")
        assert is_busy(busy.value)
        with pytest.raises(sqlite3.OperationalError) as other:
            second.execute("SELECT * FROM missing")
        assert not is_busy(other.value)
    finally:
        first.close()
        second.close()
