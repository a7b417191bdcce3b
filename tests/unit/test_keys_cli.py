"""`cairn keys add`: a key whose printed secret the written file accepts, refusals that name the
problem, and a new file readable by its owner only."""

from __future__ import annotations

import json
import stat
from pathlib import Path

from typer.testing import CliRunner

from cairn.cli import app
from shared.auth.keys import read_keys_file


def add(path: Path, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["keys", "add", str(path), *args])
    return result.exit_code, result.stdout, result.stderr


def test_the_printed_secret_is_the_one_the_file_accepts(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    code, secret, _ = add(path, "--id", "ci", "--role", "operator")
    assert code == 0
    code, worker_secret, said = add(
        path, "--id", "w", "--role", "worker", "--task-type", "a", "--task-type", "b"
    )
    assert code == 0 and "CAIRN_API_KEY_ID=w" in said
    ring, content = read_keys_file(path)
    assert ring.authenticate("ci", secret.strip()) is not None
    worker = ring.authenticate("w", worker_secret.strip())
    assert worker is not None and worker.task_types == {"a", "b"}
    assert secret.strip() not in content.decode() and "keySecretSha256" in content.decode()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_refusals_leave_the_file_as_it_was(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    assert add(path, "--id", "ci", "--role", "operator")[0] == 0
    before = path.read_text()
    code, _, said = add(path, "--id", "ci", "--role", "reader")
    assert code == 2 and "given twice" in said
    code, _, said = add(path, "--id", "r", "--role", "reader", "--task-type", "a")
    assert code == 2 and "role reader has no tasks" in said
    assert path.read_text() == before
    path.write_text(json.dumps([{"keyId": "x"}]))
    code, _, said = add(path, "--id", "y", "--role", "admin")
    assert code == 2 and "not a keys file Cairn can use" in said
