"""What every peer of `python -m benchmarks.peers` provides, and the shared pieces.

A peer installs itself into its own cache (`~/.cache/cairn/peers/<name>`) from PyPI, npm or
Debian, idempotently; then, for one measurement, starts its servers and its worker processes,
hands the harness a `Driver` (benchmarks/w1_w2.py: `run_one(name, i)` runs one workflow of
`bench_k1`, `bench_k3` or `bench_k10` — k no-op steps in sequence — and returns its end-to-end
seconds; `cpu()` the cumulative CPU-seconds of every process of the peer and of the load
generator; `work()` persistence counters, `{}` when there are none), and stops everything when
the measurement is over. A peer that cannot be installed raises `PeerUnavailable` with the
reason, which the report shows instead of figures.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import httpx

from benchmarks.w1_w2 import Driver, cpu_seconds
from tests.e2e.cluster import Process

CACHE = Path(os.environ.get("CAIRN_PEERS_CACHE", Path.home() / ".cache" / "cairn" / "peers"))
STEPS = (1, 3, 10)
"""The workflow shapes every peer registers: bench_k1, bench_k3, bench_k10."""


class PeerUnavailable(RuntimeError):
    """The peer cannot be installed or started on this machine; the message says why."""


@dataclass(frozen=True)
class Session:
    driver: Driver
    family: str
    """`W1-worker` (a step crosses to a separate worker process) or `W1-engine` (a step runs in
    the engine or the calling process), as benchmarks/README.md defines them."""
    durability: str
    """What a step's commit waits for (fsync settings, replication): quoted in the report."""


class Peer(Protocol):
    name: str

    def install(self) -> None:
        """Install into CACHE / name (cached: a second call does nothing); PeerUnavailable."""
        ...

    def running(self, run_dir: Path) -> AbstractAsyncContextManager[Session]:
        """Start the peer's servers and workers in `run_dir`, register the bench_k{1,3,10}
        workflows, yield a Session, and stop every process it started on exit."""
        ...


def run(argv: Sequence[str], what: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    """Run an install step; PeerUnavailable with its output when it fails."""
    try:
        done = subprocess.run(
            list(argv), cwd=cwd, env=env, capture_output=True, text=True, timeout=1800, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise PeerUnavailable(f"{what}: {error}") from None
    if done.returncode != 0:
        tail = (done.stdout + done.stderr).strip().splitlines()[-15:]
        raise PeerUnavailable(f"{what} failed (exit {done.returncode}):\n" + "\n".join(tail))
    return done.stdout


class ProcessCpu:
    """CPU-seconds of named processes (and of this one, `loadgen`), from /proc."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = dict(pids)

    def add(self, name: str, pid: int) -> None:
        self.pids[name] = pid

    def cpu(self) -> dict[str, float]:
        found = {"loadgen": cpu_seconds(os.getpid())}
        for name, pid in self.pids.items():
            try:
                found[name] = cpu_seconds(pid) + children_cpu(pid)
            except FileNotFoundError:
                found[name] = 0.0
        return found


def children_cpu(pid: int) -> float:
    """CPU-seconds of a process's living children (PostgreSQL's backends, a server's workers)."""
    total = 0.0
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except FileNotFoundError:
        return 0.0
    for child in children:
        try:
            total += cpu_seconds(int(child)) + children_cpu(int(child))
        except FileNotFoundError:
            continue
    return total


async def until(
    check: Callable[[], Awaitable[bool]], what: str, *processes: Process, within_s: float = 60.0
) -> None:
    """Poll `check()` (an HTTP error counts as not yet) until it is true; give up at once, with
    its log, when one of `processes` has exited, and after `within_s`."""
    deadline = time.monotonic() + within_s
    while True:
        for process in processes:
            if not process.alive():
                raise PeerUnavailable(f"{what}: {process.name} exited:\n{process.log_tail()}")
        with suppress(httpx.HTTPError):
            if await check():
                return
        if time.monotonic() > deadline:
            logs = processes[0].log_path.parent if processes else "-"
            raise PeerUnavailable(f"{what}: not done within {within_s:.0f} s (logs in {logs})")
        await asyncio.sleep(0.2)
