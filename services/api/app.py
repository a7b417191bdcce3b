"""The FastAPI application: Conductor's REST paths for what Cairn implements, OpenAPI at /docs."""

from __future__ import annotations

from typing import Any

from fastapi import Depends, FastAPI

from services.api import (
    bulk,
    code_workflows,
    deadletters,
    events,
    execute,
    executions,
    lifecycle,
    metadata,
    task_search,
    tasks,
)
from services.api.auth import authorise, token_router
from services.api.body_limit import BodyLimit
from services.api.context import ApiContext
from services.api.errors import install_error_handlers
from services.api.fast_routes import install_fast_routes
from shared import telemetry


def create_app(ctx: ApiContext, max_request_bytes: int = 8 * 1024 * 1024) -> FastAPI:
    exporting = telemetry.exporting()
    app = FastAPI(
        title="Cairn",
        summary="Durable workflows. Conductor-compatible REST API.",
        version="0.1.0",
        # One guard for every route, so none can be added unguarded (services/api/auth.py).
        dependencies=[Depends(authorise)],
        # FastAPI's own OpenTelemetry (server spans, request metrics) only where Cairn exports:
        # otherwise its per-request check of the global providers alone cost 2.6% of `cairn
        # dev`'s CPU (benchmarks/README.md, issue 16's twelfth part).
        telemetry={"tracing": exporting, "metrics": exporting, "logs": exporting},
    )
    app.state.cairn = ctx
    # The hot routes first: a request is matched against the routes in order, at several µs a
    # route (benchmarks/README.md, issue 16's seventh part). Every step is a worker's request to
    # /api/tasks (no other router's paths start so), every workflow a start: POST /api/workflow.
    # Ahead of lifecycle's routes, GET /api/workflow/running/history lists the running "history"
    # workflows (as Conductor, whose literal segments win) instead of a workflow id "running".
    app.include_router(task_search.router)  # before /api/tasks/{task_id}: "search" is no id
    app.include_router(tasks.router)
    app.include_router(executions.router)
    app.include_router(token_router)
    app.include_router(metadata.router)
    app.include_router(execute.router)
    app.include_router(bulk.router)  # before /api/workflow/{workflow_id}/...: "bulk" is no id
    app.include_router(lifecycle.router)
    app.include_router(code_workflows.router)
    app.include_router(deadletters.router)
    app.include_router(events.router)
    install_fast_routes(app)  # every step's and every start's request, ahead of FastAPI
    install_error_handlers(app)
    app.add_middleware(BodyLimit, max_bytes=max_request_bytes)

    @app.get("/health", tags=["health"])
    async def health() -> dict[str, Any]:
        """Liveness plus a store round trip (a failing store answers 500)."""
        await ctx.store.list_workflow_defs()
        return {"healthy": True}

    return app
