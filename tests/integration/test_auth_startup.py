"""Who may start an open api: `cairn dev` on 127.0.0.1 runs without keys; on any other address
without keys it refuses to start (exit 2, one line saying what to do) unless `--insecure`; a keys
file it cannot use stops it too. The same rules hold for `cairn run api`, checked before it
waits for MongoDB and Kafka."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from conductor.client.configuration.configuration import Configuration
from conductor.client.configuration.settings.authentication_settings import AuthenticationSettings
from conductor.client.orkes.orkes_metadata_client import OrkesMetadataClient

from tests.devserver import SERVER_VARIABLES, DevServer, free_port

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def clean_env(**settings: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in SERVER_VARIABLES and not k.startswith(("CAIRN_AUTH_", "CAIRN_API_", "CAIRN_INSECURE"))
    }
    return {**env, **settings}


def cairn(*args: str, env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cairn", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def refusal(outcome: subprocess.CompletedProcess[str]) -> str:
    assert outcome.returncode == 2, f"exit {outcome.returncode}\n{outcome.stdout}{outcome.stderr}"
    lines = [line for line in outcome.stderr.splitlines() if "cannot start" in line]
    assert len(lines) == 1, outcome.stderr
    assert "Traceback" not in outcome.stderr, outcome.stderr
    return lines[0]


@pytest.mark.parametrize(
    "how", [["--host", "0.0.0.0"], ["--host", "::"]], ids=["--host 0.0.0.0", "--host ::"]
)
def test_cairn_dev_on_a_public_address_without_keys_refuses_to_start(how: list[str], tmp_path: Path) -> None:
    outcome = cairn(
        "dev",
        "--db",
        str(tmp_path / "dev.db"),
        "--port",
        str(free_port()),
        *how,
        env=clean_env(),
        tmp_path=tmp_path,
    )
    line = refusal(outcome)
    assert "without API keys" in line and "CAIRN_AUTH_KEYS_FILE" in line and "--insecure" in line, line
    assert not (tmp_path / "dev.db").exists(), "nothing is opened before the refusal"


def test_the_address_from_the_environment_counts_too(tmp_path: Path) -> None:
    env = clean_env(CAIRN_API_HOST="0.0.0.0", CAIRN_API_PORT=str(free_port()))
    assert "without API keys" in refusal(
        cairn("dev", "--db", str(tmp_path / "dev.db"), env=env, tmp_path=tmp_path)
    )


def test_cairn_run_api_refuses_before_it_waits_for_its_servers(tmp_path: Path) -> None:
    # Nothing listens at these addresses: the refusal must come before any attempt to reach them.
    env = clean_env(CAIRN_MONGO_URL="mongodb://127.0.0.1:1/", CAIRN_KAFKA_BOOTSTRAP="127.0.0.1:1")
    outcome = cairn("run", "api", "--host", "0.0.0.0", env=env, tmp_path=tmp_path)
    assert "without API keys" in refusal(outcome)


def test_a_keys_file_it_cannot_use_stops_it(tmp_path: Path) -> None:
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps([{"keyId": "a", "keySecret": "too-short", "role": "admin"}]))
    env = clean_env(CAIRN_AUTH_KEYS_FILE=str(keys))
    line = refusal(
        cairn("dev", "--db", str(tmp_path / "dev.db"), "--port", str(free_port()), env=env, tmp_path=tmp_path)
    )
    assert f"CAIRN_AUTH_KEYS_FILE {keys}: [0].keySecret:" in line and "16 characters" in line, line


@pytest.fixture(scope="module")
def insecure_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    server = DevServer(tmp_path_factory.mktemp("insecure"), None, "--host", "0.0.0.0", "--insecure")
    server.start()
    yield server
    assert server.process.stop() == 0, server.process.log_tail()


def test_with_insecure_it_starts_open_and_says_so(insecure_server: DevServer) -> None:
    log = insecure_server.process.log_tail(60)
    assert "OFF on 0.0.0.0 (--insecure)" in log, log
    with httpx.Client(base_url=insecure_server.url, timeout=30) as http:
        assert http.get("/api/metadata/workflow").status_code == 200
        token = http.post("/api/token", json={"keyId": "a", "keySecret": "b"})
        assert token.status_code == 404 and "without keys" in token.json()["message"]


def test_conductor_clients_with_a_key_work_against_an_open_api(insecure_server: DevServer) -> None:
    """Orkes's clients treat a 404 from /api/token as "no auth here" and carry on without a token."""
    configuration = Configuration(
        server_api_url=f"{insecure_server.url}/api",
        authentication_settings=AuthenticationSettings(key_id="any", key_secret="thing"),
    )
    assert isinstance(OrkesMetadataClient(configuration).get_all_workflow_defs(), list)
