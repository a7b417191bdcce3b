"""Cairn services as real OS processes against real Kafka and a MongoDB-protocol server."""

from __future__ import annotations

import asyncio
import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cairn.client import CairnClient
from shared.adapters.kafka_bus import KafkaBus
from shared.adapters.kafka_security import KafkaSecurity
from shared.adapters.mongo_store import MongoStore
from shared.core.validation import parse_task_def, parse_workflow_def
from shared.models.documents import WorkflowDocument
from shared.models.runtime import WorkflowStatus
from shared.topics import Topics

ROOT = Path(__file__).resolve().parents[2]
SERVICES = ("decider", "scheduler", "timer", "sweeper")


def _die_with_parent() -> None:
    """Linux: SIGKILL this child when the test or benchmark process dies, so a crashed run
    leaves no services behind to load the machine (and skew the next measurement)."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class Process:
    def __init__(self, name: str, argv: list[str], env: dict[str, str], log_dir: Path) -> None:
        self.name = name
        self.argv = argv
        self.env = env
        self.log_path = log_dir / f"{name}.log"
        self.popen: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        log = self.log_path.open("ab")
        self.popen = subprocess.Popen(
            self.argv,
            env=self.env,
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent,
        )

    def kill(self) -> None:
        """SIGKILL: no cleanup, no flush, no offset commit."""
        assert self.popen is not None
        self.popen.send_signal(signal.SIGKILL)
        self.popen.wait()

    def stop(self, timeout: float = 30) -> int | None:
        """SIGTERM and wait; returns the exit code."""
        if self.popen is None or self.popen.poll() is not None:
            return self.popen.returncode if self.popen else None
        self.popen.send_signal(signal.SIGTERM)
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()
            return None

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""


class Cluster:
    """Four services + one worker process, isolated by topic prefix and database name."""

    def __init__(
        self,
        kafka: str,
        mongo: str,
        unique: str,
        log_dir: Path,
        workers: str = "tests.e2e.workers_e2e",
        kafka_security: KafkaSecurity | None = None,
        **settings: str,
    ) -> None:
        self.topics = Topics(prefix=f"e2e{unique}.")
        self.database = f"cairn_e2e_{unique}"
        self.env = {
            **os.environ,
            "CAIRN_KAFKA_BOOTSTRAP": kafka,
            "CAIRN_MONGO_URL": mongo,
            "CAIRN_MONGO_DB": self.database,
            "CAIRN_TOPIC_PREFIX": self.topics.prefix,
            "CAIRN_SWEEPER_INTERVAL_S": "1",
            "CAIRN_SWEEPER_OUTBOX_GRACE_S": "2",
            "CAIRN_LOG_LEVEL": "INFO",
            **settings,
        }
        self.log_dir = log_dir
        self.processes: dict[str, Process] = {}
        for name in SERVICES:
            self.add(name, ["run", name])
        self.add("worker", ["worker", workers, "--concurrency", "20"])
        self.store = MongoStore(mongo, self.database)
        self.bus = KafkaBus(kafka, client_id="e2e-test", partitions=4, security=kafka_security)
        self.client = CairnClient(self.bus, self.topics)

    def add(self, name: str, args: list[str]) -> Process:
        """A `python -m cairn <args>` process of this cluster. Its CAIRN_INSTANCE_ID is its name, the
        same in every start of it, so its Kafka consumers are static members a restart resumes."""
        env = {**self.env, "CAIRN_INSTANCE_ID": name}
        self.processes[name] = Process(name, [sys.executable, "-m", "cairn", *args], env, self.log_dir)
        return self.processes[name]

    async def start(self) -> None:
        await self.store.open()
        await self.bus.ensure_topics(self.topics.fixed)
        for process in self.processes.values():
            process.start()

    async def stop(self) -> dict[str, int | None]:
        codes = {name: process.stop() for name, process in self.processes.items()}
        await self.bus.stop()
        await self.store.close()
        return codes

    def __getitem__(self, name: str) -> Process:
        return self.processes[name]

    def diagnostics(self) -> str:
        return "\n".join(f"--- {n} ---\n{p.log_tail()}" for n, p in self.processes.items())

    async def register(self, *definitions: dict[str, Any]) -> None:
        for data in definitions:
            if "tasks" in data:
                await self.store.put_workflow_def(parse_workflow_def(data))
            else:
                await self.store.put_task_def(parse_task_def(data))

    async def wait_for(
        self,
        workflow_ids: list[str],
        done: Callable[[WorkflowDocument], bool] = lambda d: d.state.status.is_terminal,
        within_s: float = 180,
    ) -> dict[str, WorkflowDocument]:
        deadline = time.monotonic() + within_s
        found: dict[str, WorkflowDocument] = {}
        while True:
            pending = [wf for wf in workflow_ids if wf not in found]
            for wf, document in (await self.store.load_workflows(pending)).items():
                if done(document):
                    found[wf] = document
            if len(found) == len(workflow_ids):
                return found
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{len(workflow_ids) - len(found)} of {len(workflow_ids)} workflows not done\n"
                    + self.diagnostics()
                )
            await asyncio.sleep(0.5)

    async def count_completed(self, workflow_ids: list[str]) -> int:
        documents = await self.store.load_workflows(workflow_ids)
        return sum(d.state.status is WorkflowStatus.COMPLETED for d in documents.values())


def assert_stopped_cleanly(codes: dict[str, int | None], diagnostics: Callable[[], str]) -> None:
    """Every process asked to stop with SIGTERM exited 0 (None: it had been killed on purpose)."""
    unclean = {name: code for name, code in codes.items() if code not in (0, None)}
    assert not unclean, f"processes did not stop cleanly on SIGTERM: {unclean}\n{diagnostics()}"
