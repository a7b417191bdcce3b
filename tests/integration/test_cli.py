"""The `cairn` CLI against a real MongoDB-protocol server and against `cairn dev` over HTTP:
registration, every command, errors people can act on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cairn.cli import app
from tests.devserver import DevServer

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


def test_every_command_against_cairn_dev_over_http(dev_server: DevServer, tmp_path: Path) -> None:
    """The CLI against `cairn dev`'s HTTP API (--server), including `cairn ls`."""
    server = ["--server", dev_server.url]
    approval = tmp_path / "approval.json"
    approval.write_text(
        json.dumps(
            {
                "name": "cli_approval",
                "tasks": [{"name": "ok", "taskReferenceName": "ok", "type": "WAIT"}],
                "outputParameters": {"by": "${ok.output.by}"},
            }
        )
    )
    code, out = run("def", "register", str(approval), *server)
    assert code == 0 and "registered workflowDef cli_approval v1" in out, out
    code, out = run("def", "ls", "--json", *server)
    assert code == 0 and "cli_approval" in [d["name"] for d in json.loads(out)]

    code, out = run("start", "cli_approval", "--id", "cli-1", "--input", '{"x": 1}', "--json", *server)
    assert code == 0 and json.loads(out) == {"workflowId": "cli-1"}, out
    code, out = run("start", "cli_approval", "--id", "cli-2", *server)
    assert code == 0 and "cli-2" in out
    code, out = run("ls", "--status", "RUNNING", "--name", "cli_approval", "--json", *server)
    assert code == 0 and sorted(w["workflowId"] for w in json.loads(out)) == ["cli-1", "cli-2"]

    code, out = run("signal", "cli-1", "ok", "--data", '{"by": "ana"}', *server)
    assert code == 0, out
    code, out = run("terminate", "cli-2", "--reason", "not needed", *server)
    assert code == 0, out
    code, out = run("watch", "cli-1", "cli-2", "--within", "30", "--json", *server)
    assert code == 1, out  # cli-2 did not complete: the exit code says so
    finished = json.loads(out)
    assert finished["cli-1"]["status"] == "COMPLETED" and finished["cli-1"]["output"] == {"by": "ana"}
    assert finished["cli-2"]["status"] == "TERMINATED" and finished["unfinished"] == []

    code, out = run("status", "cli-1", "--json", *server)
    assert code == 0 and [t["status"] for t in json.loads(out)["tasks"]] == ["COMPLETED"]
    code, out = run("ls", "--status", "TERMINATED", *server)
    assert code == 0 and "cli-2" in out and "TERMINATED" in out
    code, out = run("status", "no-such-id", *server)
    assert code == 2 and "not found" in out
    code, out = run("start", "no_such_workflow", *server)
    assert code == 2 and "no_such_workflow" in out and "register" in out


def test_cli_without_a_server_says_how_to_start_one() -> None:
    code, out = run("ls", "--server", "http://127.0.0.1:9")
    assert code == 2 and "no Cairn api at http://127.0.0.1:9" in out and "cairn dev" in out
