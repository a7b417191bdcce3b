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
  error (the group is rolled back and runs again with each write in its own SAVEPOINT); a
  failed COMMIT fails every caller of the group;
- the lane's rules (shared/adapters/sqlite_lane.py): the group runs inline, and when the write
  lock is held elsewhere the whole group is rolled back and runs again on the lane's thread.

The cost: a write waits for the rest of the loop's current turn before it starts (one
`call_soon` through the ready queue, microseconds when the loop is idle).

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
from shared.adapters.sqlite_sql import in_transaction

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
    """One lane's grouped writes (see the module docstring). `reopen`: whether a write may open
    a lane that is closed (the bus opens its file on first use); a store's may not."""

    def __init__(self, lane: SqliteLane, *, reopen: bool = True) -> None:
        self._lane = lane
        self._reopen = reopen
        self._pending: list[_Pending[Any]] = []
        self._threaded: set[asyncio.Task[None]] = set()
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
            # A callback, not this caller: a caller cancelled while it waits must not strand
            # the rest. The loop runs it after the callbacks already ready: the rest of the turn.
            loop.call_soon(self._flush)
        return await future

    def _flush(self) -> None:
        """Run the group inline, now; or, when it cannot run here, on the lane's thread."""
        group, self._pending = self._pending, []
        if not self._reopen and not self._lane.is_open:
            _fail(group, RuntimeError("the SQLite file is closed"))
            return
        works = [pending.work for pending in group]
        try:
            ran, outcomes = self._lane.try_inline(lambda c: run_group(c, works))
        except Exception as error:
            _fail(group, error)
            return
        if ran:
            self._settle(group, outcomes or [])
            return
        task = asyncio.get_running_loop().create_task(self._flush_on_thread(group, works))
        self._threaded.add(task)
        task.add_done_callback(self._threaded.discard)

    async def _flush_on_thread(self, group: list[_Pending[Any]], works: list[Write]) -> None:
        try:
            outcomes = await self._lane.run(lambda c: run_group(c, works))
        except BaseException as error:
            # Cancelled too (a loop shutting down): no caller may wait for ever. The group may
            # still commit on the thread, as a cancelled call's work would.
            _fail(group, error)
            if not isinstance(error, Exception):
                raise
            return
        self._settle(group, outcomes)

    def _settle(self, group: list[_Pending[Any]], outcomes: list[Any]) -> None:
        self.groups += 1
        self.writes += len(group)
        for pending, outcome in zip(group, outcomes, strict=True):
            if pending.future.done():  # its caller was cancelled; the write stands, as inline
                continue
            if isinstance(outcome, _Failed):
                pending.future.set_exception(outcome.error)
            else:
                pending.future.set_result(outcome)


def _fail(group: Sequence[_Pending[Any]], error: BaseException) -> None:
    for pending in group:
        if pending.future.done():
            continue
        if isinstance(error, asyncio.CancelledError):
            pending.future.cancel()
        else:
            pending.future.set_exception(error)


def run_group(connection: sqlite3.Connection, works: Sequence[Write]) -> list[Any]:
    """The writes in one transaction; what each returned, or `_Failed` for each that raised.

    First all together; only if one raises is the transaction rolled back and the group run
    again with each write in its own savepoint (a SAVEPOINT and a RELEASE per write cost about
    as much as a small write, for a failure that almost never happens). A failed COMMIT fails
    the whole group. The lock held elsewhere (SQLITE_BUSY) rolls back the whole group and
    propagates, so the lane can run it again on its thread."""
    try:
        return in_transaction(connection, lambda c: [_or_retry(c, work) for work in works])
    except _RunAgain:
        return in_transaction(connection, lambda c: [_in_savepoint(c, work) for work in works])


class _RunAgain(Exception):
    """A write of the group raised on the first pass: roll back, and run with savepoints."""


def _or_retry(connection: sqlite3.Connection, work: Write) -> Any:
    outcome = _outcome(connection, work)
    if isinstance(outcome, _Failed):
        raise _RunAgain
    return outcome


def _outcome(connection: sqlite3.Connection, work: Write) -> Any:
    """What `work` returned, or `_Failed` (SQLITE_BUSY propagates)."""
    try:
        return work(connection)
    except sqlite3.OperationalError as error:
        if is_busy(error):
            raise
        return _Failed(error)
    except Exception as error:
        return _Failed(error)


def _in_savepoint(connection: sqlite3.Connection, work: Write) -> Any:
    connection.execute("SAVEPOINT cairn_grouped")
    outcome = _outcome(connection, work)
    if isinstance(outcome, _Failed):
        connection.execute("ROLLBACK TO cairn_grouped")
    connection.execute("RELEASE cairn_grouped")
    return outcome
