"""W1 (throughput) and W2 (latency) of ../shared/BENCHMARKS.md, on Cairn's two deployments.

kafka:    the four services and one Kafka worker process as separate OS processes, exactly as in
          production, against Kafka and the MongoDB-protocol server from deploy/local/up.sh
          (started here unless CAIRN_KAFKA_BOOTSTRAP and CAIRN_MONGO_URL point at running
          servers). Workflows are started by publishing to the start topic; completion is observed
          on the workflow-events topic, so measuring does not load the store.
embedded: `cairn dev` (one process: api, decider, scheduler, timer, sweeper on the SQLite store and
          the SQLite-backed bus, one state file) and one `cairn worker --server` process polling it
          over HTTP. Workflows are started with `POST /api/workflow` from an httpx client; that call
          returns once the new execution is readable. Completion is observed by reading the state
          file's workflow-events topic (this process reads new rows of `bus_messages` every 2 ms,
          read-only: no api request, no consumer group); `--observe api` polls
          `GET /api/workflow/{id}?includeTasks=false` every 5 ms per workflow instead.

    .venv/bin/python -m benchmarks.w1_w2 [--mode both|embedded|kafka] [--runs 3] [--quick]

Reports workflows/s, steps/s, end-to-end p50/p99, per-step overhead, CPU-seconds per 1,000 steps
for every process (from /proc/<pid>/stat; `loadgen` is this process), and persistence work per
step: store commands and Kafka messages (kafka), SQLite transactions and bus messages (embedded),
and KB the storage processes wrote (/proc/<pid>/io write_bytes).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Protocol

import httpx
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from pymongo import AsyncMongoClient

from benchmarks.cli import run_and_report, run_record, settle_run_dir
from benchmarks.client_pools import ClientPools
from benchmarks.instrumented_dev import read_counters
from shared.adapters.kafka_bus import KafkaBus
from shared.models.runtime import WorkflowStatus
from shared.ports.bus import Received
from shared.topics import Topics
from tests.devserver import SERVER_VARIABLES, free_port
from tests.e2e.cluster import Cluster, Process

ROOT = Path(__file__).resolve().parents[1]
TICKS = os.sysconf("SC_CLK_TCK")
WORKFLOW_TIMEOUT_S = 300
TERMINAL = {status.value for status in WorkflowStatus if status.is_terminal}

DURABILITY = {
    "kafka": "Kafka acks=all, one broker, no fsync per message (Kafka's default: page cache, "
    "flushed by the OS); FerretDB 1.24 on SQLite (WAL, FerretDB's default synchronous setting); "
    "MongoDB write concern: the driver default (w:1)",
    "embedded": "SQLite WAL, synchronous=NORMAL (no fsync per commit: survives a process kill, "
    "may lose the last transactions on an OS crash or power cut); every step's store commit and "
    "bus publish is committed before it is acknowledged",
    "embedded-full": "SQLite WAL, synchronous=FULL (CAIRN_SQLITE_SYNCHRONOUS=FULL: the WAL is fsynced at "
    "every commit, so a committed step also survives an OS crash or power cut); otherwise as embedded",
}
MODES = {"both": ["embedded", "kafka"], "all": ["embedded", "embedded-full", "kafka"]}

# One-off figures of BENCHMARKS.md ("seen once on this kind of machine"), not measured here.
PEERS_W1_K10_STEPS_PER_S = {"Restate": 1411.0, "DBOS": 382.0, "Temporal dev server": 237.0}
PEERS_W2_K3_P50_MS = {"Restate": 6.7, "DBOS": 7.5, "Temporal dev server": 200.0}


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


def written_kb(pid: int) -> float:
    """KB this process caused to be written to storage (pages dirtied: WAL frames, log segments)."""
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        if line.startswith("write_bytes:"):
            return int(line.split()[1]) / 1024
    return 0.0


def definition(k: int) -> dict[str, Any]:
    return {
        "name": f"bench_k{k}",
        "tasks": [
            {"name": "bench_noop", "taskReferenceName": f"t{i}", "inputParameters": {"i": i}}
            for i in range(k)
        ],
    }


TASK_DEF = {"name": "bench_noop", "retryCount": 0}


INLINE_PREFIX = "bench_inline_k"
"""bench_inline_k{k} is W1-engine's twin of bench_k{k} (inline_chain)."""


def inline_chain(k: int, name: str | None = None) -> dict[str, Any]:
    """`name` (default bench_inline_k{k}): k chained INLINE tasks, `$.n + 1` from the input's `i`,
    run by the decider itself (no worker); its output `n` is i + k."""
    tasks = [
        {
            "name": f"inline{i}",
            "taskReferenceName": f"s{i}",
            "type": "INLINE",
            "inputParameters": {
                "evaluatorType": "javascript",
                "n": "${workflow.input.i}" if i == 0 else f"${{s{i - 1}.output.result}}",
                "expression": "$.n + 1",
            },
        }
        for i in range(k)
    ]
    return {
        "name": name or f"{INLINE_PREFIX}{k}",
        "tasks": tasks,
        "outputParameters": {"n": f"${{s{k - 1}.output.result}}"},
    }


def inline_chains() -> list[dict[str, Any]]:
    """W1-engine's definitions: bench_inline_k{1,3,10}, beside bench_k{1,3,10}."""
    return [inline_chain(k) for k in (1, 3, 10)]


def percentile(values: Sequence[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1)))]


class Driver(Protocol):
    async def run_one(self, name: str, i: int) -> float:
        """Start one workflow of definition `name` and return its end-to-end seconds."""
        ...

    def cpu(self) -> dict[str, float]:
        """Cumulative CPU-seconds per process."""
        ...

    async def work(self) -> dict[str, float]:
        """Cumulative persistence counters (reading them costs CPU: done outside the window)."""
        ...


async def window(
    driver: Driver, k: int, total: int, concurrency: int, name: str | None = None
) -> dict[str, Any]:
    """Keep `concurrency` workflows in flight until `total` have completed; `k` is the steps
    each workflow counts for (definition `bench_k{k}` unless `name` says otherwise)."""
    name = name or f"bench_k{k}"
    semaphore = asyncio.Semaphore(concurrency)
    latencies: list[float] = []

    async def one(i: int) -> None:
        async with semaphore:
            latencies.append(await driver.run_one(name, i))

    work0 = await driver.work()
    cpu0 = driver.cpu()
    started = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(total)))
    elapsed = time.perf_counter() - started
    cpu1 = driver.cpu()
    work1 = await driver.work()
    steps = total * k
    return {
        "workload": f"{total} x {k} tasks @ concurrency {concurrency}",
        "workflows_per_s": total / elapsed,
        "steps_per_s": steps / elapsed,
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": percentile(latencies, 99) * 1000,
        "cpu_s_per_1k_steps": {n: (cpu1[n] - cpu0[n]) * 1000 / steps for n in cpu1},
        "persistence_per_step": {n: (work1[n] - work0[n]) / steps for n in work1},
    }


async def measure(driver: Driver, runs: int, quick: bool) -> list[dict[str, Any]]:
    await driver.run_one("bench_k1", 0)  # warm-up: groups joined, connections open
    measured_runs = []
    for run in range(runs):
        measured: dict[str, Any] = {
            "W1 K=10": await window(driver, 10, 60 if quick else 200, 100),
            "W1 K=1": await window(driver, 1, 200 if quick else 1000, 100),
            "W2 K=1": await window(driver, 1, 10 if quick else 20, 1),
            "W2 K=3": await window(driver, 3, 10 if quick else 20, 1),
            "W2 K=10": await window(driver, 10, 5 if quick else 10, 1),
        }
        measured["per_step_overhead_ms"] = (measured["W2 K=10"]["p50_ms"] - measured["W2 K=1"]["p50_ms"]) / 9
        measured_runs.append(measured)
        print(f"  run {run + 1}/{runs} done", flush=True)
    return measured_runs


# ---------------------------------------------------------------- kafka mode -------------------


class Completions:
    """Follows the workflow-events topic and wakes whoever waits for a workflow to finish."""

    def __init__(self) -> None:
        self.finished: dict[str, tuple[float, str]] = {}
        self.waiters: dict[str, asyncio.Future[tuple[float, str]]] = {}

    async def handle(self, batch: Sequence[Received]) -> None:
        now = time.perf_counter()
        for message in batch:
            event = json.loads(message.value)
            self.finish(event["workflowId"], event["status"], now)

    def finish(self, workflow_id: str, status: str, now: float) -> None:
        self.finished.setdefault(workflow_id, (now, status))
        waiter = self.waiters.pop(workflow_id, None)
        if waiter is not None and not waiter.done():
            waiter.set_result(self.finished[workflow_id])

    def wait(self, workflow_id: str) -> asyncio.Future[tuple[float, str]]:
        """(when this process saw it finish, its status)."""
        future: asyncio.Future[tuple[float, str]] = asyncio.get_running_loop().create_future()
        if workflow_id in self.finished:
            future.set_result(self.finished.pop(workflow_id))
        else:
            self.waiters[workflow_id] = future
        return future


class KafkaDriver:
    def __init__(self, cluster: Cluster, completions: Completions, server_pids: dict[str, int]) -> None:
        self.cluster = cluster
        self.completions = completions
        self.server_pids = server_pids
        self.started: list[str] = []  # workflow ids, in start order

    def pids(self) -> dict[str, int]:
        found = {name: p.popen.pid for name, p in self.cluster.processes.items() if p.popen is not None}
        return {**found, **self.server_pids, "loadgen": os.getpid()}

    def cpu(self) -> dict[str, float]:
        return {name: cpu_seconds(pid) for name, pid in self.pids().items()}

    async def work(self) -> dict[str, float]:
        client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(self.cluster.env["CAIRN_MONGO_URL"])
        try:
            status = await client.admin.command("serverStatus")
        finally:
            await client.close()
        commands = status.get("metrics", {}).get("commands", {})
        work: dict[str, float] = {
            f"store {name}": int(commands.get(name, {}).get("total", 0))
            for name in ("insert", "update", "delete", "find")
        }
        work["kafka messages"] = await self.kafka_messages()
        for name, pid in self.server_pids.items():
            work[f"KB written {name}"] = written_kb(pid)
        return work

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
        self.started.append(workflow_id)
        waiter = self.completions.wait(workflow_id)
        started = time.perf_counter()
        await self.cluster.client.start_workflow(name, {"i": i}, workflow_id=workflow_id)
        try:
            finished, status = await asyncio.wait_for(waiter, WORKFLOW_TIMEOUT_S)
        except TimeoutError:
            document = await self.cluster.store.load_workflow(workflow_id)
            state = document.state.model_dump(mode="json") if document else None
            raise AssertionError(f"{workflow_id} did not finish in 300 s; stored state: {state}") from None
        if status != WorkflowStatus.COMPLETED.value:
            raise AssertionError(f"{workflow_id} ended {status}")
        return finished - started


def start_servers(run_dir: Path) -> tuple[dict[str, str], dict[str, int]]:
    state = run_dir / "state.env"
    env = {**os.environ, "CAIRN_LOCAL_STATE": str(state), "CAIRN_LOCAL_RUN_DIR": str(run_dir)}
    out = subprocess.run(
        ["bash", str(ROOT / "deploy/local/up.sh")], env=env, check=True, capture_output=True, text=True
    ).stdout
    variables = dict(line.removeprefix("export ").split("=", 1) for line in out.splitlines() if "=" in line)
    recorded = dict(line.split("=", 1) for line in state.read_text().splitlines() if "=" in line)
    return variables, {"kafka": int(recorded["KAFKA_PID"]), "ferretdb": int(recorded["MONGO_PID"])}


def guard_servers(pids: dict[str, int]) -> None:
    """up.sh starts Kafka and FerretDB detached, so they are not killed with this process like its
    children are: a detached watcher stops them if this process disappears (even by SIGKILL)
    while they still run; after a normal stop (down.sh) it finds them gone and exits."""
    ours, servers = os.getpid(), " ".join(str(pid) for pid in pids.values())
    first = next(iter(pids.values()))
    script = (
        f"while kill -0 {ours} 2>/dev/null && kill -0 {first} 2>/dev/null; do sleep 1; done; "
        f"kill -0 {ours} 2>/dev/null || kill {servers} 2>/dev/null"
    )
    subprocess.Popen(
        ["sh", "-c", script], start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


def stop_servers(run_dir: Path) -> None:
    env = {**os.environ, "CAIRN_LOCAL_STATE": str(run_dir / "state.env")}
    subprocess.run(["bash", str(ROOT / "deploy/local/down.sh")], env=env, check=False)


def running_server_pids(bootstrap: str) -> dict[str, int]:
    """Kafka's and FerretDB's pids when the servers named by the environment were started by
    deploy/local/up.sh with the state file `CAIRN_LOCAL_STATE` (for their CPU and write figures);
    empty if that file names other servers or processes that are gone."""
    state = Path(os.environ.get("CAIRN_LOCAL_STATE", "/nonexistent"))
    if not state.is_file():
        return {}
    recorded = dict(line.split("=", 1) for line in state.read_text().splitlines() if "=" in line)
    if recorded.get("KAFKA_BOOTSTRAP") != bootstrap:
        return {}
    pids = {"kafka": int(recorded.get("KAFKA_PID") or 0), "ferretdb": int(recorded.get("MONGO_PID") or 0)}
    return {name: pid for name, pid in pids.items() if pid and Path(f"/proc/{pid}").exists()}


@asynccontextmanager
async def kafka_driver(
    *definitions: dict[str, Any], before_start: Callable[[Cluster], None] | None = None
) -> AsyncIterator[KafkaDriver]:
    """The services and a worker as processes on Kafka + FerretDB (the environment's servers, or
    ones started here), with `definitions` registered beside the benchmark's own; the run's
    database is dropped afterwards. `before_start` may add processes to the cluster."""
    run_dir = Path(tempfile.mkdtemp(prefix="cairn-bench-kafka."))
    os.environ.pop("CAIRN_SERVER", None)  # else `cairn worker` would poll HTTP instead of Kafka
    if os.environ.get("CAIRN_KAFKA_BOOTSTRAP") and os.environ.get("CAIRN_MONGO_URL"):
        servers = {k: os.environ[k] for k in ("CAIRN_KAFKA_BOOTSTRAP", "CAIRN_MONGO_URL")}
        server_pids = running_server_pids(servers["CAIRN_KAFKA_BOOTSTRAP"])
        own_servers = False
    else:
        servers, server_pids = start_servers(run_dir)
        guard_servers(server_pids)
        own_servers = True
    succeeded = False
    try:
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
        listener.subscribe(
            [cluster.topics.workflow_events], f"bench-{uuid.uuid4().hex[:6]}", completions.handle
        )
        if before_start is not None:
            before_start(cluster)
        try:
            await cluster.start()
            await cluster.register(TASK_DEF, *(definition(k) for k in (1, 3, 10)), *definitions)
            await listener.start()
            yield KafkaDriver(cluster, completions, server_pids)
            succeeded = True
        finally:
            await listener.stop()
            await cluster.stop()
            client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(servers["CAIRN_MONGO_URL"])
            try:
                await client.drop_database(cluster.database)
            finally:
                await client.close()
    finally:
        if own_servers:
            stop_servers(run_dir)
        settle_run_dir(run_dir, succeeded)


async def run_kafka(runs: int, quick: bool) -> list[dict[str, Any]]:
    async with kafka_driver() as driver:
        return await measure(driver, runs, quick)


# ---------------------------------------------------------------- embedded mode ----------------


class EventLogObserver:
    """Completion read from the workflow-events topic of the embedded bus, as kafka mode reads it
    from Kafka: this process follows `bus_messages` with its own cursor per partition (a
    primary-key range read every `interval_s`, on its own read-only connection: no consumer group,
    no write lock, no request to the dev process), so a poll costs O(new events)."""

    def __init__(self, db: Path, topic: str, completions: Completions, interval_s: float = 0.002) -> None:
        self.connection = sqlite3.connect(db, isolation_level=None)
        self.connection.execute("PRAGMA query_only = 1")
        self.topic = topic
        self.completions = completions
        self.interval_s = interval_s
        self.positions: dict[int, int] = {}
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.task = asyncio.create_task(self._run())

    async def close(self) -> None:
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
        self.connection.close()

    async def _run(self) -> None:
        while True:
            for partition, next_offset in self.connection.execute(
                "SELECT partition, next_offset FROM bus_partitions WHERE topic = ?", (self.topic,)
            ).fetchall():
                if next_offset <= self.positions.get(partition, 0):
                    continue
                rows = self.connection.execute(
                    "SELECT offset, value FROM bus_messages WHERE topic = ? AND partition = ? AND offset >= ?"
                    " ORDER BY offset",
                    (self.topic, partition, self.positions.get(partition, 0)),
                ).fetchall()
                now = time.perf_counter()
                for offset, value in rows:
                    event = json.loads(value)
                    self.completions.finish(event["workflowId"], event["status"], now)
                    self.positions[partition] = offset + 1
            await asyncio.sleep(self.interval_s)


class EmbeddedDriver:
    """`cairn dev` and one HTTP worker process; workflows started and observed from here."""

    def __init__(
        self,
        run_dir: Path,
        worker_concurrency: int,
        observe: str,
        count_sqlite: bool,
        dev_env: dict[str, str] | None = None,
        worker_env: dict[str, str] | None = None,
    ) -> None:
        self.db = run_dir / "cairn-dev.db"
        self.url = f"http://127.0.0.1:{free_port()}"
        self.observe = observe
        self.counters_path = run_dir / "sqlite-counters" if count_sqlite else None
        env = {k: v for k, v in os.environ.items() if k not in SERVER_VARIABLES}
        env.update(
            CAIRN_LOG_LEVEL="WARNING",
            CAIRN_SWEEPER_INTERVAL_S="5",  # production defaults, not the tests' eager sweeper
            CAIRN_SWEEPER_OUTBOX_GRACE_S="30",
            CAIRN_TOPIC_PREFIX=Topics().prefix,  # the observer reads the default events topic
        )
        if self.counters_path is not None:
            env["CAIRN_BENCH_SQLITE_COUNTERS"] = str(self.counters_path)
        module = "benchmarks.instrumented_dev" if count_sqlite else "cairn"
        port = self.url.rsplit(":", 1)[1]
        dev_argv = [sys.executable, "-m", module, "dev", "--db", str(self.db), "--port", port]
        worker_argv = [sys.executable, "-m", "cairn", "worker", "benchmarks.noop_workers"]
        worker_argv += ["--server", self.url, "--concurrency", str(worker_concurrency)]
        self.processes = {
            "dev": Process("dev", dev_argv, {**env, **(dev_env or {})}, run_dir),
            "worker": Process("worker", worker_argv, {**env, **(worker_env or {})}, run_dir),
        }
        self.pools = ClientPools(self.url, WORKFLOW_TIMEOUT_S)
        self.client = self.pools.pick(0)  # for the calls outside the measured window
        self.completions = Completions()
        self.observer: EventLogObserver | None = None
        self.reader: sqlite3.Connection | None = None
        self.retried_starts = 0
        self.started: list[str] = []  # workflow ids, in start order

    async def start(self, *definitions: dict[str, Any]) -> None:
        """Start both processes; `definitions` (task and workflow definitions) are registered with
        the benchmark's own."""
        self.processes["dev"].start()
        deadline = time.monotonic() + 60
        while True:
            if not self.processes["dev"].alive():
                raise RuntimeError(f"cairn dev exited:\n{self.processes['dev'].log_tail()}")
            try:
                if (await self.client.get("/health", timeout=1)).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"cairn dev did not answer:\n{self.processes['dev'].log_tail()}")
            await asyncio.sleep(0.1)
        task_defs = [TASK_DEF, *(d for d in definitions if "tasks" not in d)]
        (await self.client.post("/api/metadata/taskdefs", json=task_defs)).raise_for_status()
        for data in [*(definition(k) for k in (1, 3, 10)), *(d for d in definitions if "tasks" in d)]:
            (await self.client.post("/api/metadata/workflow", json=data)).raise_for_status()
        self.processes["worker"].start()
        if self.observe == "events":
            self.observer = EventLogObserver(self.db, Topics().workflow_events, self.completions)
            self.observer.start()

    async def stop(self) -> None:
        if self.observer is not None:
            await self.observer.close()
        if self.reader is not None:
            self.reader.close()
        await self.pools.aclose()
        for process in (self.processes["worker"], self.processes["dev"]):
            process.stop()

    def pids(self) -> dict[str, int]:
        found = {name: p.popen.pid for name, p in self.processes.items() if p.popen is not None}
        return {**found, "loadgen": os.getpid()}

    def cpu(self) -> dict[str, float]:
        return {name: cpu_seconds(pid) for name, pid in self.pids().items()}

    async def work(self) -> dict[str, float]:
        if self.reader is None:
            self.reader = sqlite3.connect(self.db, isolation_level=None)
        appended = self.reader.execute("SELECT SUM(next_offset) FROM bus_partitions").fetchone()[0]
        work: dict[str, float] = {"bus messages": float(appended or 0)}
        if self.counters_path is not None:
            work.update(read_counters(self.counters_path))
        work["KB written dev"] = written_kb(self.pids()["dev"])
        work["retried starts"] = self.retried_starts
        return work

    async def run_one(self, name: str, i: int) -> float:
        workflow_id = f"{name}-{uuid.uuid4().hex[:12]}"
        self.started.append(workflow_id)
        waiter = self.completions.wait(workflow_id) if self.observer is not None else None
        started = time.perf_counter()
        await self._start(name, i, workflow_id)
        try:
            if waiter is not None:
                finished, status = await asyncio.wait_for(waiter, WORKFLOW_TIMEOUT_S)
            else:
                finished, status = await asyncio.wait_for(self._poll_api(workflow_id), WORKFLOW_TIMEOUT_S)
        except TimeoutError:
            body = (await self.client.get(f"/api/workflow/{workflow_id}")).text
            raise AssertionError(f"{workflow_id} did not finish in {WORKFLOW_TIMEOUT_S} s: {body}") from None
        if status != WorkflowStatus.COMPLETED.value:
            raise AssertionError(f"{workflow_id} ended {status}")
        return finished - started

    async def _start(self, name: str, i: int, workflow_id: str) -> None:
        """POST /api/workflow; a start with a chosen id is idempotent, so a request that met a
        connection the server was closing is simply sent again."""
        body = {"name": name, "input": {"i": i}, "workflowId": workflow_id}
        for attempt in range(3):
            try:
                response = await self.pools.pick(i).post("/api/workflow", json=body)
            except (httpx.ReadError, httpx.RemoteProtocolError):
                if attempt == 2:
                    raise
                self.retried_starts += 1
                continue
            response.raise_for_status()
            return

    async def _poll_api(self, workflow_id: str, interval_s: float = 0.005) -> tuple[float, str]:
        while True:
            response = await self.client.get(f"/api/workflow/{workflow_id}", params={"includeTasks": "false"})
            response.raise_for_status()
            status = response.json()["status"]
            if status in TERMINAL:
                return time.perf_counter(), status
            await asyncio.sleep(interval_s)


@asynccontextmanager
async def embedded_driver(
    *definitions: dict[str, Any],
    worker_concurrency: int = 20,
    observe: str = "events",
    count_sqlite: bool = True,
    synchronous: str = "NORMAL",
) -> AsyncIterator[EmbeddedDriver]:
    """`cairn dev` (at the given SQLite synchronous level) and one HTTP worker, with
    `definitions` registered beside the benchmark's own."""
    run_dir = Path(tempfile.mkdtemp(prefix="cairn-bench-embedded."))
    dev_env = {"CAIRN_SQLITE_SYNCHRONOUS": synchronous}
    driver = EmbeddedDriver(run_dir, worker_concurrency, observe, count_sqlite, dev_env=dev_env)
    succeeded = False
    try:
        await driver.start(*definitions)
        yield driver
        succeeded = True
    finally:
        await driver.stop()
        settle_run_dir(run_dir, succeeded)


async def run_embedded(
    runs: int,
    quick: bool,
    worker_concurrency: int,
    observe: str,
    count_sqlite: bool,
    synchronous: str = "NORMAL",
) -> list[dict[str, Any]]:
    async with embedded_driver(
        worker_concurrency=worker_concurrency,
        observe=observe,
        count_sqlite=count_sqlite,
        synchronous=synchronous,
    ) as driver:
        return await measure(driver, runs, quick)


# ---------------------------------------------------------------- report -----------------------


async def main(args: argparse.Namespace) -> dict[str, Any]:
    modes = MODES.get(args.mode, [args.mode])
    results: dict[str, Any] = {**run_record("benchmarks.w1_w2"), "modes": {}}
    for mode in modes:
        print(f"mode {mode}: {args.runs} run(s){' (quick)' if args.quick else ''}", flush=True)
        if mode.startswith("embedded"):
            runs = await run_embedded(
                args.runs,
                args.quick,
                args.worker_concurrency,
                args.observe,
                not args.no_sqlite_counters,
                synchronous="FULL" if mode == "embedded-full" else "NORMAL",
            )
        else:
            runs = await run_kafka(args.runs, args.quick)
        results["modes"][mode] = {"durability": DURABILITY[mode], "runs": runs}
    return results


def shown(work: dict[str, float]) -> dict[str, str]:
    """The persistence figures worth a line (the JSON keeps them all). SQLite times, counted in
    microseconds, are shown in ms; store and bus connections side by side."""
    if "store write txns" not in work:
        return {n: f"{v:.2f}" for n, v in work.items() if v or not n.startswith("retried")}

    def pair(name: str, scale: float = 1.0) -> str:
        return f"{work[f'store {name}'] / scale:.2f}/{work[f'bus {name}'] / scale:.2f}"

    figures = {
        "bus msgs": f"{work['bus messages']:.2f}",
        "write txns store/bus": pair("write txns"),
        "bus read txns": f"{work['bus read txns']:.2f}",
        "statements": f"{work['store statements'] + work['bus statements']:.1f}",
        "ms in SQLite store/bus": pair("sqlite us", 1000),
        "of which lock wait": pair("begin us", 1000),
        "COMMIT": pair("commit us", 1000),
        "KB written": f"{work['KB written dev']:.0f}",
    }
    if work.get("retried starts"):
        figures["retried starts"] = f"{work['retried starts']:.2f}"
    return figures


def _spread(values: Sequence[float], digits: int = 1) -> str:
    return f"{statistics.median(values):.{digits}f} [{min(values):.{digits}f}-{max(values):.{digits}f}]"


def summarise(results: dict[str, Any]) -> str:
    lines = []
    for mode, outcome in results["modes"].items():
        runs = outcome["runs"]
        lines += [
            "",
            f"== {mode}: {len(runs)} run(s); medians across runs [min-max]",
            f"durability: {outcome['durability']}",
        ]
        header = f"{'workload':8} {'':32} {'workflows/s':>20} {'steps/s':>22} {'p50 ms':>22} {'p99 ms':>22}"
        lines.append(header)
        for key, first in runs[0].items():
            if key == "per_step_overhead_ms":
                continue
            cells = [
                _spread([r[key][m] for r in runs], 2 if m == "workflows_per_s" else 1)
                for m in ("workflows_per_s", "steps_per_s", "p50_ms", "p99_ms")
            ]
            lines.append(f"{key:8} {first['workload']:32} " + " ".join(f"{c:>21}" for c in cells))
            cpu = {
                n: statistics.median(r[key]["cpu_s_per_1k_steps"][n] for r in runs)
                for n in first["cpu_s_per_1k_steps"]
            }
            lines.append(
                "           CPU-s per 1k steps: " + ", ".join(f"{n} {v:.2f}" for n, v in cpu.items())
            )
            work = {
                n: statistics.median(r[key]["persistence_per_step"][n] for r in runs)
                for n in first["persistence_per_step"]
            }
            lines.append("           per step: " + ", ".join(f"{n} {v}" for n, v in shown(work).items()))
        overhead = [r["per_step_overhead_ms"] for r in runs]
        lines.append(f"per-step overhead (p50 K=10 - p50 K=1)/9: {_spread(overhead)} ms")
        k10 = statistics.median(r["W1 K=10"]["steps_per_s"] for r in runs)
        k3 = statistics.median(r["W2 K=3"]["p50_ms"] for r in runs)
        lines.append("vs one-off peer figures of BENCHMARKS.md (not measured in this run):")
        lines.append(
            "  W1 K=10 steps/s, Cairn / peer: "
            + ", ".join(f"{p} {k10 / v:.2f}x" for p, v in PEERS_W1_K10_STEPS_PER_S.items())
        )
        lines.append(
            "  W2 K=3 p50, Cairn / peer (higher is slower): "
            + ", ".join(f"{p} {k3 / v:.2f}x" for p, v in PEERS_W2_K3_P50_MS.items())
        )
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--mode",
        choices=("embedded", "embedded-full", "kafka", "both", "all"),
        default="both",
        help="embedded-full: cairn dev with CAIRN_SQLITE_SYNCHRONOUS=FULL; both: embedded and kafka; "
        "all: embedded, embedded-full and kafka",
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="smaller workloads, for a smoke run")
    parser.add_argument("--json", type=Path, help="also write raw results to this file")
    parser.add_argument(
        "--worker-concurrency", type=int, default=20, help="embedded: the HTTP worker's --concurrency"
    )
    parser.add_argument(
        "--observe",
        choices=("events", "api"),
        default="events",
        help="embedded: how completion is seen (follow the events topic in the state file, "
        "or poll GET /api/workflow/{id}?includeTasks=false every 5 ms per workflow)",
    )
    parser.add_argument(
        "--no-sqlite-counters",
        action="store_true",
        help="embedded: run plain `cairn dev` (no SQLite transaction counts)",
    )
    args = parser.parse_args()
    run_and_report(main, args, summarise, args.json)
