"""Group commit for an adapter's short hot-path writes: the writes asked for in one turn of the
event loop share one `BEGIN IMMEDIATE ... COMMIT`.

Why: a write transaction on the embedded file costs about 65 µs before it writes anything
(taking the write lock, the WAL frame and index update at COMMIT, the Python around both;
timed in-process: 2 messages appended in one transaction cost 109 µs, 20 cost 507 µs). Under
load, `cairn dev`'s api appended one worker's result per request, and claimed and renewed each
handed-out task, each in its own transaction (3.3 write transactions per step in W1), while
dozens of such requests are read in one turn of the loop. Committed together: 0.9 per step.

What does not change:
- durability: every caller returns only after the COMMIT that holds its write;
- isolation of failures: a write that raises is rolled back alone and only its caller gets the
  error (the group runs again with each write in its own SAVEPOINT); a failed COMMIT fails
  every caller of the group;
- the lane's rules (shared/adapters/sqlite_lane.py): the group runs inline, and when the write
  lock is held elsewhere the whole group is rolled back and runs again on the lane's thread.

The cost: a write waits for the rest of the loop's current turn before it starts (one hop
through the ready queue, microseconds when the loop is idle).

A write given here must be the body of a transaction, never manage one itself (no BEGIN,
COMMIT or ROLLBACK), and, like any inline work, be safe to run again after a rollback (a group
whose write raised runs again, and so does one that found the lock held).
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from shared.adapters.sqlite_lane import SqliteLane, is_busy

T = TypeVar("T")

Write = Callable[[sqlite3.Connection], Any]


@dataclass
class _Pending(Generic[T]):
    work: Callable[[sqlite3.Connection], T]
    future: asyncio.Future[T]


@dataclass(frozen=True)
class _Failed:
    """A write of the group that raised: its savepoint was rolled back."""

    error: Exception


class GroupCommit:
    """One lane's grouped writes (see the module docstring)."""

    def __init__(self, lane: SqliteLane) -> None:
        self._lane = lane
        self._pending: list[_Pending[Any]] = []
        self._flushing: set[asyncio.Task[None]] = set()
        self.groups = 0
        """Transactions committed for grouped writes (for tests and benchmarks)."""
        self.writes = 0
        """Writes those transactions held."""

    async def write(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """Run `work` in the next group's transaction; its result once that has committed."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._pending.append(_Pending(work, future))
        if len(self._pending) == 1:
            # A task, not this caller: a caller cancelled while it waits must not strand the rest.
            task = loop.create_task(self._flush())
            self._flushing.add(task)
            task.add_done_callback(self._flushing.discard)
        return await future

    async def _flush(self) -> None:
        group, self._pending = self._pending, []
        try:
            outcomes = await self._lane.run(lambda c: run_group(c, [p.work for p in group]), inline=True)
        except Exception as error:
            for pending in group:
                if not pending.future.done():
                    pending.future.set_exception(error)
            return
        self.groups += 1
        self.writes += len(group)
        for pending, outcome in zip(group, outcomes, strict=True):
            if pending.future.done():  # its caller was cancelled; the write stands, as inline
                continue
            if isinstance(outcome, _Failed):
                pending.future.set_exception(outcome.error)
            else:
                pending.future.set_result(outcome)


def run_group(connection: sqlite3.Connection, works: Sequence[Write]) -> list[Any]:
    """The writes in one transaction; what each returned, or `_Failed` for each that raised.

    First all together; only if one raises is the transaction rolled back and the group run
    again with each write in its own savepoint (a SAVEPOINT and a RELEASE per write cost about
    as much as a small write, for a failure that almost never happens). The lock held elsewhere
    (SQLITE_BUSY) rolls back the whole group and propagates, so the lane can run it again on its
    thread."""
    try:
        return _in_transaction(connection, lambda: [work(connection) for work in works])
    except sqlite3.OperationalError as error:
        if is_busy(error):
            raise
    except Exception:
        pass
    return _in_transaction(connection, lambda: [_in_savepoint(connection, work) for work in works])


def _in_transaction(connection: sqlite3.Connection, run: Callable[[], list[Any]]) -> list[Any]:
    connection.execute("BEGIN IMMEDIATE")
    try:
        outcomes = run()
        connection.execute("COMMIT")
    except BaseException:
        if connection.in_transaction:
            connection.execute("ROLLBACK")
        raise
    return outcomes


def _in_savepoint(connection: sqlite3.Connection, work: Write) -> Any:
    connection.execute("SAVEPOINT cairn_grouped")
    try:
        outcome = work(connection)
    except sqlite3.OperationalError as error:
        if is_busy(error):
            raise
        connection.execute("ROLLBACK TO cairn_grouped")
        outcome = _Failed(error)
    except Exception as error:
        connection.execute("ROLLBACK TO cairn_grouped")
        outcome = _Failed(error)
    connection.execute("RELEASE cairn_grouped")
    return outcome
