"""One engine, two kinds: a JSON workflow calls a code workflow as its SUB_WORKFLOW, and a code
workflow calls a JSON one as its child, on `cairn dev` with a real runtime polling over HTTP."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import cairn.workflow as wf
from cairn.workflow.testing import replay
from tests.devserver import DevServer

pytestmark = pytest.mark.integration


def square(ctx: wf.WorkflowActivityContext, x: int) -> int:
    return x * x


def sum_of_squares(ctx: wf.DaprWorkflowContext, n: int) -> Any:
    values = yield wf.when_all([ctx.call_activity(square, input=i) for i in range(n)])
    return sum(values)


def calls_json(ctx: wf.DaprWorkflowContext, pair: dict[str, int]) -> Any:
    child = yield ctx.call_child_workflow("json_adder", input=pair)
    return {"fromJson": child}


def waiter(ctx: wf.DaprWorkflowContext, _: Any) -> Any:
    got = yield ctx.wait_for_external_event("approve")
    return got


@pytest.fixture(scope="module")
def runtime(dev_server: DevServer) -> Iterator[wf.WorkflowRuntime]:
    monkey = pytest.MonkeyPatch()
    monkey.setenv("CAIRN_SERVER", dev_server.url)
    monkey.setenv("CAIRN_APP", f"interop-{uuid.uuid4().hex[:6]}")
    wfr = wf.WorkflowRuntime()
    wfr.register_activity(square)
    wfr.register_workflow(sum_of_squares)
    wfr.register_workflow(calls_json)
    wfr.register_workflow(waiter)
    wfr.start()
    yield wfr
    wfr.shutdown()
    monkey.undo()


def wait_done(api: httpx.Client, workflow_id: str, seconds: float = 30) -> dict[str, Any]:
    deadline = time.monotonic() + seconds
    while True:
        found = api.get(f"/api/workflow/{workflow_id}").json()
        if found["status"] not in ("RUNNING", "PAUSED"):
            return dict(found)
        assert time.monotonic() < deadline, found
        time.sleep(0.1)


def test_a_json_workflow_runs_a_code_workflow_as_its_sub_workflow(
    dev_server: DevServer, runtime: wf.WorkflowRuntime
) -> None:
    parent = {
        "name": "json_parent_of_code",
        "tasks": [
            {
                "name": "sum_of_squares",
                "taskReferenceName": "child",
                "type": "SUB_WORKFLOW",
                "subWorkflowParam": {"name": "sum_of_squares"},
                "inputParameters": {"input": "${workflow.input.n}"},
            }
        ],
        "outputParameters": {"total": "${child.output.result}"},
    }
    with httpx.Client(base_url=dev_server.url, timeout=30) as api:
        registered = api.get("/api/metadata/workflow/sum_of_squares").json()
        assert registered["ownerApp"] == runtime._app  # the runtime registered it on start
        assert api.post("/api/metadata/workflow", json=parent).status_code == 200
        started = api.post("/api/workflow", json={"name": "json_parent_of_code", "input": {"n": 4}})
        assert started.status_code == 200, started.text
        done = wait_done(api, started.text)
        assert done["status"] == "COMPLETED" and done["output"] == {"total": 14}
        [task] = done["tasks"]
        child = api.get(f"/api/workflow/{task['subWorkflowId']}").json()
        assert child["kind"] == "code" and child["parentWorkflowId"] == started.text


def test_a_code_workflow_runs_a_json_workflow_as_its_child(
    dev_server: DevServer, runtime: wf.WorkflowRuntime
) -> None:
    adder = {
        "name": "json_adder",
        "tasks": [
            {
                "name": "add",
                "taskReferenceName": "add",
                "type": "INLINE",
                "inputParameters": {
                    "evaluatorType": "javascript",
                    "expression": "$.a + $.b",
                    "a": "${workflow.input.a}",
                    "b": "${workflow.input.b}",
                },
            }
        ],
        "outputParameters": {"sum": "${add.output.result}"},
    }
    with httpx.Client(base_url=dev_server.url, timeout=30) as api:
        assert api.post("/api/metadata/workflow", json=adder).status_code == 200
    client = wf.DaprWorkflowClient()
    instance = client.schedule_new_workflow("calls_json", input={"a": 2, "b": 3})
    state = client.wait_for_workflow_completion(instance, timeout_in_seconds=30)
    assert state is not None and state.runtime_status is wf.WorkflowStatus.COMPLETED, state
    assert state.serialized_output == '{"fromJson": {"sum": 5}}'
    child = httpx.get(f"{dev_server.url}/api/workflow/{instance}:0001").json()
    assert "kind" not in child and child["input"] == {"a": 2, "b": 3} and child["status"] == "COMPLETED"


def test_a_history_exported_by_the_cli_replays_the_code_and_catches_a_drift(
    dev_server: DevServer, runtime: wf.WorkflowRuntime, tmp_path: Path
) -> None:
    client = wf.DaprWorkflowClient()
    instance = client.schedule_new_workflow(sum_of_squares, input=3)
    state = client.wait_for_workflow_completion(instance, timeout_in_seconds=30)
    assert state is not None and state.serialized_output == "5"
    exported = tmp_path / "history.json"
    cli = [sys.executable, "-m", "cairn", "history"]
    run = subprocess.run(
        [*cli, "export", instance, "--server", dev_server.url, "-o", str(exported)], timeout=60
    )
    assert run.returncode == 0
    shown = subprocess.run(
        [*cli, "show", instance, "--server", dev_server.url], capture_output=True, text=True, timeout=60
    )
    assert shown.returncode == 0 and "TaskScheduled" in shown.stdout and "ExecutionCompleted" in shown.stdout
    history = json.loads(exported.read_text())
    assert replay(sum_of_squares, history) == []

    def drifted(ctx: wf.DaprWorkflowContext, n: int) -> Any:
        values = yield wf.when_all([ctx.call_activity("cube", input=i) for i in range(n)])
        return sum(values)

    with pytest.raises(wf.NonDeterminismError, match="name='square'"):
        replay(drifted, history)


def test_the_cli_operates_code_workflows_like_json_ones(
    dev_server: DevServer, runtime: wf.WorkflowRuntime
) -> None:
    def cairn(*args: str) -> Any:
        run = subprocess.run(
            [sys.executable, "-m", "cairn", *args, "--server", dev_server.url, "--json"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert run.returncode == 0, run.stdout + run.stderr
        return json.loads(run.stdout) if run.stdout.strip() else None

    client = wf.DaprWorkflowClient()
    first = client.schedule_new_workflow(waiter, instance_id=f"cli-{uuid.uuid4().hex[:6]}")
    second = client.schedule_new_workflow(waiter, instance_id=f"cli-{uuid.uuid4().hex[:6]}")
    assert cairn("pause", first)["status"] == "PAUSED"
    assert client.get_workflow_state(first).runtime_status is wf.WorkflowStatus.SUSPENDED  # type: ignore[union-attr]
    assert cairn("resume", first)["status"] == "RUNNING"
    cairn("signal", first, "approve", "--data", '{"by": "ann"}')  # a code workflow's external event
    state = client.wait_for_workflow_completion(first, timeout_in_seconds=30)
    assert state is not None and state.serialized_output == '{"by": "ann"}'
    assert cairn("status", first)["output"] == {"result": {"by": "ann"}}
    listed = {w["workflowId"]: w for w in cairn("ls", "--query", "workflowType = waiter")}
    assert listed[first]["status"] == "COMPLETED" and listed[second]["status"] == "RUNNING"
    cairn("terminate", second, "--reason", "no longer needed")
    ended = client.wait_for_workflow_completion(second, timeout_in_seconds=30)
    assert ended is not None and ended.runtime_status is wf.WorkflowStatus.TERMINATED
    cairn("remove", first)
    assert client.get_workflow_state(first) is None
