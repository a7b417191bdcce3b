"""The FastAPI application: Conductor's REST paths for what Cairn implements, OpenAPI at /docs."""

from __future__ import annotations

from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from services.api import execute, executions, metadata, tasks
from services.api.auth import authorise, token_router
from services.api.conductor import error_json
from services.api.context import ApiContext, ApiError
from shared.core.validation import format_location


def _request_problems(error: RequestValidationError) -> list[tuple[str, str]]:
    problems = []
    for item in error.errors():
        location = list(item.get("loc", ()))
        if location and location[0] == "body":
            location = location[1:]
        problems.append((format_location(location), str(item.get("msg", "invalid"))))
    return problems


def create_app(ctx: ApiContext) -> FastAPI:
    app = FastAPI(
        title="Cairn",
        summary="Durable workflows. Conductor-compatible REST API.",
        version="0.1.0",
        # One guard for every route, so none can be added unguarded (services/api/auth.py).
        dependencies=[Depends(authorise)],
    )
    app.state.cairn = ctx
    app.include_router(token_router)
    app.include_router(metadata.router)
    app.include_router(execute.router)
    app.include_router(executions.router)
    app.include_router(tasks.router)

    @app.exception_handler(ApiError)
    async def api_error(request: Request, error: ApiError) -> JSONResponse:
        return JSONResponse(
            error_json(error.status, error.message, error.problems, error.error), status_code=error.status
        )

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, error: RequestValidationError) -> JSONResponse:
        problems = _request_problems(error)
        message = "invalid request: " + "; ".join(f"{path}: {text}" for path, text in problems)
        return JSONResponse(error_json(400, message, problems), status_code=400)

    @app.get("/health", tags=["health"])
    async def health() -> dict[str, Any]:
        """Liveness plus a store round trip (a failing store answers 500)."""
        await ctx.store.list_workflow_defs()
        return {"healthy": True}

    return app
