"""The `cairn` CLI against a real MongoDB-protocol server: registration, errors people can act on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cairn.cli import app

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def env(mongo_url: str, kafka_bootstrap: str, unique: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CAIRN_MONGO_URL", mongo_url)
    monkeypatch.setenv("CAIRN_KAFKA_BOOTSTRAP", kafka_bootstrap)
    monkeypatch.setenv("CAIRN_MONGO_DB", f"cairn_cli_{unique}")


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output + (result.stderr if result.stderr_bytes else "")


def test_register_example_then_list_as_json(env: None) -> None:
    code, out = run("def", "register", str(ROOT / "examples" / "order_pipeline.json"), "--json")
    assert code == 0, out
    assert {"kind": "workflowDef", "name": "order_pipeline", "version": 1} in json.loads(out)
    code, out = run("def", "ls", "--json")
    assert code == 0 and [d["name"] for d in json.loads(out)] == ["order_pipeline"]


def test_invalid_definition_names_the_field_path(env: None, tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(
        json.dumps(
            {"name": "w", "tasks": [{"name": "a", "taskReferenceName": "a"}, {"name": "b", "type": "FORK"}]}
        )
    )
    code, out = run("def", "register", str(bad))
    assert code == 2
    assert (
        "tasks[1].taskReferenceName" in out and "tasks[1].type" in out and "unknown task type 'FORK'" in out
    )


def test_status_of_unknown_workflow_says_what_to_do(env: None) -> None:
    code, out = run("status", "does-not-exist")
    assert code == 2 and "not found" in out


def test_start_with_bad_json_input_is_refused_before_sending(env: None) -> None:
    code, out = run("start", "order_pipeline", "--input", "{oops")
    assert code == 2 and "--input is not valid JSON" in out
    code, out = run("start", "order_pipeline", "--input", "[1, 2]")
    assert code == 2 and "must be a JSON object" in out
