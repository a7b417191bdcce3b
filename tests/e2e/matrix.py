"""What the failure-matrix tests run on: the same HTTP api and HTTP worker processes, either
over Cairn's services on Kafka + MongoDB (one process each) or over one `cairn dev` process.

A test drives a platform only through the api (as a user would) and through OS signals to its
processes, so one test body proves a row on both.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from tests.devserver import DevServer, free_port
from tests.e2e.cluster import SERVICES, Cluster, Process

WORKERS = "tests.e2e.workers_matrix"
FAST_SWEEPS = {"CAIRN_SWEEPER_INTERVAL_S": "1", "CAIRN_SWEEPER_OUTBOX_GRACE_S": "2"}


class Api:
    """The few Conductor endpoints the matrix needs, with waiting built in."""

    def __init__(self, url: str, diagnostics: Callable[[], str]) -> None:
        self.http = httpx.AsyncClient(base_url=url, timeout=15)
        self.diagnostics = diagnostics

    async def register(self, *definitions: dict[str, Any]) -> None:
        task_defs = [d for d in definitions if "tasks" not in d]
        if task_defs:
            (await self.http.post("/api/metadata/taskdefs", json=task_defs)).raise_for_status()
        for workflow in (d for d in definitions if "tasks" in d):
            (await self.http.post("/api/metadata/workflow", json=workflow)).raise_for_status()

    async def start(self, name: str, workflow_input: dict[str, Any]) -> str:
        response = await self.http.post(f"/api/workflow/{name}", json=workflow_input)
        response.raise_for_status()
        return response.text

    async def workflow(self, workflow_id: str) -> dict[str, Any]:
        response = await self.http.get(f"/api/workflow/{workflow_id}")
        response.raise_for_status()
        found: dict[str, Any] = response.json()
        return found

    async def wait(
        self,
        workflow_id: str,
        done: Callable[[dict[str, Any]], bool] = lambda w: w["status"] != "RUNNING",
        within_s: float = 90,
    ) -> dict[str, Any]:
        """Poll until `done`; connection errors count as not yet (a process may be restarting)."""
        deadline = time.monotonic() + within_s
        last: dict[str, Any] = {}
        while time.monotonic() < deadline:
            try:
                last = await self.workflow(workflow_id)
                if done(last):
                    return last
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.25)
        raise AssertionError(f"workflow {workflow_id} not there in {within_s}s: {last}\n{self.diagnostics()}")

    async def signal(self, workflow_id: str, ref: str, output: dict[str, Any]) -> httpx.Response:
        return await self.http.post(f"/api/tasks/{workflow_id}/{ref}/COMPLETED", json=output)

    async def close(self) -> None:
        await self.http.aclose()


def executions(workflow: dict[str, Any], ref: str) -> list[dict[str, Any]]:
    """Every execution of one task reference, oldest first."""
    return sorted(
        (t for t in workflow["tasks"] if t["referenceTaskName"] == ref),
        key=lambda t: (t["retryCount"], t["scheduledTime"]),
    )


class Platform:
    """Cairn behind an api URL, with processes a test may kill and restart."""

    name: str
    url: str
    api: Api

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.workers: list[Process] = []

    def engine(self) -> list[Process]:
        """The engine's own processes (not workers)."""
        raise NotImplementedError

    def http_worker(self, module: str = WORKERS) -> Process:
        """Start one more `cairn worker` process polling the api over HTTP."""
        argv = [sys.executable, "-m", "cairn", "worker", module, "--server", self.url, "--concurrency", "4"]
        process = Process(f"worker-{len(self.workers)}", argv, self.env, self.log_dir)
        process.start()
        self.workers.append(process)
        return process

    @property
    def env(self) -> dict[str, str]:
        raise NotImplementedError

    async def start(self) -> None:
        raise NotImplementedError

    async def kill_engine(self) -> None:
        for process in self.engine():
            if process.alive():
                process.kill()

    async def restart_engine(self) -> None:
        raise NotImplementedError

    def diagnostics(self) -> str:
        return "\n".join(f"--- {p.name} ---\n{p.log_tail()}" for p in [*self.engine(), *self.workers])

    async def close(self) -> dict[str, int | None]:
        for process in self.workers:
            process.stop()
        await self.api.close()
        return {}


class KafkaMongoPlatform(Platform):
    """decider, scheduler, timer, sweeper and api as five processes on Kafka + MongoDB."""

    name = "kafka_mongo"

    def __init__(self, kafka: str, mongo: str, unique: str, log_dir: Path) -> None:
        super().__init__(log_dir)
        self.cluster = Cluster(kafka, mongo, unique, log_dir, **FAST_SWEEPS)
        self.cluster.processes.pop("worker")  # workers here are HTTP workers the test starts
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        argv = [sys.executable, "-m", "cairn", "run", "api", "--port", str(port)]
        self.cluster.processes["api"] = Process("api", argv, self.cluster.env, log_dir)
        self.api = Api(self.url, self.diagnostics)

    @property
    def env(self) -> dict[str, str]:
        return self.cluster.env

    def engine(self) -> list[Process]:
        return [self.cluster[name] for name in (*SERVICES, "api")]

    def __getitem__(self, name: str) -> Process:
        return self.cluster[name]

    def kafka_worker(self, module: str = WORKERS) -> Process:
        """Start one more `cairn worker` process consuming task topics from Kafka."""
        argv = [sys.executable, "-m", "cairn", "worker", module, "--concurrency", "4"]
        process = Process(f"kafka-worker-{len(self.workers)}", argv, self.env, self.log_dir)
        process.start()
        self.workers.append(process)
        return process

    async def start(self) -> None:
        await self.cluster.start()
        await self._until_healthy()

    async def restart_engine(self) -> None:
        for process in self.engine():
            process.start()
        await self._until_healthy()

    async def _until_healthy(self) -> None:
        for _ in range(240):
            try:
                if (await self.api.http.get("/health")).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.25)
        raise AssertionError("api did not come up\n" + self.diagnostics())

    async def close(self) -> dict[str, int | None]:
        await super().close()
        return await self.cluster.stop()


class DevPlatform(Platform):
    """Everything in one `cairn dev` process on an embedded state file."""

    name = "dev"

    def __init__(self, log_dir: Path) -> None:
        super().__init__(log_dir)
        self.server = DevServer(log_dir, None, **FAST_SWEEPS)
        self.url = self.server.url
        self.api = Api(self.url, self.diagnostics)

    @property
    def env(self) -> dict[str, str]:
        return self.server.env

    def engine(self) -> list[Process]:
        return [self.server.process]

    async def start(self) -> None:
        await asyncio.to_thread(self.server.start)

    async def restart_engine(self) -> None:
        await asyncio.to_thread(self.server.start)

    async def close(self) -> dict[str, int | None]:
        await super().close()
        return {"dev": self.server.process.stop()}
