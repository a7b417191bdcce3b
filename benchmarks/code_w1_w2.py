"""W1 and W2 as code workflows beside the same shapes as JSON workflows, in one run on one
deployment (issue 14, point 8): `cairn dev`, or the services on Kafka + FerretDB with the api.

A code workflow's step is an activity (a task on its workers' topic, like a SIMPLE task) plus a
turn: the runtime replays the orchestrator and answers with the next activity. So a code step
costs about two of a JSON step's round trips, and the figures show what that costs.

    .venv/bin/python -m benchmarks.code_w1_w2 [--mode embedded|kafka] [--runs 2] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from benchmarks.cli import run_record, settle_run_dir, write_results
from benchmarks.w1_w2 import (
    WORKFLOW_TIMEOUT_S,
    EmbeddedDriver,
    KafkaDriver,
    kafka_driver,
    window,
)
from shared.messaging import outgoing
from shared.models.messages import StartWorkflow
from shared.models.runtime import WorkflowStatus
from tests.devserver import free_port
from tests.e2e.cluster import Cluster, Process

APP = "bench"


def runtime_process(server: str, env: dict[str, str], run_dir: Path) -> Process:
    argv = [sys.executable, "-m", "benchmarks.code_runtime"]
    settings = {"CAIRN_SERVER": server, "CAIRN_APP": APP, "CAIRN_LOG_LEVEL": "WARNING"}
    if "CAIRN_KAFKA_BOOTSTRAP" in env:  # on Kafka, turns and activities come from Kafka too
        settings["CAIRN_WORKFLOW_TRANSPORT"] = "kafka"
    return Process("runtime", argv, {**env, **settings}, run_dir)


def wait_ready(process: Process, what: str = "code runtime ready") -> None:
    deadline = time.monotonic() + 60
    while what not in process.log_tail():
        if not process.alive() or time.monotonic() > deadline:
            raise RuntimeError(f"{process.name} did not start:\n{process.log_tail()}")
        time.sleep(0.05)


class EmbeddedCodeDriver(EmbeddedDriver):
    """`cairn dev`, its JSON worker, and a code runtime; `code_k*` names start code workflows."""

    runtime: Process

    async def _start(self, name: str, i: int, workflow_id: str) -> None:
        if not name.startswith("code_"):
            await super()._start(name, i, workflow_id)
            return
        body = {"name": name, "input": {"input": i}, "workflowId": workflow_id, "kind": "code", "app": APP}
        (await self.pools.pick(i).post("/api/workflow", json=body)).raise_for_status()

    def pids(self) -> dict[str, int]:
        found = super().pids()
        if self.runtime.popen is not None:
            found["runtime"] = self.runtime.popen.pid
        return found


class KafkaCodeDriver(KafkaDriver):
    """The services, the api, the JSON worker and a code runtime on Kafka + FerretDB."""

    runtime: Process

    async def run_one(self, name: str, i: int) -> float:
        if not name.startswith("code_"):
            return await super().run_one(name, i)
        workflow_id = f"{name}-{uuid.uuid4().hex[:12]}"
        waiter = self.completions.wait(workflow_id)
        started = time.perf_counter()
        start = StartWorkflow(
            id=f"start:{workflow_id}",
            workflow_id=workflow_id,
            name=name,
            input={"input": i},
            kind="code",
            app=APP,
        )
        topics = self.cluster.topics
        await self.cluster.bus.publish([outgoing(topics.workflow_start, start, workflow_id)])
        finished, status = await asyncio.wait_for(waiter, WORKFLOW_TIMEOUT_S)
        if status != WorkflowStatus.COMPLETED.value:
            raise AssertionError(f"{workflow_id} ended {status}")
        return finished - started

    def pids(self) -> dict[str, int]:
        found = super().pids()
        if self.runtime.popen is not None:
            found["runtime"] = self.runtime.popen.pid
        return found


@asynccontextmanager
async def embedded() -> AsyncIterator[EmbeddedCodeDriver]:
    run_dir = Path(tempfile.mkdtemp(prefix="cairn-bench-code."))
    driver = EmbeddedCodeDriver(run_dir, 20, "events", count_sqlite=False)
    driver.runtime = runtime_process(driver.url, driver.processes["worker"].env, run_dir)
    succeeded = False
    try:
        await driver.start()
        driver.runtime.start()
        wait_ready(driver.runtime)
        yield driver
        succeeded = True
    finally:
        driver.runtime.stop()
        await driver.stop()
        settle_run_dir(run_dir, succeeded)


@asynccontextmanager
async def kafka() -> AsyncIterator[KafkaCodeDriver]:
    port = free_port()
    holder: dict[str, Process] = {}

    def with_api_and_runtime(cluster: Cluster) -> None:
        cluster.add("api", ["run", "api", "--port", str(port)])
        holder["runtime"] = runtime_process(f"http://127.0.0.1:{port}", cluster.env, cluster.log_dir)

    async with kafka_driver(before_start=with_api_and_runtime) as driver:
        code = KafkaCodeDriver(driver.cluster, driver.completions, driver.server_pids)
        code.runtime = holder["runtime"]
        code.runtime.start()
        try:
            wait_ready(code.runtime)
            yield code
        finally:
            code.runtime.stop()


async def measure(driver: Any, runs: int, quick: bool) -> list[dict[str, Any]]:
    await driver.run_one("bench_k1", 0)
    await driver.run_one("code_k1", 0)  # warm-up: polls open, topics made
    measured_runs = []
    for run in range(runs):
        measured = {}
        for kind, prefix in (("JSON", "bench_k"), ("code", "code_k")):
            measured[f"{kind} W1 K=10"] = await window(driver, 10, 60 if quick else 200, 100, f"{prefix}10")
            measured[f"{kind} W2 K=3"] = await window(driver, 3, 10 if quick else 20, 1, f"{prefix}3")
        measured_runs.append(measured)
        print(f"  run {run + 1}/{runs} done", flush=True)
    return measured_runs


def summarise(mode: str, runs: list[dict[str, Any]]) -> str:
    lines = [f"{mode}: medians of {len(runs)} run(s)"]
    for name in runs[0]:
        steps = sorted(r[name]["steps_per_s"] for r in runs)[len(runs) // 2]
        p50 = sorted(r[name]["p50_ms"] for r in runs)[len(runs) // 2]
        cpu = sorted(sum(r[name]["cpu_s_per_1k_steps"].values()) for r in runs)[len(runs) // 2]
        lines.append(f"  {name:<14} {steps:7.1f} steps/s   p50 {p50:7.1f} ms   {cpu:5.1f} CPU-s/1k steps")
    return "\n".join(lines)


async def main(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {**run_record("benchmarks.code_w1_w2"), "modes": {}}
    for mode in ["embedded", "kafka"] if args.mode == "both" else [args.mode]:
        print(f"mode {mode}: {args.runs} run(s)", flush=True)
        context = embedded() if mode == "embedded" else kafka()
        async with context as driver:
            results["modes"][mode] = await measure(driver, args.runs, args.quick)
        print(summarise(mode, results["modes"][mode]), flush=True)
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mode", choices=["embedded", "kafka", "both"], default="embedded")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", type=Path, help="Write the results here too.")
    options = parser.parse_args()
    found = asyncio.run(main(options))
    if options.json:
        write_results(options.json, found)
