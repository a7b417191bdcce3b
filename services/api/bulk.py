"""Conductor's bulk operations: one operation over a list of workflow ids, each applied on its
own, answered with a BulkResponse of the ids that succeeded and, per id that did not, why."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends

from services.api import lifecycle
from services.api.context import ApiContext, ApiError, context
from services.api.executions import terminate

router = APIRouter(prefix="/api/workflow/bulk", tags=["workflow bulk"])
Ctx = Annotated[ApiContext, Depends(context)]
MAX_BULK = 1000
"""Conductor's limit of workflows per bulk request."""
CONCURRENCY = 16
"""Operations in flight at once: each waits for its decision, so they overlap well."""

WorkflowIds = Annotated[list[str], Body(max_length=MAX_BULK)]


async def _each(ids: list[str], operation: Callable[[str], Awaitable[None]]) -> dict[str, Any]:
    """Conductor's BulkResponse: `bulkSuccessfulResults` (ids, in request order) and
    `bulkErrorResults` (id -> message)."""
    gate = asyncio.Semaphore(CONCURRENCY)
    errors: dict[str, str] = {}

    async def one(workflow_id: str) -> None:
        async with gate:
            try:
                await operation(workflow_id)
            except ApiError as error:
                errors[workflow_id] = error.message

    unique = list(dict.fromkeys(ids))
    await asyncio.gather(*(one(workflow_id) for workflow_id in unique))
    return {
        "bulkErrorResults": {
            workflow_id: errors[workflow_id] for workflow_id in unique if workflow_id in errors
        },
        "bulkSuccessfulResults": [workflow_id for workflow_id in unique if workflow_id not in errors],
    }


@router.put("/pause")
async def bulk_pause(ctx: Ctx, ids: WorkflowIds) -> dict[str, Any]:
    return await _each(ids, lambda workflow_id: lifecycle.pause(ctx, workflow_id))


@router.put("/resume")
async def bulk_resume(ctx: Ctx, ids: WorkflowIds) -> dict[str, Any]:
    return await _each(ids, lambda workflow_id: lifecycle.resume(ctx, workflow_id))


@router.post("/restart")
async def bulk_restart(ctx: Ctx, ids: WorkflowIds, useLatestDefinitions: bool = False) -> dict[str, Any]:
    return await _each(ids, lambda workflow_id: lifecycle.restart(ctx, workflow_id, useLatestDefinitions))


@router.post("/retry")
async def bulk_retry(ctx: Ctx, ids: WorkflowIds) -> dict[str, Any]:
    return await _each(ids, lambda workflow_id: lifecycle.retry(ctx, workflow_id, False))


@router.post("/terminate")
async def bulk_terminate(
    ctx: Ctx, ids: WorkflowIds, reason: str | None = None, triggerFailureWorkflow: bool = False
) -> dict[str, Any]:
    return await _each(ids, lambda workflow_id: terminate(ctx, workflow_id, reason, triggerFailureWorkflow))
