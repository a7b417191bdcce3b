"""W3 (fan-out / fan-in) and W1-engine (server-side steps) of ../shared/BENCHMARKS.md, on both of
Cairn's deployments, with the processes, observation and CPU accounting of `w1_w2.py`.

W3:        FORK_JOIN_DYNAMIC with `forkTaskName` bench_noop (the no-op SIMPLE task of
           noop_workers.py, run by the one worker process) and 100 `forkTaskInputs`, then a JOIN.
           Join latency is start → the workflow's completion event (the JOIN is its last task,
           so its completion ends the workflow); child steps/s counts the 100 branches. Every
           workflow is then checked from the store: COMPLETED, the JOIN COMPLETED with exactly the
           100 branch references in its output and exactly one COMPLETED JOIN record, and each
           branch's task records show it COMPLETED exactly once.
W1-engine: 10 INLINE tasks (JavaScript `$.n + 1`, chained) run by the decider itself, no worker:
           steps/s, and commits per workflow (the document's final version: each commit is
           version v -> v+1), beside the store's transactions / commands per workflow. Every
           workflow's output is checked (n = i + 10).

    .venv/bin/python -m benchmarks.w3_engine [--mode both|embedded|kafka] [--runs 3] --json out.json
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.cli import run_and_report, run_record
from benchmarks.w1_w2 import (
    DURABILITY,
    EmbeddedDriver,
    KafkaDriver,
    _spread,
    embedded_driver,
    inline_chain,
    kafka_driver,
    percentile,
    shown,
    window,
)
from shared.adapters.sqlite_store import SqliteStore
from shared.models.documents import WorkflowDocument
from shared.models.runtime import TaskState, TaskStatus, WorkflowStatus
from shared.ports.store import Store

FANOUT = 100
ENGINE_STEPS = 10
BRANCH_REFS = frozenset(f"_bench_noop_{i}" for i in range(FANOUT))

W3_DEFINITION: dict[str, Any] = {
    "name": "bench_w3",
    "tasks": [
        {
            "name": "fan_out",
            "taskReferenceName": "fan_out",
            "type": "FORK_JOIN_DYNAMIC",
            "inputParameters": {
                "forkTaskName": "bench_noop",
                "forkTaskInputs": [{"i": i} for i in range(FANOUT)],
            },
        },
        {"name": "join", "taskReferenceName": "join", "type": "JOIN"},
    ],
}

ENGINE_DEFINITION = inline_chain(ENGINE_STEPS, name="bench_inline10")

Driver = EmbeddedDriver | KafkaDriver


# ---------------------------------------------------------------- checks -----------------------


async def inspect(store: Store, workflow_ids: Sequence[str], with_records: bool) -> list[Any]:
    """(document, task records) per workflow, read after the measured window."""
    documents = await store.load_workflows(list(workflow_ids))
    found = []
    for wid in workflow_ids:
        records = await store.list_tasks(wid) if with_records else []
        found.append((documents.get(wid), records))
    return found


def check_join(document: WorkflowDocument | None, records: list[TaskState]) -> dict[str, int]:
    """One workflow of W3: what was lost or duplicated (all zeros when it is right)."""
    verdict = Counter[str]()
    if document is None or document.state.status is not WorkflowStatus.COMPLETED:
        verdict["workflows not completed"] += 1
    join = document.state.tasks.get("join") if document else None
    if join is None or join.status is not TaskStatus.COMPLETED:
        verdict["lost joins"] += 1
    else:
        joined = set(join.output_data)
        verdict["refs missing from join output"] += len(BRANCH_REFS - joined)
        verdict["unexpected refs in join output"] += len(joined - BRANCH_REFS)
    completed = Counter(
        r.reference_task_name
        for r in {r.task_id: r for r in records}.values()
        if r.status is TaskStatus.COMPLETED
    )
    verdict["duplicated joins"] += max(0, completed["join"] - 1)
    verdict["join records not completed once"] += completed["join"] != 1
    verdict["branches not completed"] += sum(completed[ref] == 0 for ref in BRANCH_REFS)
    verdict["branches completed more than once"] += sum(completed[ref] > 1 for ref in BRANCH_REFS)
    verdict["branch executions"] += sum(r.reference_task_name in BRANCH_REFS for r in records)
    return verdict


def check_engine(document: WorkflowDocument | None) -> dict[str, int]:
    if document is None or document.state.status is not WorkflowStatus.COMPLETED:
        return {"workflows not completed": 1}
    expected = int(document.state.input["i"]) + ENGINE_STEPS
    return {"wrong outputs": int(document.state.output.get("n") != expected)}


def totals(verdicts: Sequence[dict[str, int]]) -> dict[str, int]:
    summed: Counter[str] = Counter()
    for verdict in verdicts:
        summed.update(verdict)
    return dict(summed)


# ---------------------------------------------------------------- workloads --------------------


async def w3(driver: Driver, store: Store, total: int, concurrency: int) -> dict[str, Any]:
    first = len(driver.started)
    measured = await window(driver, FANOUT, total, concurrency, name=W3_DEFINITION["name"])
    found = await inspect(store, driver.started[first:], with_records=True)
    # The engine's own clock: JOIN's end - the workflow's start, from the committed document.
    engine_ms = [
        d.state.tasks["join"].end_time - d.state.start_time
        for d, _ in found
        if d is not None and "join" in d.state.tasks
    ]
    verdicts = [check_join(document, records) for document, records in found]
    measured["workload"] = f"{total} x (1 -> {FANOUT} SIMPLE -> JOIN) @ concurrency {concurrency}"
    measured["join_p50_ms"], measured["join_p99_ms"] = measured["p50_ms"], measured["p99_ms"]
    measured["engine_join_p50_ms"] = statistics.median(engine_ms) if engine_ms else None
    measured["engine_join_p99_ms"] = percentile(engine_ms, 99) if engine_ms else None
    measured["commits_per_workflow"] = statistics.mean(d.version for d, _ in found if d is not None)
    measured["check"] = totals(verdicts)
    return measured


async def w1_engine(driver: Driver, store: Store, total: int, concurrency: int) -> dict[str, Any]:
    first = len(driver.started)
    measured = await window(driver, ENGINE_STEPS, total, concurrency, name=ENGINE_DEFINITION["name"])
    found = await inspect(store, driver.started[first:], with_records=False)
    versions = [d.version for d, _ in found if d is not None]
    measured["workload"] = f"{total} x {ENGINE_STEPS} INLINE @ concurrency {concurrency}"
    measured["commits_per_workflow"] = statistics.mean(versions)
    measured["commits_per_workflow_max"] = max(versions)
    measured["check"] = totals([check_engine(document) for document, _ in found])
    return measured


async def measure(driver: Driver, store: Store, args: argparse.Namespace, mode: str) -> list[dict[str, Any]]:
    for name in (W3_DEFINITION["name"], ENGINE_DEFINITION["name"]):  # warm-up: groups, JS engine
        await driver.run_one(name, 0)
    w3_total, w3_concurrency = (
        (args.w3_workflows, args.w3_concurrency)
        if mode == "embedded"
        else (args.kafka_w3_workflows, args.kafka_w3_concurrency)
    )
    runs = []
    for run in range(args.runs):
        runs.append(
            {
                "W3": await w3(driver, store, w3_total, w3_concurrency),
                "W1-engine": await w1_engine(driver, store, args.engine_workflows, args.engine_concurrency),
            }
        )
        print(f"  run {run + 1}/{args.runs} done", flush=True)
    return runs


async def run_mode(mode: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    definitions = (W3_DEFINITION, ENGINE_DEFINITION)
    if mode == "kafka":
        async with kafka_driver(*definitions) as kafka:
            return await measure(kafka, kafka.cluster.store, args, mode)
    async with embedded_driver(*definitions, count_sqlite=not args.no_sqlite_counters) as embedded:
        store = SqliteStore(str(embedded.db))  # this process's own reader, used between windows
        await store.open()
        try:
            return await measure(embedded, store, args, mode)
        finally:
            await store.close()


# ---------------------------------------------------------------- report -----------------------


def summarise(results: dict[str, Any]) -> str:
    lines = []
    for mode, outcome in results["modes"].items():
        runs = outcome["runs"]
        lines += [
            "",
            f"== {mode}: {len(runs)} run(s); medians [min-max]",
            f"durability: {outcome['durability']}",
        ]
        for key, first in runs[0].items():
            figure = {m: [r[key][m] for r in runs] for m in first if isinstance(first[m], int | float)}
            lines.append(f"{key}: {first['workload']}")
            lines.append(
                f"  steps/s {_spread(figure['steps_per_s'])},"
                f" workflows/s {_spread(figure['workflows_per_s'], 2)},"
                f" p50 {_spread(figure['p50_ms'])} ms, p99 {_spread(figure['p99_ms'])} ms,"
                f" commits per workflow {_spread(figure['commits_per_workflow'], 2)}"
            )
            if key == "W3":
                lines.append(
                    f"  engine clock start -> JOIN completed: p50 {_spread(figure['engine_join_p50_ms'])} ms,"
                    f" p99 {_spread(figure['engine_join_p99_ms'])} ms"
                )
            cpu = {
                n: statistics.median(r[key]["cpu_s_per_1k_steps"][n] for r in runs)
                for n in first["cpu_s_per_1k_steps"]
            }
            lines.append("  CPU-s per 1k steps: " + ", ".join(f"{n} {v:.2f}" for n, v in cpu.items()))
            work = {
                n: statistics.median(r[key]["persistence_per_step"][n] for r in runs)
                for n in first["persistence_per_step"]
            }
            lines.append("  per step: " + ", ".join(f"{n} {v}" for n, v in shown(work).items()))
            checks = totals([r[key]["check"] for r in runs])
            lines.append(
                "  checks over all runs: " + ", ".join(f"{n} {v}" for n, v in sorted(checks.items()))
            )
    return "\n".join(lines)


async def main(args: argparse.Namespace) -> dict[str, Any]:
    modes = ["embedded", "kafka"] if args.mode == "both" else [args.mode]
    results: dict[str, Any] = {**run_record("benchmarks.w3_engine"), "modes": {}}
    for mode in modes:
        print(f"mode {mode}: {args.runs} run(s)", flush=True)
        results["modes"][mode] = {"durability": DURABILITY[mode], "runs": await run_mode(mode, args)}
    return results


def failures(results: dict[str, Any]) -> dict[str, int]:
    """Lost or duplicated work over every run and mode (branch executions are a count, not a fault)."""
    summed = totals([r[k]["check"] for o in results["modes"].values() for r in o["runs"] for k in r])
    return {n: v for n, v in summed.items() if v and n != "branch executions"}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mode", choices=("embedded", "kafka", "both"), default="both")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--w3-workflows", type=int, default=20, help="embedded W3 workflows per run")
    parser.add_argument("--w3-concurrency", type=int, default=4)
    parser.add_argument("--kafka-w3-workflows", type=int, default=20, help="kafka W3 workflows per run")
    parser.add_argument("--kafka-w3-concurrency", type=int, default=4)
    parser.add_argument("--engine-workflows", type=int, default=200)
    parser.add_argument("--engine-concurrency", type=int, default=100)
    parser.add_argument("--no-sqlite-counters", action="store_true", help="embedded: plain `cairn dev`")
    parser.add_argument("--json", type=Path, help="also write raw results to this file")
    args = parser.parse_args()
    outcome = run_and_report(main, args, summarise, args.json)
    bad = failures(outcome)
    if bad:
        print(f"LOST OR DUPLICATED: {bad}")
        sys.exit(1)
