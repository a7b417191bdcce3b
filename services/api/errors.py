"""Every error the api answers, in Conductor's error body (ErrorResponse): routes' ApiErrors,
request validation, Starlette's own 404/405/413, models built from request data, and anything
unexpected — the last as a 500 with an error id that is also in the log, never a traceback."""

from __future__ import annotations

import logging
import uuid

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from services.api.conductor import error_json
from services.api.context import ApiError
from services.api.dispatch import TooManyTaskTypesError
from shared.core.validation import format_location

log = logging.getLogger("cairn.api")


def _problems(errors: list[dict[str, object]]) -> list[tuple[str, str]]:
    problems = []
    for item in errors:
        location = list(item.get("loc", ()))  # type: ignore[call-overload]
        if location and location[0] == "body":
            location = location[1:]
        problems.append((format_location(location), str(item.get("msg", "invalid"))))
    return problems


def _answer(
    status: int,
    message: str,
    problems: list[tuple[str, str]] | None = None,
    headers: dict[str, str] | None = None,
    error: str | None = None,
) -> JSONResponse:
    return JSONResponse(error_json(status, message, problems, error), status_code=status, headers=headers)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def api_error(request: Request, error: ApiError) -> JSONResponse:
        return _answer(error.status, error.message, error.problems, error.headers, error.error)

    @app.exception_handler(TooManyTaskTypesError)
    async def too_many_task_types(request: Request, error: TooManyTaskTypesError) -> JSONResponse:
        """The hand-out's bound on task types polled at once (CAIRN_API_MAX_POLLED_TASK_TYPES)."""
        problems = [("taskType", "too many task types polled at once")]
        return _answer(429, str(error), problems, {"Retry-After": str(error.retry_after_s)})

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, error: RequestValidationError) -> JSONResponse:
        problems = _problems(list(error.errors()))
        return _answer(400, "invalid request: " + "; ".join(f"{p}: {t}" for p, t in problems), problems)

    @app.exception_handler(ValidationError)
    async def invalid_model(request: Request, error: ValidationError) -> JSONResponse:
        """A message built from a path or query parameter that its model refuses (a reference
        with a control character): the request's fault, so a 400, not a 500."""
        problems = _problems([dict(item) for item in error.errors(include_url=False)])
        return _answer(400, "invalid request: " + "; ".join(f"{p}: {t}" for p, t in problems), problems)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, error: StarletteHTTPException) -> JSONResponse:
        """Starlette's own answers (no such path, method not allowed, a body FastAPI could not
        parse) in the same body as every other error."""
        message = str(error.detail)
        if error.status_code == 404:
            message = f"no such endpoint: {request.method} {request.url.path} (see /docs)"
        elif error.status_code == 405:
            message = f"{request.method} is not allowed on {request.url.path} (see /docs)"
        return _answer(error.status_code, message)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, error: Exception) -> JSONResponse:
        error_id = uuid.uuid4().hex[:12]
        log.error("error %s answering %s %s", error_id, request.method, request.url.path, exc_info=error)
        return _answer(
            500,
            f"internal error {error_id} (its details are in the server's log under that id); "
            "the request may be retried",
        )
