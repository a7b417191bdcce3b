"""Soak: does Cairn slow down as history piles up? W1 (200 workflows x 10 no-op steps at
concurrency 100, ../shared/BENCHMARKS.md) in back-to-back windows for a fixed time, per mode, on
one deployment that is never reset: every window runs beside everything the earlier ones left.

    .venv/bin/python -m benchmarks.soak [--mode both|embedded|kafka] [--minutes 30] [--json FILE]

Prints, per window, throughput, p50, the CPU per 1,000 steps of the store process (FerretDB in
kafka mode; in embedded mode the store runs inside `cairn dev`, whose CPU is shown) and of all
processes, and how many executions the store holds; then the last window against the first.
Issue 12 asks that on FerretDB the last window is within 10 % of the first. Runs on the servers
named by CAIRN_KAFKA_BOOTSTRAP / CAIRN_MONGO_URL, or starts its own (see benchmarks/w1_w2.py).
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import statistics
import time
from pathlib import Path
from typing import Any

from pymongo import AsyncMongoClient

from benchmarks.cli import run_record, write_results
from benchmarks.w1_w2 import (
    Driver,
    EmbeddedDriver,
    KafkaDriver,
    embedded_driver,
    kafka_driver,
    window,
)

WORKFLOWS_PER_WINDOW = 200
STEPS = 10
CONCURRENCY = 100


async def stored_executions(driver: Driver) -> dict[str, int]:
    """How many executions the store holds, where the adapter keeps them."""
    if isinstance(driver, KafkaDriver):
        client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(driver.cluster.env["CAIRN_MONGO_URL"])
        try:
            db = client[driver.cluster.database]
            return {
                "running": await db["workflows"].count_documents({}),
                "finished": await db["workflows_finished"].count_documents({}),
                "task records": await db["tasks"].estimated_document_count(),
            }
        finally:
            await client.close()
    assert isinstance(driver, EmbeddedDriver)
    reader = sqlite3.connect(f"file:{driver.db}?mode=ro", uri=True, timeout=30)
    try:
        (count,) = reader.execute("SELECT COUNT(*) FROM store_workflows").fetchone()
        (tasks,) = reader.execute("SELECT COUNT(*) FROM store_tasks").fetchone()
    finally:
        reader.close()
    return {"executions": int(count), "task records": int(tasks)}


def store_process(mode: str) -> str:
    return "ferretdb" if mode == "kafka" else "dev"


async def soak(driver: Driver, mode: str, minutes: float) -> list[dict[str, Any]]:
    await driver.run_one("bench_k1", 0)  # warm-up: groups joined, connections open
    windows: list[dict[str, Any]] = []
    began = time.monotonic()
    while time.monotonic() - began < minutes * 60:
        measured = await window(driver, STEPS, WORKFLOWS_PER_WINDOW, CONCURRENCY)
        cpu = measured["cpu_s_per_1k_steps"]
        row = {
            "window": len(windows) + 1,
            "at_s": round(time.monotonic() - began),
            "steps_per_s": measured["steps_per_s"],
            "p50_ms": measured["p50_ms"],
            "store_cpu_s_per_1k_steps": cpu.get(store_process(mode)),
            "all_cpu_s_per_1k_steps": sum(cpu.values()),
            "stored": await stored_executions(driver),
        }
        windows.append(row)
        store_cpu = row["store_cpu_s_per_1k_steps"]
        print(
            f"  {mode} window {row['window']:3} at {row['at_s']:5} s: {row['steps_per_s']:6.1f} steps/s, "
            f"p50 {row['p50_ms']:6.0f} ms, store CPU/1k steps "
            f"{'-' if store_cpu is None else f'{store_cpu:.2f}'} s, "
            f"all {row['all_cpu_s_per_1k_steps']:.2f} s, "
            f"stored {row['stored']}",
            flush=True,
        )
    return windows


def verdict(windows: list[dict[str, Any]]) -> dict[str, float]:
    """Last against first, each as the median of up to three windows (one window is noisy)."""
    head = [w["steps_per_s"] for w in windows[:3]]
    tail = [w["steps_per_s"] for w in windows[-3:]]
    first, last = statistics.median(head), statistics.median(tail)
    return {"first_steps_per_s": first, "last_steps_per_s": last, "last_over_first": last / first}


async def main(args: argparse.Namespace) -> dict[str, Any]:
    modes = ["embedded", "kafka"] if args.mode == "both" else [args.mode]
    results: dict[str, Any] = {**run_record("benchmarks.soak"), "modes": {}}
    for mode in modes:
        print(f"mode {mode}: W1 windows for {args.minutes} min", flush=True)
        context = embedded_driver() if mode == "embedded" else kafka_driver()
        async with context as driver:
            windows = await soak(driver, mode, args.minutes)
        results["modes"][mode] = {"windows": windows, "verdict": verdict(windows)}
        v = results["modes"][mode]["verdict"]
        print(
            f"{mode}: first {v['first_steps_per_s']:.1f} steps/s, last {v['last_steps_per_s']:.1f} steps/s, "
            f"last/first {v['last_over_first']:.2f} over {len(windows)} windows",
            flush=True,
        )
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mode", choices=("embedded", "kafka", "both"), default="both")
    parser.add_argument("--minutes", type=float, default=30.0, help="length of the soak per mode")
    parser.add_argument("--json", type=Path, help="also write the windows to this file")
    arguments = parser.parse_args()
    outcome = asyncio.run(main(arguments))
    if arguments.json:
        write_results(arguments.json, outcome)
