"""Scale-out on Kafka + FerretDB: 1, 2 and 3 replicas of the decider and the scheduler, the
throughput each replica count reaches, and what a step costs each process, so a user can size a
deployment (issue 16, point 6).

Every replica is its own `cairn run decider|scheduler` process with its own CAIRN_INSTANCE_ID
(a static member of the consumer group); the partitions of a topic are shared among a group's
members, so replicas beyond the partition count (CAIRN_KAFKA_PARTITIONS, 4 here) would idle and
3 replicas hold 2/1/1 partitions. One timer, one sweeper and one Kafka worker process
(`--concurrency 20`) run beside them, as in `w1_w2.py`'s kafka mode.

Two workloads per replica count: W1-worker (200 x 10 no-op SIMPLE tasks at concurrency 100, run by
the worker process) and W1-engine (10 chained INLINE tasks that the decider runs itself, so only
the replicated services work). On this 2-core machine every process shares the same two cores,
so more replicas cannot add CPU: what the figures show is the cost of coordination (per-process
CPU per 1,000 steps and the total) and that throughput holds as replicas are added; on a cluster
each replica brings its own cores.

    .venv/bin/python -m benchmarks.scale_out [--replicas 1,2,3] [--runs 2] [--quick] [--json out.json]
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path
from typing import Any

from benchmarks.cli import run_and_report, run_record
from benchmarks.w1_w2 import DURABILITY, _spread, kafka_driver, window
from benchmarks.w3_engine import ENGINE_DEFINITION, ENGINE_STEPS
from tests.e2e.cluster import Cluster

SCALED = ("decider", "scheduler")


def with_replicas(replicas: int) -> Any:
    """`before_start` for kafka_driver: replicas 2..N of each scaled service."""

    def add(cluster: Cluster) -> None:
        for service in SCALED:
            for n in range(2, replicas + 1):
                cluster.add(f"{service}-{n}", ["run", service])

    return add


def per_service(cpu: dict[str, float]) -> dict[str, float]:
    """CPU-s per 1k steps summed over a service's replicas (`decider`, `decider-2`, ...)."""
    summed: dict[str, float] = {}
    for name, value in cpu.items():
        service = name.split("-")[0] if name.split("-")[0] in SCALED else name
        summed[service] = summed.get(service, 0.0) + value
    return summed


async def measure(replicas: int, runs: int, quick: bool) -> list[dict[str, Any]]:
    total = 60 if quick else 200
    async with kafka_driver(ENGINE_DEFINITION, before_start=with_replicas(replicas)) as driver:
        for name in ("bench_k1", ENGINE_DEFINITION["name"]):  # warm-up: groups joined, JS engine
            await driver.run_one(name, 0)
        measured = []
        for run in range(runs):
            measured.append(
                {
                    "W1-worker K=10": await window(driver, 10, total, 100),
                    "W1-engine K=10": await window(
                        driver, ENGINE_STEPS, total, 100, name=ENGINE_DEFINITION["name"]
                    ),
                }
            )
            print(f"  {replicas} replica(s): run {run + 1}/{runs} done", flush=True)
        return measured


async def main(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {
        **run_record("benchmarks.scale_out"),
        "durability": DURABILITY["kafka"],
        "replicas": {},
    }
    for replicas in args.replicas:
        print(f"{replicas} replica(s) of {' and '.join(SCALED)}", flush=True)
        results["replicas"][str(replicas)] = await measure(replicas, args.runs, args.quick)
    return results


def summarise(results: dict[str, Any]) -> str:
    lines = [f"durability: {results['durability']}", ""]
    header = f"{'replicas':>8}  {'workload':15} {'steps/s':>22} {'p50 ms':>22}  CPU-s per 1k steps"
    lines.append(header)
    for replicas, runs in results["replicas"].items():
        for key in runs[0]:
            steps = _spread([r[key]["steps_per_s"] for r in runs])
            p50 = _spread([r[key]["p50_ms"] for r in runs])
            names = runs[0][key]["cpu_s_per_1k_steps"]
            cpu = {n: statistics.median(r[key]["cpu_s_per_1k_steps"][n] for r in runs) for n in names}
            services = per_service(cpu)
            engine = sum(v for n, v in services.items() if n not in ("kafka", "ferretdb", "loadgen"))
            shown = ", ".join(f"{n} {v:.2f}" for n, v in services.items())
            lines.append(f"{replicas:>8}  {key:15} {steps:>22} {p50:>22}  {shown}; Cairn total {engine:.2f}")
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--replicas", type=lambda s: [int(n) for n in s.split(",")], default=[1, 2, 3], help="e.g. 1,2,3"
    )
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="60 workflows per window instead of 200")
    parser.add_argument("--json", type=Path, help="also write raw results to this file")
    args = parser.parse_args()
    run_and_report(main, args, summarise, args.json)
