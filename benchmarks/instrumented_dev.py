"""`cairn dev` with its SQLite work counted, for the benchmark's persistence-per-step figures.

    CAIRN_BENCH_SQLITE_COUNTERS=/tmp/counters python -m benchmarks.instrumented_dev dev --db ... --port ...

Runs the unmodified `cairn` CLI after replacing `sqlite3.connect` with one that returns a
connection subclass counting statements and transactions. Each connection is attributed to the
store or the bus by the name of the thread that opens it (the store's and the bus's executor
threads are named `cairn-sqlite-store…` and `cairn-bus-db…`). Counts go to a small shared
memory-mapped file, so the benchmark reads them at any moment without asking the process.
Cost: one Python-level call per statement (about a microsecond).
"""

from __future__ import annotations

import ctypes
import mmap
import os
import sqlite3
import struct
import threading
import time
from pathlib import Path
from typing import Any

OWNERS = ("store", "bus", "other")
PER_OWNER = (
    "write txns",  # BEGIN IMMEDIATE: one per write transaction
    "statements",
    # Wall-clock microseconds inside sqlite3 calls: the thread's time in SQLite; of it, the time
    # waiting for the write lock (BEGIN IMMEDIATE: while the process's other connection holds it,
    # SQLite's busy handler sleeps 1, 2, 5, 10 ms...) and in COMMIT (appending to the WAL, plus
    # the automatic checkpoint with its fsyncs once the WAL passed 1,000 pages).
    "sqlite us",
    "begin us",
    "commit us",
    "begins over 1 ms",
    "commits over 1 ms",
)
COUNTERS = (
    *(f"{owner} {name}" for owner in OWNERS for name in PER_OWNER),
    "bus read txns",  # BEGIN (deferred) on the bus's connection: fetches
)
SIZE = 8 * len(COUNTERS)


def read_counters(path: Path) -> dict[str, int]:
    """The counters as the dev process last wrote them (zeros before it opened SQLite)."""
    try:
        data = path.read_bytes()[:SIZE]
    except FileNotFoundError:
        return dict.fromkeys(COUNTERS, 0)
    if len(data) < SIZE:
        return dict.fromkeys(COUNTERS, 0)
    return dict(zip(COUNTERS, struct.unpack(f"<{len(COUNTERS)}Q", data), strict=True))


def install(path: str) -> None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    os.ftruncate(fd, mmap.PAGESIZE)
    shared = mmap.mmap(fd, mmap.PAGESIZE)
    counters = (ctypes.c_uint64 * len(COUNTERS)).from_buffer(shared)
    original = sqlite3.connect

    class CountingConnection(sqlite3.Connection):
        # One connection is used by one thread, so its slots are never incremented concurrently.
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            thread = threading.current_thread().name
            owner = "store" if "sqlite-store" in thread else "bus" if "bus-db" in thread else "other"
            self._slot = {name: COUNTERS.index(f"{owner} {name}") for name in PER_OWNER}
            self._reads = COUNTERS.index("bus read txns") if owner == "bus" else None
            self._writing = False

        def _count(self, sql: str, started: float) -> None:
            elapsed_us = int((time.perf_counter() - started) * 1e6)
            slot = self._slot
            counters[slot["statements"]] += 1
            counters[slot["sqlite us"]] += elapsed_us
            if sql.startswith("BEGIN IMMEDIATE"):
                self._writing = True
                counters[slot["write txns"]] += 1
                counters[slot["begin us"]] += elapsed_us
                counters[slot["begins over 1 ms"]] += elapsed_us > 1000
            elif sql == "COMMIT" and self._writing:
                self._writing = False
                counters[slot["commit us"]] += elapsed_us
                counters[slot["commits over 1 ms"]] += elapsed_us > 1000
            elif sql == "ROLLBACK":
                self._writing = False
            elif sql == "BEGIN" and self._reads is not None:
                counters[self._reads] += 1

        def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
            started = time.perf_counter()
            try:
                return super().execute(sql, *args)
            finally:
                self._count(sql, started)

        def executemany(self, sql: str, *args: Any) -> sqlite3.Cursor:
            started = time.perf_counter()
            try:
                return super().executemany(sql, *args)
            finally:
                self._count(sql, started)

    def connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        kwargs.setdefault("factory", CountingConnection)
        return original(*args, **kwargs)

    sqlite3.connect = connect  # type: ignore[assignment]


if __name__ == "__main__":
    counters_path = os.environ.get("CAIRN_BENCH_SQLITE_COUNTERS")
    if counters_path:
        install(counters_path)
    from cairn.cli import app

    app()
