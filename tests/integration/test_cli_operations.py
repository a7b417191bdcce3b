"""`cairn pause|resume|restart|rerun|retry|skip|remove|terminate|signal` with `--json`, against
`cairn dev` over HTTP; refusals exit 2 with the engine's reason."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.devserver import DevServer
from tests.integration.test_cli import run

pytestmark = pytest.mark.integration


def operate(*args: str) -> dict[str, Any]:
    code, out = run(*args, "--json")
    assert code == 0, out
    answer: dict[str, Any] = json.loads(out)
    return answer


def test_lifecycle_commands_over_http(dev_server: DevServer, tmp_path: Path) -> None:
    server = ["--server", dev_server.url]
    definition = tmp_path / "two_waits.json"
    definition.write_text(
        json.dumps(
            {
                "name": "cli_two_waits",
                "tasks": [
                    {"name": "w1", "taskReferenceName": "w1", "type": "WAIT"},
                    {"name": "w2", "taskReferenceName": "w2", "type": "WAIT"},
                ],
                "outputParameters": {"first": "${w1.output.a}", "second": "${w2.output.b}"},
            }
        )
    )
    assert run("def", "register", str(definition), *server)[0] == 0
    assert operate("start", "cli_two_waits", "--id", "cli-ops-1", *server) == {"workflowId": "cli-ops-1"}

    assert operate("pause", "cli-ops-1", *server) == {
        "workflowId": "cli-ops-1",
        "operation": "pause",
        "status": "PAUSED",
    }
    assert operate("pause", "cli-ops-1", *server)["status"] == "PAUSED"  # again: no error
    assert operate("resume", "cli-ops-1", *server)["status"] == "RUNNING"
    code, out = run("resume", "cli-ops-1", *server)
    assert code == 2 and "not PAUSED" in out

    assert operate("skip", "cli-ops-1", "w1", "--output", '{"a": 1}', *server)["status"] == "RUNNING"
    assert operate("signal", "cli-ops-1", "w2", "--data", '{"b": 2}', *server)["taskReferenceName"] == "w2"
    code, out = run("watch", "cli-ops-1", "--within", "30", "--json", *server)
    assert code == 0 and json.loads(out)["cli-ops-1"]["output"] == {"first": 1, "second": 2}, out
    code, out = run("retry", "cli-ops-1", *server)
    assert code == 2 and "nothing to retry" in out

    code, out = run("status", "cli-ops-1", "--json", *server)
    w2 = next(t for t in json.loads(out)["tasks"] if t["referenceTaskName"] == "w2")
    rerun = operate("rerun", "cli-ops-1", "--from-task", w2["taskId"], "--input", '{"again": true}', *server)
    assert rerun["status"] == "RUNNING"
    assert operate("signal", "cli-ops-1", "w2", "--data", '{"b": 3}', *server)
    code, out = run("watch", "cli-ops-1", "--within", "30", "--json", *server)
    finished = json.loads(out)["cli-ops-1"]
    assert finished["output"] == {"first": 1, "second": 3} and finished["input"] == {"again": True}

    assert operate("restart", "cli-ops-1", *server)["status"] == "RUNNING"
    terminated = operate("terminate", "cli-ops-1", "--reason", "enough", *server)
    assert terminated == {"workflowId": "cli-ops-1", "operation": "terminate", "status": None}
    code, out = run("watch", "cli-ops-1", "--within", "30", "--json", *server)
    assert json.loads(out)["cli-ops-1"]["status"] == "TERMINATED"
    assert operate("retry", "cli-ops-1", *server)["status"] == "RUNNING"  # the cancelled WAIT again
    code, out = run("remove", "cli-ops-1", *server)
    assert code == 2 and "terminate it first" in out
    operate("terminate", "cli-ops-1", *server)
    run("watch", "cli-ops-1", "--within", "30", *server)
    assert operate("remove", "cli-ops-1", *server)["operation"] == "remove"
    code, out = run("pause", "cli-ops-1", *server)
    assert code == 2 and "no workflow with id" in out


def test_listing_searching_watching_and_starting_again(dev_server: DevServer, tmp_path: Path) -> None:
    server = ["--server", dev_server.url]
    definitions = tmp_path / "defs.json"
    definitions.write_text(
        json.dumps(
            [
                {"name": "cli_listed_task", "retryCount": 1},
                {"name": "cli_held", "tasks": [{"name": "w", "taskReferenceName": "w", "type": "WAIT"}]},
            ]
        )
    )
    assert run("def", "register", str(definitions), *server)[0] == 0
    code, out = run("def", "ls", "--tasks", "--json", *server)
    assert (
        code == 0
        and {"name": "cli_listed_task", "retryCount": 1}.items()
        <= next(t for t in json.loads(out) if t["name"] == "cli_listed_task").items()
    )
    code, out = run("def", "ls", "--tasks", *server)
    assert code == 0 and "cli_listed_task" in out

    assert operate("start", "cli_held", "--id", "cli-held-1", *server) == {"workflowId": "cli-held-1"}
    again = operate("start", "cli_held", "--id", "cli-held-1", *server)
    assert again == {"workflowId": "cli-held-1", "existed": True}
    code, out = run("start", "cli_held", "--id", "cli-held-1", *server)
    assert code == 0 and "already exists" in out and "nothing started" in out

    code, out = run(
        "ls", "--query", "workflowType = cli_held AND status IN (RUNNING, PAUSED)", "--json", *server
    )
    assert code == 0 and [w["workflowId"] for w in json.loads(out)] == ["cli-held-1"], out
    code, out = run("ls", "--query", "colour = red", *server)
    assert code == 2 and "unknown field 'colour'" in out

    code, out = run("watch", "no-such-workflow", "--within", "5", *server)
    assert code == 2 and "not found: no-such-workflow" in out
    code, out = run("watch", "cli-held-1", "--within", "1", "--json", *server)
    printed = next(line for line in out.splitlines() if line.startswith("{"))
    assert code == 2 and json.loads(printed)["unfinished"] == ["cli-held-1"]
    operate("terminate", "cli-held-1", *server)
    code, out = run("watch", "cli-held-1", "--within", "30", *server)
    assert code == 1 and "did not complete" in out

    code, out = run("--version")
    assert code == 0 and out.startswith("cairn ")


def test_cairn_dev_names_its_own_address_in_the_worker_command(dev_server: DevServer) -> None:
    """Not on the default port: the command it prints must reach it."""
    announced = dev_server.process.log_path.read_text(errors="replace")
    assert f"cairn worker examples.workers --server {dev_server.url}" in announced
