"""Authentication and authorisation over real HTTP, on a `cairn dev` process with API keys
(tests/authkeys.py): every route of every router (metadata, workflow, execute, tasks) answers 401
without a valid token and 403 to a role lacking its permission, in Conductor's error body with
Orkes's token reason; the right role gets through; a worker key works only on its task types;
/health stays open. Then the CLI and `cairn worker` with CAIRN_API_KEY_ID/SECRET."""

from __future__ import annotations

import asyncio
import re
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from cairn.auth import ApiKey
from cairn.cli import app as cli
from cairn.http_api import ApiSession, TokenRefused
from services.api.auth import ROUTE_PERMISSIONS
from shared.auth.roles import Role, allows
from tests.authkeys import LIMITED_TYPE, ROLE_KEYS, expired_token, secret_of
from tests.devserver import DevServer
from tests.e2e.cluster import Process

pytestmark = pytest.mark.integration

PATH_VALUES = {
    "name": "x",
    "version": "1",
    "workflow_id": "wf-x",
    "task_type": "t",
    "task_ref_name": "r",
    "task_reference_name": "r",
    "correlation_id": "c",
    "event": "kafka:x",
    "status": "COMPLETED",
    "task_id": "task-x",
    "letter_id": "0:0",
    "app": "a",
}
ROUTES = sorted(ROUTE_PERMISSIONS)


def url_of(path: str) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: PATH_VALUES[m.group(1)], path)


def route_id(route: tuple[str, str]) -> str:
    return f"{route[0]} {route[1]}"


@pytest.fixture(scope="module")
def tokens(auth_dev_server: DevServer) -> dict[str, str]:
    """One token per key, fetched once for the module."""
    found = {}
    with httpx.Client(base_url=auth_dev_server.url, timeout=30) as http:
        for key_id in [*ROLE_KEYS.values(), "limited-worker"]:
            response = http.post("/api/token", json={"keyId": key_id, "keySecret": secret_of(key_id)})
            assert response.status_code == 200, response.text
            found[key_id] = response.json()["token"]
    return found


@pytest.fixture
async def api(auth_dev_server: DevServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=auth_dev_server.url, timeout=30) as client:
        yield client


def as_key(tokens: dict[str, str], key_id: str) -> dict[str, str]:
    return {"X-Authorization": tokens[key_id]}


def assert_error(
    response: httpx.Response, status: int, code: str, error: str | None = None
) -> dict[str, Any]:
    assert response.status_code == status, f"{response.status_code} {response.text}"
    body: dict[str, Any] = response.json()
    assert (body["status"], body["code"], body.get("error")) == (status, code, error), body
    assert body["message"] and isinstance(body["validationErrors"], list)
    return body


async def test_health_is_open_and_the_token_endpoint_checks_the_secret(api: httpx.AsyncClient) -> None:
    assert (await api.get("/health")).json() == {"healthy": True}
    # The API's description grants nothing, so it stays readable (and shows where the token goes).
    described = await api.get("/openapi.json")
    assert described.status_code == 200
    assert described.json()["components"]["securitySchemes"]["APIKeyHeader"]["name"] == "X-Authorization"
    assert (await api.get("/docs")).status_code == 200
    good = await api.post("/api/token", json={"keyId": "reader", "keySecret": secret_of("reader")})
    assert good.status_code == 200 and set(good.json()) == {"token"} and good.json()["token"].count(".") == 2
    for key_id, secret in (("reader", secret_of("admin")), ("nobody", secret_of("reader")), ("reader", "")):
        body = assert_error(
            await api.post("/api/token", json={"keyId": key_id, "keySecret": secret}),
            401 if secret else 400,
            "UNAUTHORIZED" if secret else "INVALID_INPUT",
        )
        # No INVALID_TOKEN here: conductor-python would answer it with another POST /api/token.
        assert "error" not in body
    assert_error(await api.post("/api/token", json={"keyId": "reader"}), 400, "INVALID_INPUT")


@pytest.mark.parametrize("route", ROUTES, ids=route_id)
async def test_every_route_without_a_valid_token_is_401(
    api: httpx.AsyncClient, route: tuple[str, str]
) -> None:
    method, path = route
    url = url_of(path)
    body = assert_error(await api.request(method, url), 401, "UNAUTHORIZED", "INVALID_TOKEN")
    assert "POST /api/token" in body["message"]
    headers = {"X-Authorization": "not-a-token"}
    assert_error(await api.request(method, url, headers=headers), 401, "UNAUTHORIZED", "INVALID_TOKEN")
    headers = {"X-Authorization": expired_token("admin", int(time.time()))}
    assert_error(await api.request(method, url, headers=headers), 401, "UNAUTHORIZED", "EXPIRED_TOKEN")


@pytest.mark.parametrize("route", ROUTES, ids=route_id)
async def test_every_route_refuses_the_roles_without_its_permission(
    api: httpx.AsyncClient, tokens: dict[str, str], route: tuple[str, str]
) -> None:
    method, path = route
    permission = ROUTE_PERMISSIONS[route]
    refused = [role for role in Role if not allows(role, permission)]
    assert refused and Role.ADMIN not in refused
    for role in refused:
        response = await api.request(method, url_of(path), headers=as_key(tokens, ROLE_KEYS[role.value]))
        body = assert_error(response, 403, "FORBIDDEN")
        assert f"(role {role.value}) may not {method} {path}" in body["message"], body


async def test_bearer_tokens_work_too(api: httpx.AsyncClient, tokens: dict[str, str]) -> None:
    response = await api.get(
        "/api/metadata/workflow", headers={"Authorization": f"Bearer {tokens['reader']}"}
    )
    assert response.status_code == 200, response.text


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


async def poll(api: httpx.AsyncClient, headers: dict[str, str], task_type: str) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        response = await api.get(
            f"/api/tasks/poll/batch/{task_type}", params={"timeout": 1000}, headers=headers
        )
        assert response.status_code == 200, response.text
        if response.json():
            task: dict[str, Any] = response.json()[0]
            return task
    raise AssertionError(f"no {task_type} task to poll")


async def until(
    api: httpx.AsyncClient, headers: dict[str, str], workflow_id: str, status: str
) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while True:
        body: dict[str, Any] = (await api.get(f"/api/workflow/{workflow_id}", headers=headers)).json()
        if body.get("status") == status or time.monotonic() > deadline:
            assert body.get("status") == status, body
            return body
        await asyncio.sleep(0.05)


async def until_scheduled(
    api: httpx.AsyncClient, headers: dict[str, str], workflow_id: str, reference: str
) -> None:
    """Wait for the decider to schedule `reference`: a worker's result is decided on asynchronously."""
    deadline = time.monotonic() + 30
    while True:
        body: dict[str, Any] = (await api.get(f"/api/workflow/{workflow_id}", headers=headers)).json()
        references = [task.get("referenceTaskName") for task in body.get("tasks", [])]
        if reference in references:
            return
        assert time.monotonic() < deadline, body
        await asyncio.sleep(0.05)


def result(task: dict[str, Any], output: dict[str, Any]) -> dict[str, Any]:
    return {
        "workflowInstanceId": task["workflowInstanceId"],
        "taskId": task["taskId"],
        "status": "COMPLETED",
        "outputData": output,
    }


async def test_each_role_does_its_part_of_a_workflows_life(
    api: httpx.AsyncClient, tokens: dict[str, str]
) -> None:
    admin, operator, worker, reader = (as_key(tokens, k) for k in ("admin", "operator", "worker", "reader"))
    task_type, name = unique("auth_task"), unique("auth_flow")
    definition = {
        "name": name,
        "tasks": [
            {"name": task_type, "taskReferenceName": "work"},
            {"name": "approve", "taskReferenceName": "approve", "type": "WAIT"},
        ],
        "outputParameters": {"done": "${work.output.done}", "by": "${approve.output.by}"},
    }
    # admin: definitions
    assert (
        await api.post("/api/metadata/taskdefs", json=[{"name": task_type}], headers=admin)
    ).status_code == 200
    assert (await api.post("/api/metadata/workflow", json=definition, headers=admin)).status_code == 200
    # reader and operator read them
    for headers in (reader, operator):
        found = await api.get(f"/api/metadata/workflow/{name}", headers=headers)
        assert found.status_code == 200 and found.json()["name"] == name
    # operator: start (both ways); the worker works; the operator signals and terminates
    started = await api.post("/api/workflow", json={"name": name, "input": {}}, headers=operator)
    assert started.status_code == 200, started.text
    workflow_id = started.text
    other = (await api.post(f"/api/workflow/{name}", json={}, headers=operator)).text
    task = await poll(api, worker, task_type)
    assert task["workflowInstanceId"] in (workflow_id, other)
    reported = await api.post("/api/tasks/update-v2", json=result(task, {"done": True}), headers=worker)
    assert reported.status_code in (200, 204), reported.text
    nxt = reported.json() if reported.status_code == 200 else await poll(api, worker, task_type)
    assert (await api.post("/api/tasks", json=result(nxt, {"done": True}), headers=worker)).status_code == 200
    running = {task["workflowInstanceId"], nxt["workflowInstanceId"]}
    assert running == {workflow_id, other}
    await until_scheduled(api, reader, workflow_id, "approve")
    signal = await api.post(
        f"/api/tasks/{workflow_id}/approve/COMPLETED", json={"by": "ops"}, headers=operator
    )
    assert signal.status_code == 200, signal.text
    finished = await until(api, reader, workflow_id, "COMPLETED")
    assert finished["output"] == {"done": True, "by": "ops"}
    assert (await api.get(f"/api/tasks/{finished['tasks'][0]['taskId']}", headers=reader)).status_code == 200
    search = await api.get("/api/workflow/search", params={"workflowType": name}, headers=reader)
    assert search.status_code == 200 and search.json()["totalHits"] == 2
    running_ids = await api.get(f"/api/workflow/running/{name}", headers=operator)
    assert running_ids.json() == [other]
    assert (await api.delete(f"/api/workflow/{other}", headers=operator)).status_code == 200
    await until(api, reader, other, "TERMINATED")
    # admin: remove history; the synchronous run is the operator's
    assert (await api.delete(f"/api/workflow/{workflow_id}/remove", headers=admin)).status_code == 200
    wait_only = {"name": unique("auth_wait"), "version": 1, "tasks": [definition["tasks"][1]]}
    assert (await api.post("/api/metadata/workflow", json=wait_only, headers=admin)).status_code == 200
    run = await api.post(
        f"/api/workflow/execute/{wait_only['name']}/1", json={"name": wait_only["name"]}, headers=operator
    )
    assert run.status_code == 200 and run.json()["status"] == "RUNNING", run.text
    # admin may do everything, delete definitions included
    assert (await api.get("/api/workflow/search", headers=admin)).status_code == 200
    assert (
        await api.delete(f"/api/metadata/workflow/{wait_only['name']}/1", headers=admin)
    ).status_code == 200
    assert (await api.delete(f"/api/metadata/taskdefs/{task_type}", headers=admin)).status_code == 200


async def test_a_worker_key_with_task_types_works_only_on_them(
    api: httpx.AsyncClient, tokens: dict[str, str]
) -> None:
    admin, operator, worker, limited = (
        as_key(tokens, k) for k in ("admin", "operator", "worker", "limited-worker")
    )
    other_type, name = unique("auth_other"), unique("auth_types")
    definition = {
        "name": name,
        "tasks": [
            {"name": LIMITED_TYPE, "taskReferenceName": "mine"},
            {"name": other_type, "taskReferenceName": "theirs"},
        ],
    }
    assert (await api.post("/api/metadata/workflow", json=definition, headers=admin)).status_code == 200
    body = assert_error(
        await api.get(f"/api/tasks/poll/batch/{other_type}", headers=limited), 403, "FORBIDDEN"
    )
    assert LIMITED_TYPE in body["message"] and other_type in body["message"]
    assert_error(await api.get(f"/api/tasks/poll/{other_type}", headers=limited), 403, "FORBIDDEN")
    workflow_id = (await api.post(f"/api/workflow/{name}", json={}, headers=operator)).text
    mine = await poll(api, limited, LIMITED_TYPE)
    assert (await api.post("/api/tasks", json=result(mine, {}), headers=limited)).status_code == 200
    theirs = await poll(api, worker, other_type)
    # Reporting a task of a type the key is not for, by its id, is refused too (both endpoints).
    for endpoint in ("/api/tasks", "/api/tasks/update-v2"):
        assert_error(await api.post(endpoint, json=result(theirs, {}), headers=limited), 403, "FORBIDDEN")
    assert (await api.post("/api/tasks", json=result(theirs, {}), headers=worker)).status_code == 200
    await until(api, as_key(tokens, "reader"), workflow_id, "COMPLETED")


def run_cli(*args: str, env: dict[str, str]) -> tuple[int, str]:
    outcome = CliRunner().invoke(cli, list(args), env=env)
    return outcome.exit_code, outcome.output + (outcome.stderr if outcome.stderr_bytes else "")


def key_env(key_id: str | None) -> dict[str, str]:
    if key_id is None:
        return {"CAIRN_API_KEY_ID": "", "CAIRN_API_KEY_SECRET": ""}
    return {"CAIRN_API_KEY_ID": key_id, "CAIRN_API_KEY_SECRET": secret_of(key_id)}


def test_the_cli_sends_its_key(auth_dev_server: DevServer, tmp_path: Path) -> None:
    server = ["--server", auth_dev_server.url]
    definition = tmp_path / "wait.json"
    name = unique("auth_cli")
    definition.write_text(
        f'{{"name": "{name}", "tasks": [{{"name": "w", "taskReferenceName": "w", "type": "WAIT"}}]}}'
    )
    code, out = run_cli("def", "ls", *server, env=key_env(None))
    assert code == 2 and "answered 401" in out and "CAIRN_API_KEY_ID" in out, out
    code, out = run_cli("def", "register", str(definition), *server, env=key_env("operator"))
    assert code == 2 and "answered 403" in out and "role operator" in out, out
    code, out = run_cli(
        "def",
        "register",
        str(definition),
        *server,
        env={**key_env("admin"), "CAIRN_API_KEY_SECRET": "wrong-0123456789abc"},
    )
    assert code == 2 and "refused key 'admin'" in out, out
    code, out = run_cli("def", "register", str(definition), *server, env=key_env("admin"))
    assert code == 0, out
    code, out = run_cli("start", name, "--id", f"{name}-1", "--json", *server, env=key_env("operator"))
    assert code == 0, out
    code, out = run_cli("signal", f"{name}-1", "w", "--data", '{"ok": 1}', *server, env=key_env("operator"))
    assert code == 0, out
    code, out = run_cli("watch", f"{name}-1", "--json", "--within", "30", *server, env=key_env("reader"))
    assert code == 0 and '"COMPLETED"' in out, out


def test_cairn_worker_runs_tasks_with_a_worker_key(auth_dev_server: DevServer, tmp_path: Path) -> None:
    """`cairn worker` (the HTTP runner) with a key limited to its task type completes a workflow."""
    name = unique("auth_worker")
    definition = {
        "name": name,
        "tasks": [
            {
                "name": LIMITED_TYPE,
                "taskReferenceName": "work",
                "inputParameters": {"n": "${workflow.input.n}"},
            }
        ],
        "outputParameters": {"n": "${work.output.n}"},
    }
    with httpx.Client(base_url=auth_dev_server.url, timeout=30) as http:
        admin = {
            "X-Authorization": http.post(
                "/api/token", json={"keyId": "admin", "keySecret": secret_of("admin")}
            ).json()["token"]
        }
        assert http.post("/api/metadata/workflow", json=definition, headers=admin).status_code == 200
        workflow_id = http.post(f"/api/workflow/{name}", json={"n": 20}, headers=admin).text
        argv = [
            sys.executable,
            "-m",
            "cairn",
            "worker",
            "tests.integration.auth_workers",
            "--server",
            auth_dev_server.url,
        ]
        worker = Process(
            f"auth-worker-{uuid.uuid4().hex[:6]}",
            argv,
            {**auth_dev_server.env, **key_env("limited-worker")},
            tmp_path,
        )
        worker.start()
        try:
            deadline = time.monotonic() + 30
            while True:
                state = http.get(f"/api/workflow/{workflow_id}", headers=admin).json()
                if state["status"] != "RUNNING" or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
        finally:
            code = worker.stop()
        assert (state["status"], state["output"]) == ("COMPLETED", {"n": 21}), f"{state}\n{worker.log_tail()}"
        assert code == 0, worker.log_tail()


async def test_the_http_workers_session_fetches_a_token_and_names_a_refused_key(
    auth_dev_server: DevServer,
) -> None:
    """cairn/http_api.ApiSession (the HTTP worker's aiohttp session) signs with its key's token,
    and a wrong secret fails with the key named, not with a 401 on every poll."""
    key_id = ROLE_KEYS["reader"]
    async with ApiSession(auth_dev_server.url, ApiKey(key_id, secret_of(key_id))) as session:
        answer = await session.request("GET", "/api/metadata/workflow")
        assert answer.status_code == 200, answer.text
    async with ApiSession(auth_dev_server.url, ApiKey(key_id, "not-the-secret")) as session:
        with pytest.raises(TokenRefused, match=f"refused key '{key_id}'"):
            await session.request("GET", "/api/metadata/workflow")
