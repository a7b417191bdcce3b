"""The routes served ahead of FastAPI (services/api/fast_routes.py): a plain worker result, start
or batch poll is answered by them; everything else gets exactly the answer FastAPI's own route gives. The
real app over httpx's ASGI transport, with a store that knows nothing (these tests are about the
routing; the routes' work runs against a real `cairn dev` in tests/integration)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import httpx
import pytest
from fastapi import FastAPI

from services.api.app import create_app
from services.api.auth import api_auth
from services.api.context import ApiContext
from services.api.fast_routes import POLL_PATH, FastRoute, served
from shared.config import CairnSettings
from shared.models.limits import DEFAULT_PAYLOAD_LIMITS

RESULT = {"workflowInstanceId": "wf-1", "taskId": "t-1", "status": "COMPLETED", "outputData": {"n": 1}}
START = {"name": "pay", "input": {"amount": 5}, "correlationId": "c-1"}
PLAIN: dict[str, tuple[dict[str, Any], str]] = {
    "/api/tasks/update-v2": (RESULT, "no workflow with id 'wf-1'"),
    "/api/tasks": (RESULT, "no workflow with id 'wf-1'"),
    "/api/workflow": (START, "no workflow definition named 'pay'; register it first"),
}
PATHS = list(PLAIN)
FAST_PATHS = [*PATHS, POLL_PATH]


class NoWorkflows:
    """A store with nothing in it: every result is for an unknown workflow, every start for an
    unknown definition (a 404)."""

    async def has_workflow_def(self, name: str, version: int | None = None) -> bool:
        return False

    async def load_heads(self, workflow_ids: Sequence[str], running_only: bool = False) -> dict[str, Any]:
        return {}

    async def find_task_workflow(self, task_id: str) -> None:
        return None


class NoTasks:
    """A dispatcher with no task waiting; it keeps the arguments of each poll it was asked."""

    def __init__(self) -> None:
        self.polls: list[tuple[Any, ...]] = []

    async def poll(
        self, task_type: str, worker_id: str, count: int, timeout_s: float, gone: Any = None
    ) -> SimpleNamespace:
        self.polls.append((task_type, worker_id, count, timeout_s, gone is not None))
        return SimpleNamespace(tasks=[], offers=[])


def app(with_fast_routes: bool = True, auth: Any = None) -> FastAPI:
    ctx = SimpleNamespace(
        store=NoWorkflows(), auth=auth, payload_limits=DEFAULT_PAYLOAD_LIMITS, dispatcher=NoTasks()
    )
    built = create_app(cast(ApiContext, ctx))
    if not with_fast_routes:
        built.router.routes[:] = [r for r in built.router.routes if not isinstance(r, FastRoute)]
    return built


def polls(target: FastAPI) -> list[tuple[Any, ...]]:
    return cast(NoTasks, target.state.cairn.dispatcher).polls


async def answer(
    target: FastAPI, method: str, path: str, content: bytes, headers: dict[str, str] | None = None
) -> tuple[int, str]:
    transport = httpx.ASGITransport(app=target)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        response = await client.request(method, path, content=content, headers=headers or {})
    return response.status_code, response.text


def as_json(body: dict[str, Any]) -> tuple[bytes, dict[str, str]]:
    return json.dumps(body).encode(), {"content-type": "application/json"}


@pytest.mark.parametrize("path", PATHS)
async def test_a_plain_request_is_answered_by_the_fast_route(path: str) -> None:
    fast, plain = app(), app(with_fast_routes=False)
    body, refusal = PLAIN[path]
    content, headers = as_json(body)
    status, text = await answer(fast, "POST", path, content, headers)
    assert (status, json.loads(text)["message"]) == (404, refusal)
    assert served(fast) == {route: int(route == path) for route in FAST_PATHS}
    assert (status, text) == await answer(plain, "POST", path, content, headers)


JSON = {"content-type": "application/json"}


def not_plain(path: str) -> list[tuple[str, bytes, dict[str, str]]]:
    """Requests FastAPI's route must answer (all but the last, which is plain: a charset)."""
    body = PLAIN[path][0]
    required = "name" if path == "/api/workflow" else "workflowInstanceId"
    bad_value = {"version": 0} if path == "/api/workflow" else {"status": "SCHEDULED"}
    return [
        ("bad JSON", b'{"taskId": ', JSON),
        ("not JSON at all", b"\xff\xfe", JSON),
        ("nested past Python's stack", b"[" * 100_000, JSON),
        ("a field missing", json.dumps({k: v for k, v in body.items() if k != required}).encode(), JSON),
        ("a value refused", json.dumps({**body, **bad_value}).encode(), JSON),
        ("a wrong type", json.dumps({**body, "input": "x", "outputData": "x"}).encode(), JSON),
        ("a list", json.dumps([body]).encode(), JSON),
        ("an empty body", b"", JSON),
        ("no content type", json.dumps(body).encode(), {}),
        ("another content type", json.dumps(body).encode(), {"content-type": "text/plain"}),
        (
            "JSON with a charset",
            json.dumps(body).encode(),
            {"content-type": "application/json; charset=utf-8"},
        ),
    ]


CASES = [(path, *case) for path in PATHS for case in not_plain(path)]


@pytest.mark.parametrize(
    ("path", "case", "content", "headers"), CASES, ids=[f"{p} {c}" for p, c, _, _ in CASES]
)
async def test_any_other_request_gets_fastapis_own_answer(
    path: str, case: str, content: bytes, headers: dict[str, str]
) -> None:
    fast, plain = app(), app(with_fast_routes=False)
    expected = await answer(plain, "POST", path, content, headers)
    assert expected[0] in (400, 404), expected
    assert await answer(fast, "POST", path, content, headers) == expected
    if case != "JSON with a charset":  # the one plain request of the list
        assert served(fast) == dict.fromkeys(FAST_PATHS, 0), "handed to FastAPI's route"


async def test_other_methods_reach_the_routes_they_reached_before() -> None:
    """GET /api/tasks/update-v2 is GET /api/tasks/{task_id} for a task "update-v2", as before;
    DELETE /api/tasks is refused with FastAPI's own 405."""
    for method, path in (
        ("GET", "/api/tasks/update-v2"),
        ("DELETE", "/api/tasks"),
        ("PUT", "/api/tasks/update-v2"),
    ):
        expected = await answer(app(with_fast_routes=False), method, path, b"")
        assert await answer(app(), method, path, b"") == expected
        assert expected[0] in (404, 405), expected


async def test_the_guard_runs_on_the_fast_route(tmp_path: Path) -> None:
    """With keys, a result without a token is refused as on FastAPI's route (401), and the guard
    saw FastAPI's route: the same path and permission."""
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps([{"keyId": "w", "keySecret": "s3cret-s3cret-s3cret", "role": "worker"}]))
    auth = api_auth(CairnSettings.model_validate({"auth_keys_file": str(keys)}))
    for path in PATHS:
        content, headers = as_json(PLAIN[path][0])
        fast, plain = app(auth=auth), app(with_fast_routes=False, auth=auth)
        status, body = await answer(fast, "POST", path, content, headers)
        assert status == 401 and "no token" in body
        assert (status, body) == await answer(plain, "POST", path, content, headers)
        assert sum(served(fast).values()) == 1
    fast, plain = app(auth=auth), app(with_fast_routes=False, auth=auth)
    status, body = await answer(fast, "GET", "/api/tasks/poll/batch/pay?count=2", b"")
    assert status == 401 and "no token" in body
    assert (status, body) == await answer(plain, "GET", "/api/tasks/poll/batch/pay?count=2", b"")
    assert served(fast)[POLL_PATH] == 1 and polls(fast) == []


async def test_the_fast_routes_have_their_fastapi_routes_permissions(tmp_path: Path) -> None:
    """A key whose role lacks the route's permission, and a worker key for other task types, are
    refused with the same 403 (naming FastAPI's route path, not the request's) on either route."""
    keys = tmp_path / "keys.json"
    secret = "s3cret-s3cret-s3cret"
    keys.write_text(
        json.dumps(
            [
                {"keyId": "reader", "keySecret": secret, "role": "reader"},
                {"keyId": "shipper", "keySecret": secret, "role": "worker", "taskTypes": ["ship"]},
            ]
        )
    )
    auth = api_auth(CairnSettings.model_validate({"auth_keys_file": str(keys)}))
    reader, shipper = ({"X-Authorization": auth.issue(key, secret) or ""} for key in ("reader", "shipper"))
    requests = [("POST", path, reader, "(role reader) may not POST " + path) for path in PATHS] + [
        ("GET", "/api/tasks/poll/batch/pay?count=2", reader, f"(role reader) may not GET {POLL_PATH}"),
        ("GET", "/api/tasks/poll/batch/pay?count=2", shipper, "works only on task types ship, not 'pay'"),
    ]
    for method, path, headers, refusal in requests:
        content, plain_json = as_json(PLAIN[path][0]) if method == "POST" else (b"", {})
        fast, plain = app(auth=auth), app(with_fast_routes=False, auth=auth)
        status, body = await answer(fast, method, path, content, {**plain_json, **headers})
        assert status == 403 and refusal in json.loads(body)["message"], body
        assert (status, body) == await answer(plain, method, path, content, {**plain_json, **headers})
        assert sum(served(fast).values()) == 1


PLAIN_POLLS = [
    ("count=5&timeout=250&workerid=w-1", ("pay", "w-1", 5, 0.25, True)),
    ("", ("pay", "http-worker", 1, 0.1, True)),  # FastAPI's defaults
    ("workerid=&count=1000&timeout=0", ("pay", "http-worker", 1000, 0.0, True)),
    ("timeout=99000&workerid=a%20b+c", ("pay", "a b c", 1, 30.0, True)),  # capped, decoded
]


@pytest.mark.parametrize(("query", "asked"), PLAIN_POLLS, ids=[q or "no query" for q, _ in PLAIN_POLLS])
async def test_a_plain_poll_is_answered_by_the_fast_route(query: str, asked: tuple[Any, ...]) -> None:
    """The same answer, and the dispatcher asked with the same arguments, as by FastAPI's route."""
    fast, plain = app(), app(with_fast_routes=False)
    path = f"/api/tasks/poll/batch/pay?{query}"
    expected = await answer(plain, "GET", path, b"")
    assert expected == (200, "[]")
    assert await answer(fast, "GET", path, b"") == expected
    assert served(fast) == {route: int(route == POLL_PATH) for route in FAST_PATHS}
    assert polls(fast) == polls(plain) == [asked]


NOT_PLAIN_POLLS = [
    ("GET", "pay?count=0"),
    ("GET", "pay?count=1001"),
    ("GET", "pay?count=abc"),
    ("GET", "pay?count=05"),
    ("GET", "pay?count=-1"),
    ("GET", "pay?count=%2B3"),
    ("GET", "pay?count=1e3"),
    ("GET", "pay?count="),
    ("GET", "pay?timeout=-1"),
    ("GET", "pay?timeout=1.5"),
    ("GET", "pay?timeout=1234567890"),
    ("GET", "pay?domain=eu"),
    ("GET", "pay?domain="),
    ("GET", "pay?count=1&count=2"),
    ("GET", "pay?workerid=a&workerid=b"),
    ("GET", "pay?other=1"),
    ("HEAD", "pay"),
    ("POST", "pay"),
    ("DELETE", "pay"),
]


@pytest.mark.parametrize(("method", "tail"), NOT_PLAIN_POLLS, ids=[f"{m} {t}" for m, t in NOT_PLAIN_POLLS])
async def test_any_other_poll_gets_fastapis_own_answer(method: str, tail: str) -> None:
    fast, plain = app(), app(with_fast_routes=False)
    path = f"/api/tasks/poll/batch/{tail}"
    expected = await answer(plain, method, path, b"")
    assert await answer(fast, method, path, b"") == expected
    assert polls(fast) == polls(plain)
    assert served(fast) == dict.fromkeys(FAST_PATHS, 0), "handed to FastAPI's route"


async def test_a_poll_for_a_refused_task_type_is_refused_as_before() -> None:
    """The endpoint refuses the type (a topic name), on either route: the same 400."""
    fast, plain = app(), app(with_fast_routes=False)
    path = "/api/tasks/poll/batch/pay%24ment?count=2"
    expected = await answer(plain, "GET", path, b"")
    assert expected[0] == 400 and "not a valid task type" in expected[1]
    assert await answer(fast, "GET", path, b"") == expected
    assert served(fast)[POLL_PATH] == 1 and polls(fast) == []


async def test_a_body_past_the_limit_is_refused_as_before() -> None:
    """Announced (refused by the middleware before any route) or streamed without a length
    (refused while the route reads it): the same 413 either way."""
    ctx = cast(
        ApiContext, SimpleNamespace(store=NoWorkflows(), auth=None, payload_limits=DEFAULT_PAYLOAD_LIMITS)
    )
    fast, plain = create_app(ctx, max_request_bytes=64), create_app(ctx, max_request_bytes=64)
    plain.router.routes[:] = [r for r in plain.router.routes if not isinstance(r, FastRoute)]
    content = json.dumps({**RESULT, "outputData": {"text": "x" * 200}}).encode()

    async def streamed() -> AsyncIterator[bytes]:
        yield content[:100]
        yield content[100:]

    for body in (lambda: content, streamed):
        answers = []
        for target in (plain, fast):
            transport = httpx.ASGITransport(app=target)
            async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
                response = await client.post(
                    "/api/tasks/update-v2", content=body(), headers={"content-type": "application/json"}
                )
            answers.append((response.status_code, response.text))
        assert answers[0][0] == 413 and answers[1] == answers[0], answers
    assert served(fast) == dict.fromkeys(FAST_PATHS, 0)


async def test_a_client_gone_before_its_body_arrived_gets_no_error() -> None:
    """A worker that hangs up mid-body: no answer and no 500 (there is no one to answer), where
    the fast route used to raise ClientDisconnect into the error handler."""
    fast = app()
    sent: list[Any] = []
    messages: list[dict[str, Any]] = [
        {"type": "http.disconnect"},
        {"type": "http.request", "body": b'{"workflowInstanceId": ', "more_body": True},
    ]

    async def receive() -> dict[str, Any]:
        return messages.pop()

    async def send(message: Any) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/api/tasks/update-v2",
        "raw_path": b"/api/tasks/update-v2",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"content-type", b"application/json")],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }
    await fast(scope, receive, send)
    assert sent == []
