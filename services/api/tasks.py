"""Conductor's task API: polling (HTTP workers), results, completing WAIT tasks, reading a task."""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Query, Request, Response
from fastapi.responses import PlainTextResponse
from pydantic import Field, field_validator

from services.api.auth import Caller, ensure_may_work_on
from services.api.code_workflows import raise_signal_as_event
from services.api.conductor import task_json
from services.api.context import ApiContext, ApiError, context, is_workflow_id, refuse_past_limits
from services.api.handout import HandOut, HandOutResponse, hung_up
from services.api.views import load_executions
from shared import telemetry
from shared.auth.keys import ApiKey
from shared.core.refs import node_ref
from shared.core.tasktypes import REGISTRY
from shared.messaging import outgoing
from shared.models.definitions import TASK_NAME_PATTERN
from shared.models.limits import (
    JAVA_INT_MAX,
    Reference,
    Text,
    WorkflowId,
    describe,
    payload_problems,
    truncated,
)
from shared.models.messages import Signal, TaskResult
from shared.models.runtime import CamelModel, TaskStatus
from shared.ports.store import ExecutionHead

log = logging.getLogger(__name__)
router = APIRouter(prefix="/api/tasks", tags=["tasks"])
Ctx = Annotated[ApiContext, Depends(context)]

REPORTABLE = (
    TaskStatus.IN_PROGRESS,
    TaskStatus.COMPLETED,
    TaskStatus.FAILED,
    TaskStatus.FAILED_WITH_TERMINAL_ERROR,
)
MAX_POLL_TIMEOUT_MS = 30_000
MAX_POLL_COUNT = 1000


class ConductorTaskResult(CamelModel):
    """Conductor's TaskResult as clients send it (logs are objects there; Cairn keeps the text)."""

    workflow_instance_id: WorkflowId
    task_id: Reference
    status: TaskStatus
    output_data: dict[str, Any] = Field(default_factory=dict)
    reason_for_incompletion: Annotated[str | None, truncated] = None
    worker_id: Text | None = None
    callback_after_seconds: int = Field(default=0, ge=0, le=JAVA_INT_MAX)
    logs: list[Any] = Field(default_factory=list, max_length=1000)

    @field_validator("status")
    @classmethod
    def _reportable(cls, status: TaskStatus) -> TaskStatus:
        if status not in REPORTABLE:
            raise ValueError(f"a worker reports one of {', '.join(s.value for s in REPORTABLE)}")
        return status

    def log_lines(self) -> list[str]:
        return [
            entry.get("log", str(entry)) if isinstance(entry, dict) else str(entry) for entry in self.logs
        ]


@router.get("/poll/batch/{task_type}", response_model=list[dict[str, Any]])
async def batch_poll(
    ctx: Ctx,
    request: Request,
    task_type: str,
    workerid: str | None = None,
    domain: str | None = None,
    count: Annotated[int, Query(ge=1, le=MAX_POLL_COUNT)] = 1,
    timeout: Annotated[int, Query(ge=0, description="Long-poll wait in milliseconds.")] = 100,  # noqa: ASYNC109
) -> Response:
    """Up to `count` tasks, waiting up to `timeout` ms for the first; an empty list when none."""
    _no_domains(domain)
    _check_task_type(task_type)
    hand_out = await _poll(
        ctx,
        task_type,
        workerid or "http-worker",
        count,
        min(timeout, MAX_POLL_TIMEOUT_MS) / 1000,
        gone=lambda: hung_up(request.receive),
    )
    return HandOutResponse(hand_out.tasks, hand_out)


@router.get("/poll/{task_type}", response_model=None)
async def poll(ctx: Ctx, task_type: str, workerid: str | None = None, domain: str | None = None) -> Response:
    """One task, or 204 No Content when none is waiting (Conductor's single poll does not wait)."""
    _no_domains(domain)
    _check_task_type(task_type)
    return _one(await _poll(ctx, task_type, workerid or "http-worker", 1, 0.1))


async def _poll(
    ctx: ApiContext,
    task_type: str,
    worker_id: str,
    count: int,
    timeout_s: float,
    gone: Callable[[], Awaitable[bool]] | None = None,
) -> HandOut:
    return await ctx.dispatcher.poll(task_type, worker_id, count, timeout_s, gone=gone)


def _one(hand_out: HandOut) -> Response:
    """A single poll's answer: the task (its hand-out confirmed once sent), or 204."""
    return HandOutResponse(hand_out.tasks[0], hand_out) if hand_out.tasks else Response(status_code=204)


TASK_TYPE = re.compile(TASK_NAME_PATTERN)


def _check_task_type(task_type: str) -> None:
    """Task types become topic names (`tasks.<type>`), so they are held to Kafka's alphabet."""
    if not TASK_TYPE.match(task_type):
        raise ApiError(
            400,
            f"taskType: {task_type!r} is not a valid task type (letters, digits, '.', '_', '-'; at most 200)",
            [("taskType", "letters, digits, '.', '_' and '-' only")],
        )


def _no_domains(domain: str | None) -> None:
    if domain:
        raise ApiError(
            400,
            f"domain: task domains are not supported by Cairn (got {domain!r}); poll without it",
            [("domain", "not supported")],
        )


@router.post("", response_class=PlainTextResponse)
async def update_task(ctx: Ctx, result: ConductorTaskResult, caller: Caller) -> str:
    """Report a task execution's outcome. 404: no such execution. 409: the execution is no longer
    current (finished, timed out, retried, or its workflow ended) — the report is dropped and the
    workflow is unchanged."""
    await _apply_result(ctx, result, caller)
    return result.task_id


@router.post("/update-v2", response_model=None)
async def update_task_and_poll(ctx: Ctx, result: ConductorTaskResult, caller: Caller) -> Response:
    """Conductor's update-v2: report a result (same answers as `POST /api/tasks`) and receive the
    next task of the same type at once (204 when none is waiting, or when the task is still in
    progress), saving a worker one poll per task."""
    task = await _apply_result(ctx, result, caller)
    if result.status is TaskStatus.IN_PROGRESS:
        return Response(status_code=204)
    return _one(await _poll(ctx, task.task_type, result.worker_id or "http-worker", 1, 0.0))


async def _apply_result(ctx: ApiContext, result: ConductorTaskResult, caller: ApiKey | None) -> ExecutionHead:
    """Check the result is for a current execution (of a task type the caller's key may work on)
    and publish it; the execution it is for. Reads only the workflow's heads: a worker's report
    must not cost a parse of a document holding a thousand executions."""
    heads = (await ctx.store.load_heads([result.workflow_instance_id])).get(result.workflow_instance_id)
    if heads is None:
        raise ApiError(404, f"no workflow with id {result.workflow_instance_id!r}")
    current = heads.by_task_id(result.task_id)
    if current is None:
        if await ctx.store.get_task(result.task_id) is None:
            raise ApiError(404, f"no task {result.task_id!r} in workflow {result.workflow_instance_id!r}")
        raise ApiError(409, f"task {result.task_id!r} is no longer current (it was retried or replaced)")
    ensure_may_work_on(caller, current.task_type)
    if current.status.is_terminal:
        raise ApiError(409, f"task {result.task_id!r} already finished ({current.status.value})")
    if heads.status.is_terminal:
        raise ApiError(409, f"workflow {heads.workflow_id!r} already finished ({heads.status.value})")
    status, output, reason = result.status, result.output_data, result.reason_for_incompletion
    problems = payload_problems(output, "outputData", ctx.payload_limits) + payload_problems(
        result.log_lines(), "logs", ctx.payload_limits
    )
    if problems:  # as Conductor: a result past the limits fails its task for good, and is 200
        log.warning("task %s: result refused: %s", result.task_id, describe(problems))
        status, output = TaskStatus.FAILED_WITH_TERMINAL_ERROR, {}
        reason = f"the worker's result was refused: {describe(problems)}"
    message = TaskResult(
        id=f"result:{result.task_id}:{uuid.uuid4()}",
        workflow_instance_id=result.workflow_instance_id,
        task_id=result.task_id,
        status=status,
        output_data=output,
        reason_for_incompletion=reason,
        worker_id=result.worker_id,
        callback_after_seconds=result.callback_after_seconds,
        logs=result.log_lines() if not problems else [],
    )
    await ctx.dispatcher.started.publish_with(
        result.task_id,
        [outgoing(ctx.topics.task_result, message, result.workflow_instance_id, telemetry.inject())],
    )
    return current


@router.post("/{workflow_id}/{task_ref_name}/{status}", response_class=PlainTextResponse)
async def update_task_by_ref(
    ctx: Ctx,
    workflow_id: str,
    task_ref_name: str,
    status: TaskStatus,
    body: Annotated[dict[str, Any] | None, Body()] = None,
    workerid: Annotated[str | None, Query(max_length=1000)] = None,
) -> str:
    """Complete (or fail) the pending task at `task_ref_name` — how a WAIT/HUMAN task is finished."""
    refuse_past_limits(ctx, body or {}, "(body)")
    document = await ctx.store.load_workflow(workflow_id) if is_workflow_id(workflow_id) else None
    if document is None:
        raise ApiError(404, f"no workflow with id {workflow_id!r}")
    if document.state.code is not None:  # a code workflow takes it as an external event of that name
        return await raise_signal_as_event(ctx, document, task_ref_name, status, body)
    task = document.state.tasks.get(node_ref(task_ref_name))
    if task is not None and task_ref_name != task.reference_task_name and "__" in task_ref_name:
        task = None  # another iteration of a loop body task
    if task is None:
        raise ApiError(404, f"workflow {workflow_id!r} has no task {task_ref_name!r} scheduled")
    if task.status.is_terminal or document.state.status.is_terminal:
        raise ApiError(
            409, f"task {task_ref_name!r} of workflow {workflow_id!r} is already {task.status.value}"
        )
    if status not in (TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.FAILED_WITH_TERMINAL_ERROR):
        raise ApiError(
            400,
            f"status: use COMPLETED, FAILED or FAILED_WITH_TERMINAL_ERROR, not {status.value}",
            [("status", "not a final status")],
        )
    if REGISTRY.get(task.kind).accepts_signals:
        signal = Signal(
            id=f"signal:{uuid.uuid4()}",
            workflow_id=workflow_id,
            task_ref_name=task_ref_name,
            status=status,
            output=body or {},
        )
        await ctx.bus.publish([outgoing(ctx.topics.workflow_signal, signal, workflow_id, telemetry.inject())])
        return task.task_id
    # A worker's task completed by hand: the same as the worker reporting it.
    result = TaskResult(
        id=f"result:{task.task_id}:{uuid.uuid4()}",
        workflow_instance_id=workflow_id,
        task_id=task.task_id,
        status=status,
        output_data=body or {},
        worker_id=workerid,
    )
    await ctx.dispatcher.started.publish_with(
        task.task_id, [outgoing(ctx.topics.task_result, result, workflow_id, telemetry.inject())]
    )
    return task.task_id


@router.get("/{task_id}")
async def get_task(ctx: Ctx, task_id: str) -> dict[str, Any]:
    workflow_id = await ctx.store.find_task_workflow(task_id)
    document = await ctx.store.load_workflow(workflow_id) if workflow_id else None
    if document is None:
        raise ApiError(404, f"no task with id {task_id!r}")
    for task in await load_executions(ctx.store, document):
        if task.task_id == task_id:
            return task_json(task, workflow=document)
    earlier = await ctx.store.get_task(task_id)  # of an earlier run (before a restart or rerun)
    if earlier is not None and earlier.workflow_version <= document.version:
        return task_json(earlier, workflow=document)
    raise ApiError(404, f"no task with id {task_id!r}")
