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
