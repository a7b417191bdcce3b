"""W1 (throughput) and W2 (latency) of ../shared/BENCHMARKS.md on the Kafka + MongoDB deployment.

Four services and one worker process run as separate OS processes, exactly as in production,
against Kafka and the MongoDB-protocol server from deploy/local/up.sh (started here unless
CAIRN_KAFKA_BOOTSTRAP and CAIRN_MONGO_URL point at running servers). Completion is observed on
the workflow-events topic, not by polling the store, so measuring does not load the store.

    .venv/bin/python -m benchmarks.w1_w2 [--runs 3] [--quick]

Reports workflows/s, steps/s, end-to-end p50/p99, per-step overhead, CPU-seconds per 1,000 steps
for every process (from /proc/<pid>/stat), and store commands and Kafka messages per step.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from pymongo import AsyncMongoClient

from shared.adapters.kafka_bus import KafkaBus
from shared.ports.bus import Received
from tests.e2e.cluster import Cluster

ROOT = Path(__file__).resolve().parents[1]
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


def definition(k: int) -> dict[str, Any]:
    return {
        "name": f"bench_k{k}",
        "tasks": [
            {"name": "bench_noop", "taskReferenceName": f"t{i}", "inputParameters": {"i": i}}
            for i in range(k)
        ],
    }


class Completions:
    """Follows the workflow-events topic and wakes whoever waits for a workflow to finish."""

    def __init__(self) -> None:
        self.finished: dict[str, tuple[float, str]] = {}
        self.waiters: dict[str, asyncio.Future[float]] = {}

    async def handle(self, batch: Sequence[Received]) -> None:
        now = time.perf_counter()
        for message in batch:
            event = json.loads(message.value)
            workflow_id = event["workflowId"]
            self.finished.setdefault(workflow_id, (now, event["status"]))
            waiter = self.waiters.pop(workflow_id, None)
            if waiter is not None and not waiter.done():
                waiter.set_result(now)

    def wait(self, workflow_id: str) -> asyncio.Future[float]:
        future: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        if workflow_id in self.finished:
            future.set_result(self.finished[workflow_id][0])
        else:
            self.waiters[workflow_id] = future
        return future


class Bench:
    def __init__(self, cluster: Cluster, completions: Completions, server_pids: dict[str, int]) -> None:
        self.cluster = cluster
        self.completions = completions
        self.server_pids = server_pids

    def pids(self) -> dict[str, int]:
        found = {name: p.popen.pid for name, p in self.cluster.processes.items() if p.popen is not None}
        return {**found, **self.server_pids}

    async def counters(self) -> tuple[dict[str, float], dict[str, int], int]:
        cpu = {name: cpu_seconds(pid) for name, pid in self.pids().items()}
        client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(self.cluster.env["CAIRN_MONGO_URL"])
        try:
            status = await client.admin.command("serverStatus")
        finally:
            await client.close()
        commands = status.get("metrics", {}).get("commands", {})
        store = {
            name: int(commands.get(name, {}).get("total", 0))
            for name in ("insert", "update", "delete", "find")
        }
        return cpu, store, await self.kafka_messages()

    async def kafka_messages(self) -> int:
        """Messages on all of this cluster's topics: the sum of their partitions' end offsets."""
        bootstrap = self.cluster.env["CAIRN_KAFKA_BOOTSTRAP"]
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            topics = [t for t in await admin.list_topics() if t.startswith(self.cluster.topics.prefix)]
            described = await admin.describe_topics(topics)
        finally:
            await admin.close()
        partitions = [TopicPartition(d["topic"], p["partition"]) for d in described for p in d["partitions"]]
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
        await consumer.start()
        try:
            return sum((await consumer.end_offsets(partitions)).values()) if partitions else 0
        finally:
            await consumer.stop()

    async def run_one(self, name: str, i: int) -> float:
        workflow_id = f"{name}-{uuid.uuid4().hex[:12]}"
        waiter = self.completions.wait(workflow_id)
        started = time.perf_counter()
        await self.cluster.client.start_workflow(name, {"i": i}, workflow_id=workflow_id)
        try:
            return await asyncio.wait_for(waiter, 300) - started
        except TimeoutError:
            document = await self.cluster.store.load_workflow(workflow_id)
            state = document.state.model_dump(mode="json") if document else None
            raise AssertionError(f"{workflow_id} did not finish in 300 s; stored state: {state}") from None

    async def window(self, k: int, total: int, concurrency: int) -> dict[str, Any]:
        """Keep `concurrency` workflows in flight until `total` have completed."""
        name = f"bench_k{k}"
        semaphore = asyncio.Semaphore(concurrency)
        latencies: list[float] = []

        async def one(i: int) -> None:
            async with semaphore:
                latencies.append(await self.run_one(name, i))

        cpu0, store0, kafka0 = await self.counters()
        started = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(total)))
        elapsed = time.perf_counter() - started
        cpu1, store1, kafka1 = await self.counters()
        steps = total * k
        return {
            "workload": f"{total} x {k} tasks @ concurrency {concurrency}",
            "workflows_per_s": total / elapsed,
            "steps_per_s": steps / elapsed,
            "p50_ms": statistics.median(latencies) * 1000,
            "p99_ms": percentile(latencies, 99) * 1000,
            "cpu_s_per_1k_steps": {n: (cpu1[n] - cpu0[n]) * 1000 / steps for n in cpu1},
            "store_commands_per_step": {n: (store1[n] - store0[n]) / steps for n in store1},
            "kafka_messages_per_step": (kafka1 - kafka0) / steps,
        }


def percentile(values: Sequence[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1)))]


def start_servers(run_dir: Path) -> tuple[dict[str, str], dict[str, int]]:
    state = run_dir / "state.env"
    env = {**os.environ, "CAIRN_LOCAL_STATE": str(state), "CAIRN_LOCAL_RUN_DIR": str(run_dir)}
    out = subprocess.run(
        ["bash", str(ROOT / "deploy/local/up.sh")], env=env, check=True, capture_output=True, text=True
    ).stdout
    variables = dict(line.removeprefix("export ").split("=", 1) for line in out.splitlines() if "=" in line)
    recorded = dict(line.split("=", 1) for line in state.read_text().splitlines() if "=" in line)
    return variables, {"kafka": int(recorded["KAFKA_PID"]), "ferretdb": int(recorded["MONGO_PID"])}


def stop_servers(run_dir: Path) -> None:
    env = {**os.environ, "CAIRN_LOCAL_STATE": str(run_dir / "state.env")}
    subprocess.run(["bash", str(ROOT / "deploy/local/down.sh")], env=env, check=False)


async def main(runs: int, quick: bool) -> dict[str, Any]:
    run_dir = Path(tempfile.mkdtemp(prefix="cairn-bench."))
    if os.environ.get("CAIRN_KAFKA_BOOTSTRAP") and os.environ.get("CAIRN_MONGO_URL"):
        servers = {k: os.environ[k] for k in ("CAIRN_KAFKA_BOOTSTRAP", "CAIRN_MONGO_URL")}
        server_pids: dict[str, int] = {}
        own_servers = False
    else:
        servers, server_pids = start_servers(run_dir)
        own_servers = True
    cluster = Cluster(
        servers["CAIRN_KAFKA_BOOTSTRAP"],
        servers["CAIRN_MONGO_URL"],
        uuid.uuid4().hex[:8],
        run_dir,
        workers="benchmarks.noop_workers",
        CAIRN_LOG_LEVEL="WARNING",
        CAIRN_SWEEPER_INTERVAL_S="5",  # production defaults, not the tests' eager sweeper
        CAIRN_SWEEPER_OUTBOX_GRACE_S="30",
    )
    completions = Completions()
    listener = KafkaBus(servers["CAIRN_KAFKA_BOOTSTRAP"], client_id="bench-listener")
    listener.subscribe([cluster.topics.workflow_events], f"bench-{uuid.uuid4().hex[:6]}", completions.handle)
    results: dict[str, Any] = {"runs": []}
    try:
        await cluster.start()
        await cluster.register({"name": "bench_noop", "retryCount": 0}, *(definition(k) for k in (1, 3, 10)))
        await listener.start()
        bench = Bench(cluster, completions, server_pids)
        await bench.run_one("bench_k1", 0)  # warm-up: consumer groups joined, connections open
        total_w1 = 60 if quick else 200
        for run in range(runs):
            measured = {
                "W1 throughput K=10": await bench.window(10, total_w1, 100),
                "W1 throughput K=1": await bench.window(1, 200 if quick else 1000, 100),
                "W2 latency K=1": await bench.window(1, 10 if quick else 20, 1),
                "W2 latency K=3": await bench.window(3, 10 if quick else 20, 1),
                "W2 latency K=10": await bench.window(10, 5 if quick else 10, 1),
            }
            measured["per_step_overhead_ms"] = (
                measured["W2 latency K=10"]["p50_ms"] - measured["W2 latency K=1"]["p50_ms"]
            ) / 9
            results["runs"].append(measured)
            print(f"run {run + 1}/{runs} done", flush=True)
    finally:
        await listener.stop()
        await cluster.stop()
        if own_servers:
            stop_servers(run_dir)
    return results


def summarise(results: dict[str, Any]) -> str:
    runs = results["runs"]
    lines = [f"{len(runs)} run(s); figures are medians across runs (min-max in brackets)", ""]
    for key in runs[0]:
        if key == "per_step_overhead_ms":
            values = [r[key] for r in runs]
            lines.append(f"per-step overhead (p50 K=10 - p50 K=1)/9: {statistics.median(values):.1f} ms")
            continue
        lines.append(f"{key}: {runs[0][key]['workload']}")
        for metric in ("workflows_per_s", "steps_per_s", "p50_ms", "p99_ms", "kafka_messages_per_step"):
            values = [r[key][metric] for r in runs]
            lines.append(
                f"  {metric:24} {statistics.median(values):10.1f}  [{min(values):.1f}-{max(values):.1f}]"
            )
        cpu = {
            n: statistics.median(r[key]["cpu_s_per_1k_steps"][n] for r in runs)
            for n in runs[0][key]["cpu_s_per_1k_steps"]
        }
        lines.append("  cpu_s_per_1k_steps      " + ", ".join(f"{n} {v:.2f}" for n, v in cpu.items()))
        store = {
            n: statistics.median(r[key]["store_commands_per_step"][n] for r in runs)
            for n in runs[0][key]["store_commands_per_step"]
        }
        lines.append("  store_commands_per_step " + ", ".join(f"{n} {v:.2f}" for n, v in store.items()))
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="smaller workloads, for a smoke run")
    parser.add_argument("--json", type=Path, help="also write raw results to this file")
    args = parser.parse_args()
    outcome = asyncio.run(main(args.runs, args.quick))
    if args.json:
        args.json.write_text(json.dumps(outcome, indent=2))
    print(summarise(outcome))
