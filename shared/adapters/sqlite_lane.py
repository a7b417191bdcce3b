"""Where an adapter's SQLite work runs: short hot-path transactions on the event loop's own
thread, everything else on one worker thread.

Why: every `run_in_executor` is a thread hand-off, and in CPython a hand-off costs far more
than the transaction it carries. Profiling `cairn dev` (benchmarks/profile_embedded.py) showed
about 40% of the process's busy time in `ThreadPoolExecutor.submit`, `call_soon_threadsafe`
and the wake-ups around them (the GIL passing between the loop and the database threads), for
transactions that take 50 to 300 µs inside SQLite. A commit in WAL mode with synchronous=NORMAL
does not fsync, so running it inline blocks the loop for about as long as the hand-off itself
would have.

What may run inline is chosen by the caller (`inline=True`): one transaction, or one SELECT,
that touches a handful of rows. Anything that scans (search, history, pruning, retention) stays
on the thread, where SQLite releases the GIL and the loop keeps serving.

An inline call never waits for a lock: its connection has `busy_timeout = 0`, so while another
connection (the worker thread, another process) holds the write lock SQLite answers SQLITE_BUSY
at once, at `BEGIN IMMEDIATE`, before anything was done. The call's transaction is then rolled
back and the same work runs on the thread, which waits for the lock as before (its connection
keeps the adapter's busy timeout). Work given `inline=True` must therefore be safe to run again
after a rollback: one explicit transaction, or a read.

Durability is unchanged: both connections are opened by the adapter's own `connect`, with its
journal mode and synchronous setting, and a call still returns only after its COMMIT.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar, cast

T = TypeVar("T")

Connector = Callable[[bool], sqlite3.Connection]
"""Opens a connection to the adapter's file; the flag is sqlite3's `check_same_thread`."""

_BUSY_CODES = frozenset(
    code
    for code in (getattr(sqlite3, "SQLITE_BUSY", 5), getattr(sqlite3, "SQLITE_LOCKED", 6))
    if code is not None
)


def is_busy(error: sqlite3.OperationalError) -> bool:
    """SQLITE_BUSY or SQLITE_LOCKED (and their extended codes): the lock is held elsewhere."""
    code = getattr(error, "sqlite_errorcode", None)
    if code is not None:
        return (code & 0xFF) in _BUSY_CODES
    return "locked" in str(error) or "busy" in str(error)


class SqliteLane:
    """One adapter's two connections to one SQLite file: inline and threaded (see the module
    docstring for why and when each is used)."""

    def __init__(self, connector: Connector, thread_name: str) -> None:
        self._connector = connector
        self._thread_name = thread_name
        self._executor: ThreadPoolExecutor | None = None
        self._threaded: sqlite3.Connection | None = None
        self._inline: sqlite3.Connection | None = None
        self._inline_thread: int | None = None
        self._inline_busy = False
        self.inline_calls = 0
        """Calls that ran on the loop's thread (for tests and benchmarks)."""
        self.fallbacks = 0
        """Inline calls that found the lock held and ran on the thread instead."""

    async def open(self) -> None:
        """Open both connections (on the worker thread: opening may wait for the schema lock)."""
        if self._threaded is None:
            loop = asyncio.get_running_loop()
            executor = self._thread()
            self._threaded = await loop.run_in_executor(executor, self._connector, True)
            inline = await loop.run_in_executor(executor, self._connector, False)
            inline.execute("PRAGMA busy_timeout = 0")
            self._inline, self._inline_thread = inline, threading.get_ident()

    @property
    def is_open(self) -> bool:
        return self._threaded is not None

    async def run(self, work: Callable[[sqlite3.Connection], T], *, inline: bool = False) -> T:
        """Run `work` with a connection: on the loop's thread if `inline` and the lock is free,
        else on the worker thread."""
        if self._threaded is None:
            await self.open()
        if inline:
            ran, result = self.try_inline(work)
            if ran:
                return cast(T, result)
        return await asyncio.get_running_loop().run_in_executor(self._thread(), self._on_thread, work)

    def try_inline(self, work: Callable[[sqlite3.Connection], T]) -> tuple[bool, T | None]:
        """Run `work` on the loop's thread now: (True, its result); or (False, None) when it
        cannot run here (the lane is not open, already in use on this thread, or the write lock
        is held elsewhere: then what it did was rolled back), for the caller to `run` it on the
        thread. Other errors are raised."""
        if not self._can_run_inline():
            return False, None
        connection = self._inline
        assert connection is not None
        self._inline_busy = True
        try:
            result = work(connection)
            self.inline_calls += 1
            return True, result
        except sqlite3.OperationalError as error:
            if not is_busy(error):
                raise
            if connection.in_transaction:
                connection.execute("ROLLBACK")
            self.fallbacks += 1
            return False, None
        finally:
            self._inline_busy = False

    def _thread(self) -> ThreadPoolExecutor:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=self._thread_name)
        return self._executor

    def _can_run_inline(self) -> bool:
        # Only from the thread that opened the lane (its loop), and never re-entered.
        return (
            self._inline is not None
            and not self._inline_busy
            and threading.get_ident() == self._inline_thread
        )

    def _on_thread(self, work: Callable[[sqlite3.Connection], T]) -> T:
        connection = self._threaded
        if connection is None:
            raise RuntimeError("the SQLite file is closed")
        return work(connection)

    async def close(self) -> None:
        """Close both connections and the thread (a later call opens them again)."""
        threaded, self._threaded = self._threaded, None
        inline, self._inline = self._inline, None
        executor, self._executor = self._executor, None
        if executor is None:
            return
        loop = asyncio.get_running_loop()
        for connection in (threaded, inline):
            if connection is not None:
                await loop.run_in_executor(executor, connection.close)
        executor.shutdown(wait=False)
