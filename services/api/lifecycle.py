"""Conductor's lifecycle operations on one execution: pause, resume, restart, rerun, retry,
skip (docs/operations.md). Each is a command published to the decider, which applies it in one
fenced decision; the api answers once the decider has taken it — 200, or 409 with its reason
when it did not apply — so a client that pauses and then reads sees PAUSED, as on Conductor.

The api checks the state first (a 409 without publishing anything for what plainly does not
apply); the decider checks again, since the state may move between the read and the command.
"""

from __future__ import annotations

import ast
import json
import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Response
from fastapi.responses import PlainTextResponse
from pydantic import Field, ValidationError

from services.api.context import ApiContext, ApiError, context, is_workflow_id, refuse_past_limits
from shared import telemetry
from shared.messaging import outgoing
from shared.models.documents import WorkflowDocument
from shared.models.limits import Reference, Text, WorkflowId
from shared.models.messages import (
    LifecycleCommand,
    PauseWorkflow,
    RerunWorkflow,
    RestartWorkflow,
    ResumeWorkflow,
    RetryWorkflow,
    SkipTask,
)
from shared.models.runtime import CamelModel, OperationRecord, TaskStatus, WorkflowStatus
from shared.operations import await_document, await_operation

router = APIRouter(prefix="/api/workflow", tags=["workflow lifecycle"])
Ctx = Annotated[ApiContext, Depends(context)]
MAX_CHILD_DEPTH = 32
"""How far below the workflow a rerun looks for the task's execution (sub-workflows of
sub-workflows); Conductor's own recursion has no bound."""


class RerunWorkflowRequest(CamelModel):
    """Conductor's RerunWorkflowRequest (`reRunFromWorkflowId` is the path's id)."""

    re_run_from_workflow_id: WorkflowId | None = None
    re_run_from_task_id: Reference | None = None
    task_input: dict[str, Any] | None = None
    workflow_input: dict[str, Any] | None = None
    correlation_id: Text | None = None


class SkipTaskRequest(CamelModel):
    """Conductor's SkipTaskRequest (the *Message fields, protobuf payloads, are not supported)."""

    task_input: dict[str, Any] = Field(default_factory=dict)
    task_output: dict[str, Any] = Field(default_factory=dict)


async def load_document(ctx: ApiContext, workflow_id: str) -> WorkflowDocument:
    document = await ctx.store.load_workflow(workflow_id) if is_workflow_id(workflow_id) else None
    if document is None:
        raise ApiError(404, f"no workflow with id {workflow_id!r}")
    return document


def conflict(workflow_id: str, why: str) -> ApiError:
    return ApiError(409, f"workflow {workflow_id!r}: {why}")


async def operate(ctx: ApiContext, command: LifecycleCommand) -> OperationRecord:
    """Publish the command and wait until the decider has taken it; its record, or a 409 with
    the reason it did not apply, or a 503 when the engine does not answer in time."""
    workflow_id = command.workflow_id
    await ctx.bus.publish([outgoing(ctx.topics.workflow_command, command, workflow_id, telemetry.inject())])
    record = await await_operation(ctx.store, workflow_id, command.id, ctx.start_visible_within_s)
    if record is None:
        raise ApiError(
            503,
            f"the {command.type} of workflow {workflow_id!r} is published (it is durable) but the engine "
            f"has not applied it within {ctx.start_visible_within_s:g} s: it is catching up. Read the "
            f"workflow in a few seconds before sending it again",
            headers={"Retry-After": "2"},
        )
    if not record.applied:
        raise conflict(workflow_id, record.reason or f"{command.type} did not apply")
    return record


def _command_id(kind: str) -> str:
    return f"{kind}:{uuid.uuid4()}"


# ---- the operations, each also used by the bulk endpoints --------------------------------------


async def pause(ctx: ApiContext, workflow_id: str) -> None:
    document = await load_document(ctx, workflow_id)
    if document.state.status.is_terminal:
        raise conflict(
            workflow_id, f"it has ended ({document.state.status}); only a RUNNING workflow can be paused"
        )
    if document.state.status is WorkflowStatus.PAUSED:
        return  # Conductor: already paused is no error
    await operate(ctx, PauseWorkflow(id=_command_id("pause"), workflow_id=workflow_id))


async def resume(ctx: ApiContext, workflow_id: str) -> None:
    document = await load_document(ctx, workflow_id)
    if document.state.status is not WorkflowStatus.PAUSED:
        raise conflict(
            workflow_id, f"it is {document.state.status}, not PAUSED; only a PAUSED workflow resumes"
        )
    await operate(ctx, ResumeWorkflow(id=_command_id("resume"), workflow_id=workflow_id))


def _must_have_ended(document: WorkflowDocument, verb: str) -> None:
    status = document.state.status
    if not status.is_terminal:
        raise conflict(document.workflow_id, f"it is {status}; only a finished workflow can be {verb}")
    if document.definition is None:
        raise conflict(
            document.workflow_id,
            f"its start was refused ({document.state.reason_for_incompletion}); start it anew",
        )


async def restart(ctx: ApiContext, workflow_id: str, use_latest_definitions: bool) -> None:
    document = await load_document(ctx, workflow_id)
    _must_have_ended(document, "restarted")
    if use_latest_definitions and not await ctx.store.has_workflow_def(document.state.workflow_name):
        raise ApiError(
            404, f"no workflow definition named {document.state.workflow_name!r} is registered any more"
        )
    await operate(
        ctx,
        RestartWorkflow(
            id=_command_id("restart"),
            workflow_id=workflow_id,
            use_latest_definitions=use_latest_definitions,
            epoch=document.state.epoch,
        ),
    )


async def retry(ctx: ApiContext, workflow_id: str, resume_subworkflow_tasks: bool) -> None:
    document = await load_document(ctx, workflow_id)
    _must_have_ended(document, "retried")
    if document.state.status is WorkflowStatus.COMPLETED:
        raise conflict(workflow_id, "it COMPLETED: there is nothing to retry")
    if resume_subworkflow_tasks:
        await _children_can_be_retried(ctx, document)
    await operate(
        ctx,
        RetryWorkflow(
            id=_command_id("retry"),
            workflow_id=workflow_id,
            resume_subworkflow_tasks=resume_subworkflow_tasks,
            epoch=document.state.epoch,
        ),
    )


async def _children_can_be_retried(ctx: ApiContext, document: WorkflowDocument) -> None:
    """With resumeSubworkflowTasks a failed SUB_WORKFLOW task waits for its child's retry: a
    child that cannot be retried (gone, COMPLETED, nothing failed in it) would leave it waiting
    for good, so the retry is refused instead (409), naming the child."""
    ended = [
        t
        for t in document.state.tasks.values()
        if t.kind == "SUB_WORKFLOW"
        and t.sub_workflow_id
        and t.status.is_terminal
        and not t.status.is_successful
    ]
    for task in ended:
        child = await ctx.store.load_workflow(task.sub_workflow_id or "")
        retriable = child is not None and any(
            t.status
            in (
                TaskStatus.FAILED,
                TaskStatus.FAILED_WITH_TERMINAL_ERROR,
                TaskStatus.TIMED_OUT,
                TaskStatus.CANCELED,
            )
            for t in child.state.tasks.values()
        )
        if (
            child is None
            or not child.state.status.is_terminal
            or child.state.status is WorkflowStatus.COMPLETED
            or not retriable
        ):
            why = "is gone" if child is None else f"is {child.state.status} with nothing to retry"
            raise conflict(
                document.workflow_id,
                f"sub-workflow {task.sub_workflow_id} of task {task.reference_task_name} {why}; "
                "retry without resumeSubworkflowTasks to start a new one",
            )


async def _holder_of(ctx: ApiContext, document: WorkflowDocument, task_id: str) -> WorkflowDocument:
    """The execution, this one or one of its sub-workflows at any depth, that ran `task_id`."""
    if any(t.task_id == task_id for t in document.state.tasks.values()):
        return document
    holder_id = await ctx.store.find_task_workflow(task_id)
    if holder_id is None:
        raise ApiError(404, f"no task execution {task_id!r}")
    if holder_id == document.workflow_id:
        return document
    holder = await load_document(ctx, holder_id)
    ancestor = holder
    for _ in range(MAX_CHILD_DEPTH):
        if ancestor.state.parent_workflow_id == document.workflow_id:
            return holder
        if ancestor.state.parent_workflow_id is None:
            break
        ancestor = await load_document(ctx, ancestor.state.parent_workflow_id)
    raise ApiError(
        404,
        f"task execution {task_id!r} belongs to workflow {holder_id!r}, "
        f"not to {document.workflow_id!r} or its sub-workflows",
    )


async def rerun(ctx: ApiContext, workflow_id: str, request: RerunWorkflowRequest) -> str:
    document = await load_document(ctx, workflow_id)
    for value, where in ((request.task_input, "taskInput"), (request.workflow_input, "workflowInput")):
        if value is not None:
            refuse_past_limits(ctx, value, where)
    target = document
    if request.re_run_from_task_id is not None:
        target = await _holder_of(ctx, document, request.re_run_from_task_id)
    _must_have_ended(target, "rerun")
    if target is not document:
        _must_have_ended(document, "rerun")
    await operate(
        ctx,
        RerunWorkflow(
            id=_command_id("rerun"),
            workflow_id=target.workflow_id,
            re_run_from_task_id=request.re_run_from_task_id,
            task_input=request.task_input,
            # the new input and correlation are the rerun workflow's, not a child's
            workflow_input=request.workflow_input if target is document else None,
            correlation_id=request.correlation_id if target is document else None,
            epoch=target.state.epoch,
        ),
    )
    if target is not document:  # the child tells its parents; answer once they run again
        if not await _until_running_again(ctx, workflow_id, document.state.epoch):
            raise ApiError(
                503,
                f"the sub-workflow {target.workflow_id!r} runs again, but workflow {workflow_id!r} has not "
                f"followed within {ctx.start_visible_within_s:g} s: it is catching up",
                headers={"Retry-After": "2"},
            )
    return workflow_id


async def _until_running_again(ctx: ApiContext, workflow_id: str, epoch_before: int) -> bool:
    found = await await_document(
        ctx.store, workflow_id, lambda d: d.state.epoch > epoch_before, ctx.start_visible_within_s
    )
    return found is not None


async def skip(ctx: ApiContext, workflow_id: str, task_reference_name: str, request: SkipTaskRequest) -> None:
    document = await load_document(ctx, workflow_id)
    refuse_past_limits(ctx, request.task_input, "taskInput")
    refuse_past_limits(ctx, request.task_output, "taskOutput")
    if document.state.status is not WorkflowStatus.RUNNING:
        raise conflict(
            workflow_id, f"it is {document.state.status}; only a RUNNING workflow's tasks can be skipped"
        )
    await operate(
        ctx,
        SkipTask(
            id=_command_id("skip"),
            workflow_id=workflow_id,
            task_reference_name=task_reference_name,
            task_input=request.task_input,
            task_output=request.task_output,
        ),
    )


# ---- routes ----------------------------------------------------------------------------------


@router.put("/{workflow_id}/pause", status_code=200)
async def pause_workflow(ctx: Ctx, workflow_id: str) -> Response:
    """Schedule nothing new until resumed; tasks already running finish and are recorded."""
    await pause(ctx, workflow_id)
    return Response(status_code=200)


@router.put("/{workflow_id}/resume", status_code=200)
async def resume_workflow(ctx: Ctx, workflow_id: str) -> Response:
    """Go on from where the PAUSED workflow stopped."""
    await resume(ctx, workflow_id)
    return Response(status_code=200)


@router.post("/{workflow_id}/restart", status_code=204)
async def restart_workflow(ctx: Ctx, workflow_id: str, useLatestDefinitions: bool = False) -> Response:
    """Run a finished workflow again from the start, under the same id (204, as Conductor)."""
    await restart(ctx, workflow_id, useLatestDefinitions)
    return Response(status_code=204)


@router.post("/{workflow_id}/rerun", response_class=PlainTextResponse)
async def rerun_workflow(ctx: Ctx, workflow_id: str, request: Annotated[RerunWorkflowRequest, Body()]) -> str:
    """Run a finished workflow again from one task execution (of it or of a sub-workflow),
    keeping what ran before; returns the workflow's id."""
    return await rerun(ctx, workflow_id, request)


@router.post("/{workflow_id}/retry", status_code=204)
async def retry_workflow(ctx: Ctx, workflow_id: str, resumeSubworkflowTasks: bool = False) -> Response:
    """Run the failed tasks of a finished workflow again, in place, and go on (204, as Conductor)."""
    await retry(ctx, workflow_id, resumeSubworkflowTasks)
    return Response(status_code=204)


MAX_QUERY_REQUEST = 64 * 1024


def skip_request_from_query(text: str) -> SkipTaskRequest:
    """The SkipTaskRequest conductor-python sends as the query parameter `skipTaskRequest`: its
    client puts the request's dict there as Python writes it (`{'taskOutput': {'ok': True}}`),
    since Conductor's server binds the request without @RequestBody. JSON is taken too."""
    if len(text) > MAX_QUERY_REQUEST:
        raise ApiError(
            400, f"skipTaskRequest: longer than {MAX_QUERY_REQUEST} characters; send it as the body"
        )
    try:
        value = json.loads(text)
    except ValueError:
        try:
            value = ast.literal_eval(text)  # literals only: no names, calls or attributes
        except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
            raise ApiError(
                400,
                "skipTaskRequest: neither JSON nor a literal SkipTaskRequest",
                [("skipTaskRequest", "unreadable")],
            ) from None
    if not isinstance(value, dict):
        raise ApiError(400, "skipTaskRequest: must be an object with taskInput and taskOutput")
    try:
        return SkipTaskRequest.model_validate(value)
    except ValidationError as error:
        raise ApiError(400, f"skipTaskRequest: {error.errors()[0]['msg']}") from None


@router.put("/{workflow_id}/skiptask/{task_reference_name}", status_code=200)
async def skip_task(
    ctx: Ctx,
    workflow_id: str,
    task_reference_name: str,
    request: Annotated[SkipTaskRequest | None, Body()] = None,
    skipTaskRequest: str | None = None,
) -> Response:
    """End a task not yet run, or running, as SKIPPED with the given output (the body, or the
    query parameter `skipTaskRequest` as conductor-python sends it)."""
    empty = request is None or not (request.task_input or request.task_output)
    if empty and skipTaskRequest is not None:  # conductor-python sends the body `{}` beside it
        request = skip_request_from_query(skipTaskRequest)
    await skip(ctx, workflow_id, task_reference_name, request or SkipTaskRequest())
    return Response(status_code=200)
