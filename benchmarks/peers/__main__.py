"""Cairn and its peers side by side, one after the other in one run, on the W1/W2 shapes of
benchmarks/w1_w2.py (../shared/BENCHMARKS.md):

    .venv/bin/python -m benchmarks.peers [--engines cairn,cairn-engine,temporal,dbos,restate]
                                         [--runs 2] [--quick] [--json out.json]

Each engine measured in two families (benchmarks/README.md): W1-worker, a step crosses to a
separate worker process (Cairn's SIMPLE tasks with one `cairn worker` over HTTP; Temporal's
activities), and W1-engine, a step runs in the engine or the calling process (Cairn's INLINE
tasks, run by the decider; DBOS steps; Restate `ctx.run`). Every peer installs itself into
~/.cache/cairn/peers (PyPI, npm, Debian); one that cannot is reported with the reason, never
left out silently. The table gives medians across runs, ratios against Cairn's row of the same
family, CPU-seconds per 1,000 steps of every process, and each engine's durability.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from benchmarks.cli import run_and_report, run_record
from benchmarks.peers.common import PeerUnavailable, Session
from benchmarks.w1_w2 import DURABILITY, INLINE_PREFIX, Driver, embedded_driver, inline_chains, measure

ENGINES = ("cairn", "cairn-engine", "temporal", "dbos", "restate")


class _Renamed:
    """A Driver whose bench_k{k} runs bench_inline_k{k}."""

    def __init__(self, driver: Driver) -> None:
        self.driver = driver

    async def run_one(self, name: str, i: int) -> float:
        return await self.driver.run_one(name.replace("bench_k", INLINE_PREFIX), i)

    def cpu(self) -> dict[str, float]:
        return self.driver.cpu()

    async def work(self) -> dict[str, float]:
        return await self.driver.work()


@asynccontextmanager
async def cairn_session(engine_family: bool) -> AsyncIterator[Session]:
    definitions = inline_chains() if engine_family else []
    # Plain `python -m cairn dev`, as users run it and as the peers run: the SQLite counters of
    # benchmarks/instrumented_dev.py wrap every statement in Python (W2 K=3 10.0 ms without
    # them, 11-13 with, on this machine).
    async with embedded_driver(*definitions, count_sqlite=False) as driver:
        yield Session(
            driver=_Renamed(driver) if engine_family else driver,
            family="W1-engine" if engine_family else "W1-worker",
            durability=DURABILITY["embedded"],
        )


def peer_session(name: str, run_dir: Path) -> Any:
    """The peer's `running` context manager (installed first; PeerUnavailable says why not)."""
    if name == "temporal":
        from benchmarks.peers.temporal import TemporalPeer

        peer: Any = TemporalPeer()
    elif name == "dbos":
        from benchmarks.peers.dbos_peer import DbosPeer

        peer = DbosPeer()
    elif name == "restate":
        from benchmarks.peers.restate import RestatePeer

        peer = RestatePeer()
    else:
        raise ValueError(name)
    peer.install()
    return peer.running(run_dir)


async def measure_engine(name: str, runs: int, quick: bool) -> dict[str, Any]:
    load = os.getloadavg()
    started = time.strftime("%H:%M:%S")
    try:
        if name.startswith("cairn"):
            context: Any = cairn_session(engine_family=name == "cairn-engine")
        else:
            context = peer_session(name, Path(tempfile.mkdtemp(prefix=f"cairn-peer-{name}.")))
        async with context as session:
            measured = await measure(session.driver, runs, quick)
            return {
                "engine": name,
                "family": session.family,
                "durability": session.durability,
                "runs": measured,
                "load_before": load,
                "started": started,
            }
    except PeerUnavailable as error:
        return {"engine": name, "unavailable": str(error), "load_before": load, "started": started}


def median(runs: list[dict[str, Any]], workload: str, figure: str) -> float:
    return statistics.median(run[workload][figure] for run in runs)


def cpu_per_1k(runs: list[dict[str, Any]], workload: str = "W1 K=10") -> dict[str, float]:
    names = runs[0][workload]["cpu_s_per_1k_steps"]
    return {n: statistics.median(r[workload]["cpu_s_per_1k_steps"][n] for r in runs) for n in names}


def summarise(results: list[dict[str, Any]]) -> str:
    lines = ["", "== side by side: medians across runs; ratios against Cairn's row of the same family"]
    header = (
        f"{'engine':14} {'family':10} {'W1 K=10 st/s':>13} {'W1 K=1 wf/s':>12} {'W2 K=3 p50':>11} "
        f"{'per-step ms':>12} {'CPU-s/1k':>9} {'x Cairn st/s':>13} {'x Cairn p50':>12}"
    )
    lines.append(header)
    rows = [r for r in results if "runs" in r]
    cairn = {r["family"]: r for r in rows if r["engine"].startswith("cairn")}
    for result in rows:
        runs = result["runs"]
        k10 = median(runs, "W1 K=10", "steps_per_s")
        k1 = median(runs, "W1 K=1", "workflows_per_s")
        p50 = median(runs, "W2 K=3", "p50_ms")
        overhead = statistics.median(r["per_step_overhead_ms"] for r in runs)
        cpu = sum(cpu_per_1k(runs).values())
        base = cairn.get(result["family"])
        ratio_k10 = f"{k10 / median(base['runs'], 'W1 K=10', 'steps_per_s'):.2f}" if base else "-"
        ratio_p50 = f"{p50 / median(base['runs'], 'W2 K=3', 'p50_ms'):.2f}" if base else "-"
        lines.append(
            f"{result['engine']:14} {result['family']:10} {k10:13.1f} {k1:12.1f} {p50:11.1f} "
            f"{overhead:12.1f} {cpu:9.1f} {ratio_k10:>13} {ratio_p50:>12}"
        )
    lines.append("")
    for result in results:
        if "unavailable" in result:
            lines.append(f"{result['engine']}: NOT MEASURED: {result['unavailable']}")
            continue
        per_process = ", ".join(f"{n} {v:.2f}" for n, v in cpu_per_1k(result["runs"]).items())
        load = " ".join(f"{v:.2f}" for v in result["load_before"])
        lines.append(
            f"{result['engine']} ({result['started']}, load {load}): "
            f"CPU-s per 1k steps W1 K=10: {per_process}"
        )
        lines.append(f"    durability: {result['durability']}")
    return "\n".join(lines)


async def main(args: argparse.Namespace) -> dict[str, Any]:
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    unknown = sorted(set(engines) - set(ENGINES))
    if unknown:
        raise SystemExit(f"unknown engines {unknown}: choose from {', '.join(ENGINES)}")
    results = []
    for engine in engines:
        print(f"== {engine}: {args.runs} run(s){' (quick)' if args.quick else ''}", flush=True)
        results.append(await measure_engine(engine, args.runs, args.quick))
    return {
        **run_record("benchmarks.peers"),
        "cpus": os.cpu_count(),
        "results": results,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="smaller workloads, for a smoke run")
    parser.add_argument("--json", type=Path, help="also write raw results to this file")
    arguments = parser.parse_args()
    run_and_report(main, arguments, lambda outcome: summarise(outcome["results"]), arguments.json)
