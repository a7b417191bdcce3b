"""`cairn dev` as a real OS process for tests: embedded by default, or on Kafka/MongoDB."""

from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path

import httpx

from tests.e2e.cluster import Process

SERVER_VARIABLES = ("CAIRN_KAFKA_BOOTSTRAP", "CAIRN_MONGO_URL", "CAIRN_SERVER")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class DevServer:
    """One `cairn dev` process on a state file; restartable on the same file and port."""

    def __init__(self, log_dir: Path, db: Path | None = None, *extra_args: str, **settings: str) -> None:
        self.db = db or log_dir / "cairn-dev.db"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {k: v for k, v in os.environ.items() if k not in SERVER_VARIABLES}
        env.update(
            {
                "CAIRN_SWEEPER_INTERVAL_S": "1",
                "CAIRN_SWEEPER_OUTBOX_GRACE_S": "2",
                "CAIRN_LOG_LEVEL": "INFO",
                **settings,
            }
        )
        self.env = env
        argv = [
            sys.executable,
            "-m",
            "cairn",
            "dev",
            "--db",
            str(self.db),
            "--port",
            str(self.port),
            *extra_args,
        ]
        self.process = Process(f"dev-{self.port}", argv, env, log_dir)

    def start(self, within_s: float = 60) -> None:
        self.process.start()
        deadline = time.monotonic() + within_s
        while time.monotonic() < deadline:
            if not self.process.alive():
                raise RuntimeError(f"cairn dev exited during start-up:\n{self.process.log_tail()}")
            try:
                if httpx.get(f"{self.url}/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise TimeoutError(f"cairn dev did not answer /health in {within_s:.0f}s:\n{self.process.log_tail()}")

    def worker(self, log_dir: Path, module: str = "tests.e2e.workers_e2e", concurrency: int = 20) -> Process:
        """A `cairn worker` process polling this server over HTTP."""
        argv = [
            sys.executable,
            "-m",
            "cairn",
            "worker",
            module,
            "--server",
            self.url,
            "--concurrency",
            str(concurrency),
        ]
        return Process(f"http-worker-{self.port}-{time.monotonic_ns()}", argv, self.env, log_dir)
