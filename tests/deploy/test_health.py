"""`python -m services.probe` (and `cairn health`): the container health check (the image's
HEALTHCHECK, the k8s probes). A `cairn run` service touches a heartbeat file while its event loop
runs; the api must also answer /health."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cairn.cli import app
from services import probe, runtime
from shared.config import CairnSettings


@pytest.fixture(autouse=True)
def private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def _health(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["health", *args], env=env)
    return result.exit_code, result.output


async def test_beat_touches_the_file_until_stopped() -> None:
    path = runtime.heartbeat_path("decider")
    stop = asyncio.Event()
    beating = asyncio.create_task(runtime.beat(path, stop, interval_s=0.05))
    await asyncio.sleep(0.02)
    first = path.stat().st_mtime_ns
    await asyncio.sleep(0.15)
    assert path.stat().st_mtime_ns > first, "the heartbeat is renewed"
    stop.set()
    await beating
    assert not path.exists(), "a clean stop removes the heartbeat"


def test_run_service_beats_only_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runtime.telemetry, "configure", lambda *args: None)
    monkeypatch.setattr(runtime, "setup_logging", lambda level: None)
    seen: dict[str, bool] = {}

    def main_for(name: str):  # type: ignore[no-untyped-def]
        async def main(settings: CairnSettings, stop: asyncio.Event) -> None:
            await asyncio.sleep(0.05)
            seen[name] = runtime.heartbeat_path(name).exists()

        return main

    runtime.run_service("timer", main_for("timer"), CairnSettings(), heartbeat=True)
    runtime.run_service("sweeper", main_for("sweeper"), CairnSettings())
    assert seen == {"timer": True, "sweeper": False}
    assert not runtime.heartbeat_path("timer").exists()


def test_health_follows_the_heartbeat() -> None:
    code, output = _health()
    assert code == 1 and "no cairn service is running here" in output
    path = runtime.heartbeat_path("decider")
    path.parent.mkdir(parents=True)
    path.touch()
    assert _health() == (0, "decider healthy\n")
    assert _health("decider") == (0, "decider healthy\n")
    code, output = _health("scheduler")
    assert code == 1 and "scheduler is not running" in output
    old = time.time() - 60
    os.utime(path, (old, old))
    code, output = _health()
    assert code == 1 and "decider's last heartbeat was 60s ago" in output
    assert _health("--max-age", "90")[0] == 0
    runtime.heartbeat_path("timer").touch()
    code, output = _health()
    assert code == 1 and "decider, timer have a heartbeat here" in output


class _Health(BaseHTTPRequestHandler):
    status = 200

    def do_GET(self) -> None:
        self.send_response(self.status if self.path == "/health" else 404)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def api_port() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        _Health.status = 200


def test_api_health_also_asks_the_api(api_port: int) -> None:
    path = runtime.heartbeat_path("api")
    path.parent.mkdir(parents=True)
    path.touch()
    env = {"CAIRN_API_HOST": "0.0.0.0", "CAIRN_API_PORT": str(api_port)}
    assert _health(env=env) == (0, "api healthy\n")
    _Health.status = 500
    code, output = _health(env=env)
    assert code == 1 and "/health answered 500" in output
    code, output = _health(env={"CAIRN_API_HOST": "127.0.0.1", "CAIRN_API_PORT": "1"})
    assert code == 1 and "GET http://127.0.0.1:1/health" in output


def test_the_probe_knows_the_services_cairn_run_knows() -> None:
    from services.assembly import SERVICES

    assert probe.SERVICES == tuple(SERVICES)


def test_the_probe_module_runs_on_its_own_without_the_engine(private_tmp: Path) -> None:
    """`python -m services.probe` is what containers run every few seconds: it must not pay for
    the CLI, the telemetry SDK, Kafka or MongoDB clients (the whole point of a separate module)."""
    env = {**os.environ, "TMPDIR": str(private_tmp)}
    code = (
        "import sys, runpy\n"
        "sys.argv = ['probe', 'decider']\n"
        "try:\n"
        "    runpy.run_module('services.probe', run_name='__main__')\n"
        "except SystemExit as done:\n"
        "    heavy = sorted({m.split('.')[0] for m in sys.modules} & "
        "{'typer', 'rich', 'opentelemetry', 'faststream', 'aiokafka', 'pymongo', 'httpx', 'cairn'})\n"
        "    print('heavy:', heavy, 'exit:', done.code)\n"
    )
    unhealthy = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert unhealthy.stdout.strip() == "heavy: [] exit: 1", unhealthy.stdout + unhealthy.stderr
    assert "unhealthy: decider is not running" in unhealthy.stderr
    beat = private_tmp / "cairn-heartbeat" / "decider"
    beat.parent.mkdir(parents=True)
    beat.touch()
    healthy = subprocess.run(
        [sys.executable, "-m", "services.probe", "decider"], env=env, capture_output=True, text=True
    )
    assert (healthy.returncode, healthy.stdout) == (0, "decider healthy\n"), healthy.stderr
    wrong = subprocess.run(
        [sys.executable, "-m", "services.probe", "deciderr"], env=env, capture_output=True, text=True
    )
    assert wrong.returncode == 2 and "unknown service 'deciderr'" in wrong.stderr
