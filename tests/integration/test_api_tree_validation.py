"""Issue 11 point 6 over the api: a definition that cannot run is refused with a 400 naming the
field path — at registration, and inline in a start — and nothing is stored."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tests.devserver import DevServer

pytestmark = pytest.mark.integration


@pytest.fixture
async def api(dev_server: DevServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=dev_server.url, timeout=30) as client:
        yield client


def simple(ref: str, **extra: Any) -> dict[str, Any]:
    return {"name": "t", "taskReferenceName": ref, **extra}


def fork(ref: str, *branches: list[dict[str, Any]]) -> dict[str, Any]:
    return {"name": ref, "taskReferenceName": ref, "type": "FORK_JOIN", "forkTasks": list(branches)}


def join(ref: str, *on: str) -> dict[str, Any]:
    return {"name": ref, "taskReferenceName": ref, "type": "JOIN", "joinOn": list(on)}


CASES: dict[str, tuple[list[dict[str, Any]], str, str]] = {
    "fork without join": ([fork("f", [simple("a")]), simple("x")], "tasks[0]", "must be followed by a JOIN"),
    "__ in a reference": ([simple("a__1")], "tasks[0].taskReferenceName", "'__' is reserved"),
    "duplicate ref in a branch": (
        [simple("a"), fork("f", [simple("a")]), join("j", "a")],
        "tasks[1].forkTasks[0][0].taskReferenceName",
        "duplicate taskReferenceName 'a'",
    ),
    "operator field on the wrong type": (
        [simple("a", loopOver=[simple("b")])],
        "tasks[0].loopOver",
        "only a DO_WHILE task takes loopOver",
    ),
    "switch without cases": (
        [
            {
                "name": "s",
                "taskReferenceName": "s",
                "type": "SWITCH",
                "evaluatorType": "value-param",
                "expression": "k",
            }
        ],
        "tasks[0].decisionCases",
        "at least one case",
    ),
    "terminate status": (
        [
            {
                "name": "t",
                "taskReferenceName": "t",
                "type": "TERMINATE",
                "inputParameters": {"terminationStatus": "DONE"},
            }
        ],
        "tasks[0].inputParameters.terminationStatus",
        "COMPLETED, FAILED, TERMINATED",
    ),
    "do_while without condition": (
        [{"name": "l", "taskReferenceName": "l", "type": "DO_WHILE", "loopOver": [simple("b")]}],
        "tasks[0].loopCondition",
        "required",
    ),
    "join naming a task outside its fork": (
        [simple("x"), fork("f", [simple("a")]), join("j", "a", "x")],
        "tasks[2].joinOn[1]",
        "'x' is not a task of the fork 'f'",
    ),
    "javascript that does not parse": (
        [
            {
                "name": "i",
                "taskReferenceName": "i",
                "type": "INLINE",
                "inputParameters": {"expression": "function("},
            }
        ],
        "tasks[0].inputParameters.expression",
        "does not parse",
    ),
    "nested deep inside a loop": (
        [
            {
                "name": "l",
                "taskReferenceName": "l",
                "type": "DO_WHILE",
                "loopCondition": "true",
                "loopOver": [fork("f", [simple("a")])],
            }
        ],
        "tasks[0].loopOver[0]",
        "must be followed by a JOIN",
    ),
}


@pytest.mark.parametrize("refusal", list(CASES))
async def test_a_definition_that_cannot_run_is_refused_with_its_field_path(
    api: httpx.AsyncClient, refusal: str
) -> None:
    tasks, path, words = CASES[refusal]
    name = f"bad-{uuid.uuid4().hex[:8]}"
    response = await api.post("/api/metadata/workflow", json={"name": name, "tasks": tasks})
    assert response.status_code == 400, response.text
    problems = {e["path"]: e["message"] for e in response.json()["validationErrors"]}
    assert path in problems and words in problems[path], problems
    assert (await api.get(f"/api/metadata/workflow/{name}")).status_code == 404, "nothing stored"
    started = await api.post(
        "/api/workflow", json={"name": name, "workflowDef": {"name": name, "tasks": tasks}}
    )
    assert started.status_code == 400, started.text
    inline = {e["path"]: e["message"] for e in started.json()["validationErrors"]}
    assert f"workflowDef.{path}" in inline and words in inline[f"workflowDef.{path}"], inline


async def test_execute_runs_an_inline_workflow_synchronously(api: httpx.AsyncClient) -> None:
    """POST /api/workflow/execute/{name}/{version}: Conductor's synchronous run (what
    conductor-python's ConductorWorkflow.execute calls) answers with the finished WorkflowRun."""
    name = f"exec-{uuid.uuid4().hex[:8]}"
    definition = {
        "name": name,
        "tasks": [
            {
                "name": "i",
                "taskReferenceName": "i",
                "type": "INLINE",
                "inputParameters": {"expression": "$.n + 1", "n": "${workflow.input.n}"},
            }
        ],
        "outputParameters": {"n": "${i.output.result}"},
    }
    body = {"name": name, "input": {"n": 41}, "workflowDef": definition}
    response = await api.post(f"/api/workflow/execute/{name}/1", params={"requestId": "r-1"}, json=body)
    assert response.status_code == 200, response.text
    run = response.json()
    assert (run["status"], run["output"], run["requestId"], run["signalTimeout"]) == (
        "COMPLETED",
        {"n": 42},
        "r-1",
        False,
    )
    assert [t["referenceTaskName"] for t in run["tasks"]] == ["i"]
    waiting = {**definition, "tasks": [{"name": "w", "taskReferenceName": "w", "type": "WAIT"}]}
    blocked = await api.post(f"/api/workflow/execute/{name}/1", json={**body, "workflowDef": waiting})
    assert blocked.json()["status"] == "RUNNING" and blocked.json()["signalTimeout"] is False  # a WAIT blocks
