"""The two servers the conformance suite compares, started once per session, and the run of
every selected case on both.

Conductor: the one at CAIRN_CONDUCTOR_URL when that is set (scripts/test.sh starts one for the
whole run), otherwise one started here with deploy/local/conductor-up.sh (on a private state
file) and stopped with conductor-down.sh at the end. If none can be had, the tests skip on a
developer's machine and fail with CI=true (tests/needs.py). Cairn: one `cairn dev` process
(tests/devserver.py), embedded bus and state file, with its system-task worker for HTTP and
EVENT. Both servers' HTTP tasks call one fixed HTTP server on 127.0.0.1 (httpserver.py).
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conformance.httpserver import FixedHttpServer
from tests.conformance.runner import Run, plain_kafka_bootstrap, run_all
from tests.devserver import DevServer
from tests.needs import unavailable

ROOT = Path(__file__).resolve().parents[2]
CONDUCTOR_UP = ROOT / "deploy" / "local" / "conductor-up.sh"
CONDUCTOR_DOWN = ROOT / "deploy" / "local" / "conductor-down.sh"


def _answers(api_url: str) -> bool:
    try:
        return httpx.get(f"{api_url}/metadata/taskdefs", timeout=10).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture(scope="session")
def conductor_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    given = os.environ.get("CAIRN_CONDUCTOR_URL")
    if given:
        url = given.rstrip("/")
        if not _answers(url):
            pytest.fail(f"Conductor at CAIRN_CONDUCTOR_URL={given} does not answer GET /metadata/taskdefs")
        yield url
        return
    state = tmp_path_factory.mktemp("conductor") / "conductor.env"
    env = {**os.environ, "CAIRN_LOCAL_CONDUCTOR_STATE": str(state)}
    kafka = plain_kafka_bootstrap()
    if kafka:  # Conductor's EVENT tasks with kafka: sinks publish there (the event_kafka case)
        env.setdefault("CAIRN_LOCAL_CONDUCTOR_KAFKA_BOOTSTRAP", kafka)
    try:
        started = subprocess.run(
            ["bash", str(CONDUCTOR_UP)], env=env, capture_output=True, text=True, timeout=900, check=False
        )
    except subprocess.TimeoutExpired:
        subprocess.run(["bash", str(CONDUCTOR_DOWN)], env=env, capture_output=True, check=False)
        unavailable("Conductor OSS: deploy/local/conductor-up.sh did not finish within 900 s")
    try:
        if started.returncode != 0:
            unavailable(
                "Conductor OSS needed (set CAIRN_CONDUCTOR_URL, or let deploy/local/conductor-up.sh start "
                f"one: it needs Java 21+ and Maven); conductor-up.sh failed:\n{started.stderr[-3000:]}"
            )
        line = started.stdout.strip().splitlines()[-1]
        url = line.split("=", 1)[1].strip()
        yield url
    finally:
        subprocess.run(["bash", str(CONDUCTOR_DOWN)], env=env, capture_output=True, check=False)


@pytest.fixture(scope="session")
def cairn_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    log_dir = tmp_path_factory.mktemp("cairn-dev")
    server = DevServer(log_dir)
    try:
        server.start()
        yield f"{server.url}/api"
    finally:
        server.process.stop()


@pytest.fixture(scope="session")
def http_base() -> Iterator[str]:
    """The fixed HTTP server the HTTP cases call, on 127.0.0.1."""
    server = FixedHttpServer()
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture(scope="session")
def conformance_run(
    request: pytest.FixtureRequest, conductor_url: str, cairn_url: str, http_base: str
) -> Run:
    """Every case this session selected, run once on both servers, all concurrently."""
    selected = []
    here = Path(__file__).resolve().parent
    for item in request.session.items:
        callspec = getattr(item, "callspec", None)
        if Path(str(item.path)).resolve().parent != here:
            continue  # another suite's parameter that happens to be called `case`
        if callspec is not None and "case" in callspec.params:
            name = callspec.params["case"]
            if name not in selected:
                selected.append(name)
    prefix = f"conf_{uuid.uuid4().hex[:8]}_"
    return run_all({"conductor": conductor_url, "cairn": cairn_url}, prefix, selected, http_base)
