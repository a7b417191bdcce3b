"""The routes of the requests that dominate, without FastAPI's per-request machinery: with an
HTTP worker every step of every workflow is one `POST /api/tasks/update-v2` (or `POST /api/tasks`)
and about one long poll (`GET /api/tasks/poll/batch/{taskType}`), and every workflow one
`POST /api/workflow`.

Why: FastAPI answers a request by solving its dependency graph, reading and parsing the body and
validating it against the route's fields, inside exit stacks and exception wrappers. For this
route that machinery cost about 80 µs a request (measured with the app's own middleware: 104 µs
through the FastAPI route against 22 µs through a plain Starlette route with the same body
validation), while the route's own work is one SQLite read and two short writes.

What stays the same, so a client cannot tell the difference:
- The route is matched ahead of FastAPI's (it is first in the router) and has FastAPI's route's
  path, which is what `authorise` reads from `scope["route"]`: the same permission.
- Only the plain case is served here: a JSON body (`Content-Type: application/json`) that parses
  and validates as the route's body model (ConductorTaskResult, StartWorkflowRequest), or a poll
  whose query has only `count`, `timeout` and `workerid`, each once, the numbers as plain decimals
  in FastAPI's bounds. Anything else — another content type, bad JSON, a field refused, a query
  parameter FastAPI would refuse or that Cairn refuses (`domain`), another method — is handed,
  with the body as read, back to the router, which passes this route by and reaches FastAPI's
  own route: it answers exactly as it always did. The error answers stay FastAPI's, in one place.
  (A poll for a task type Cairn refuses is refused by the endpoint itself, as on FastAPI's route.)
- The body is validated as FastAPI validates it (json.loads, then the model in Python mode), the
  guard and the endpoint are the same functions, and their errors (ApiError, a body past
  CAIRN_API_MAX_REQUEST_BYTES) reach the same exception handlers, which wrap the whole router.
- FastAPI's route stays registered behind this one: OpenAPI and /docs still describe it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import Any, TypeVar
from urllib.parse import parse_qsl

from fastapi import FastAPI
from fastapi.routing import APIRoute, APIRouter
from pydantic import BaseModel
from starlette.requests import ClientDisconnect, Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import BaseRoute, Match, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from services.api.auth import TOKEN_HEADER, authorise, caller
from services.api.context import ApiContext
from services.api.executions import StartWorkflowRequest, start_workflow
from services.api.tasks import (
    MAX_POLL_COUNT,
    ConductorTaskResult,
    batch_poll,
    update_task,
    update_task_and_poll,
)
from shared.auth.keys import ApiKey

Body = TypeVar("Body", bound=BaseModel)
PlainCall = Callable[[ApiContext, Any, ApiKey | None], Awaitable[Response]]
"""A route's endpoint given the context, the validated body and the caller's key."""


DECLINED = "cairn.plain_json_route.declined"
"""Set in the scope of a request a PlainJsonRoute hands on, so the router passes it by."""


class FastRoute(Route):
    """A route matched ahead of FastAPI's route for the same path and method, which answers every
    request this one hands back (`decline`)."""

    def __init__(self, path: str, method: str, router: ASGIApp) -> None:
        super().__init__(path, self._never_called, methods=[method])
        self.method = method
        self.router = router
        self.served = 0
        """Requests taken here rather than handed to FastAPI's route (for tests and benchmarks)."""

    @staticmethod
    async def _never_called(request: Request) -> Response:  # handle() replaces the endpoint
        raise AssertionError("a FastRoute answers in handle()")

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        if scope.get(DECLINED):
            return Match.NONE, {}
        match, child_scope = super().matches(scope)
        if match is not Match.NONE:
            # The guard reads the route's path (its permission) from scope["route"], which
            # Starlette's Route does not set (FastAPI's APIRoute does): this route's path is the
            # FastAPI route's, so a request gets the same permission on either.
            child_scope["route"] = self
        return match, child_scope

    async def decline(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Hand the request to the router again, which passes this route by."""
        await self.router({**scope, DECLINED: True}, receive, send)


class PlainJsonRoute(FastRoute):
    """One POST route served directly when its request is plain (module docstring); FastAPI's
    route for the same path answers everything else."""

    def __init__(self, path: str, model: type[BaseModel], call: PlainCall, router: ASGIApp) -> None:
        super().__init__(path, "POST", router)
        self.model = model
        self.call = call

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] != "POST":  # only a partial match: FastAPI's route answers (405)
            await self.decline(scope, receive, send)
            return
        request = Request(scope, receive)
        try:
            body = await request.body()
        except ClientDisconnect:  # gone before its body arrived: there is no one to answer
            return
        parsed = parse_plain(self.model, request.headers.get("content-type"), body)
        if parsed is None:
            await self.decline(scope, replay(body, receive), send)
            return
        self.served += 1
        await authorise(request, request.headers.get(TOKEN_HEADER))
        ctx: ApiContext = request.app.state.cairn
        response = await self.call(ctx, parsed, await caller(request))
        await response(scope, receive, send)


def parse_plain(model: type[Body], content_type: str | None, body: bytes) -> Body | None:
    """The body of a plain request as `model`, or None when FastAPI should answer (another content type,
    bad JSON, a refused field: its error bodies stay the only ones)."""
    if (
        not body
        or content_type is None
        or content_type.partition(";")[0].strip().lower() != "application/json"
    ):
        return None
    try:
        return model.model_validate(json.loads(body))
    except Exception:  # bad JSON, a refused field, JSON nested past Python's stack (RecursionError)
        return None


def replay(body: bytes, receive: Receive) -> Receive:
    """A `receive` that gives FastAPI's route the body already read, then whatever the client's
    connection says next (a hang-up, while the response is sent: the hand-out checks for one)."""
    pending: list[Message] = [{"type": "http.request", "body": body, "more_body": False}]

    async def replayed() -> Message:
        return pending.pop() if pending else await receive()

    return replayed


POLL_PATH = "/api/tasks/poll/batch/{task_type}"
PLAIN_NUMBER = re.compile(r"0|[1-9][0-9]{0,8}")
"""A decimal FastAPI reads as the same int (no sign, no leading zero, no spaces, not huge)."""


class PlainPollRoute(FastRoute):
    """`GET /api/tasks/poll/batch/{task_type}` served directly when its query is plain (module
    docstring): the same endpoint function, called with the values FastAPI would have passed."""

    def __init__(self, router: ASGIApp) -> None:
        super().__init__(POLL_PATH, "GET", router)

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        query = plain_poll_query(scope["query_string"]) if scope["method"] == "GET" else None
        if query is None:  # HEAD, or a query FastAPI's route should answer
            await self.decline(scope, receive, send)
            return
        self.served += 1
        request = Request(scope, receive)
        await authorise(request, request.headers.get(TOKEN_HEADER))
        response = await batch_poll(
            request.app.state.cairn,
            request,
            scope["path_params"]["task_type"],
            workerid=query.get("workerid"),
            count=int(query.get("count", "1")),
            timeout=int(query.get("timeout", "100")),
        )
        await response(scope, receive, send)


def plain_poll_query(query_string: bytes) -> dict[str, str] | None:
    """A batch poll's query parameters when FastAPI would read them as they stand (only `count`,
    `timeout` and `workerid`, each once; the numbers plain decimals within the route's bounds);
    None when FastAPI's route should answer."""
    params = parse_qsl(query_string.decode("latin-1"), keep_blank_values=True)
    query = dict(params)
    if len(query) != len(params) or not query.keys() <= {"count", "timeout", "workerid"}:
        return None
    for name, low, high in (("count", 1, MAX_POLL_COUNT), ("timeout", 0, None)):
        value = query.get(name)
        if value is not None and (
            not PLAIN_NUMBER.fullmatch(value) or int(value) < low or (high is not None and int(value) > high)
        ):
            return None
    return query


async def _update(ctx: ApiContext, result: ConductorTaskResult, key: ApiKey | None) -> Response:
    return PlainTextResponse(await update_task(ctx, result, key))  # FastAPI's response_class


async def _start(ctx: ApiContext, request: StartWorkflowRequest, key: ApiKey | None) -> Response:
    return PlainTextResponse(await start_workflow(ctx, request))  # FastAPI's response_class


PLAIN_JSON_ROUTES: dict[str, tuple[type[BaseModel], PlainCall]] = {
    "/api/tasks/update-v2": (ConductorTaskResult, update_task_and_poll),
    "/api/tasks": (ConductorTaskResult, _update),
    "/api/workflow": (StartWorkflowRequest, _start),
}


def install_fast_routes(app: FastAPI) -> list[FastRoute]:
    """Put a PlainJsonRoute for each path of PLAIN_JSON_ROUTES, and the PlainPollRoute, first in the
    app's router, in front of the FastAPI route each serves for (which must exist: its answers are
    the fallback)."""
    installed: list[FastRoute] = [
        PlainJsonRoute(path, model, call, app.router) for path, (model, call) in PLAIN_JSON_ROUTES.items()
    ]
    installed.append(PlainPollRoute(app.router))
    served_by_fastapi = {
        (method, route.path) for route in api_routes(app.router.routes) for method in route.methods or ()
    }
    missing = sorted({(r.method, r.path) for r in installed} - served_by_fastapi)
    if missing:
        raise RuntimeError(f"no FastAPI route to fall back on for {missing}")
    app.router.routes[:0] = installed
    return installed


def api_routes(routes: Iterable[BaseRoute]) -> Iterator[APIRoute]:
    """The app's FastAPI routes, also those kept inside an included router (FastAPI 0.165)."""
    for route in routes:
        if isinstance(route, APIRoute):
            yield route
        elif isinstance(inner := getattr(route, "original_router", None), APIRouter):
            yield from api_routes(inner.routes)


def served(app: FastAPI) -> dict[str, int]:
    """How many requests each FastRoute took, by path."""
    return {route.path: route.served for route in app.router.routes if isinstance(route, FastRoute)}
