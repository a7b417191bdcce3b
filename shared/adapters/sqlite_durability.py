"""How Cairn's SQLite files are opened: WAL journal, the adapter's busy timeout, and the
`synchronous` level the operator chose (CAIRN_SQLITE_SYNCHRONOUS).

Why a choice: NORMAL (the default, what docs/semantics.md promises) loses nothing a committed step
wrote when the process is killed, and may lose the last transactions on an OS crash or power cut;
FULL fsyncs the WAL at every commit, so a committed step survives those too, at the price of one
fsync per transaction (benchmarks/README.md measures it). EXTRA also syncs the directory. OFF is
not offered: with it a power cut can corrupt the file, which no engine setting should allow."""

from __future__ import annotations

import sqlite3
from typing import Literal

SqliteSynchronous = Literal["NORMAL", "FULL", "EXTRA"]
DEFAULT_SYNCHRONOUS: SqliteSynchronous = "NORMAL"
_LEVELS: dict[SqliteSynchronous, int] = {"NORMAL": 1, "FULL": 2, "EXTRA": 3}


def open_wal(
    path: str, *, check_same_thread: bool, busy_timeout_ms: int, synchronous: SqliteSynchronous
) -> sqlite3.Connection:
    """A connection with no implicit transactions (isolation_level=None: only explicit BEGINs),
    in WAL mode at the given synchronous level."""
    if synchronous not in _LEVELS:
        raise ValueError(f"SQLite synchronous must be one of {', '.join(_LEVELS)}, not {synchronous!r}")
    connection = sqlite3.connect(
        path, isolation_level=None, timeout=busy_timeout_ms / 1000, check_same_thread=check_same_thread
    )
    connection.execute(f"PRAGMA busy_timeout = {busy_timeout_ms}")
    connection.execute("PRAGMA journal_mode = WAL")
    connection.execute(f"PRAGMA synchronous = {synchronous}")
    return connection


def synchronous_of(connection: sqlite3.Connection) -> SqliteSynchronous:
    """The level a connection runs at (for tests and the benchmark's durability line)."""
    level = connection.execute("PRAGMA synchronous").fetchone()[0]
    return next(name for name, value in _LEVELS.items() if value == level)
