"""The api of code workflows (docs/code-workflows.md), beside Conductor's: starting one, raising
an external event, reading its history, and a runtime telling the engine it is there.

A code workflow is started with `POST /api/workflow` like any other, with Cairn's `kind: "code"`
and `app` fields; the other operations on executions (get, search, terminate, pause, resume,
remove) are Conductor's routes and work on both kinds.
"""

from __future__ import annotations

import re
import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Response
from pydantic import Field

from services.api.context import ApiContext, ApiError, context, is_workflow_id, refuse_past_limits
from shared import telemetry
from shared.core.code.engine import CODE
from shared.core.code.run import code_definition, is_code_definition
from shared.messaging import outgoing
from shared.models.documents import WorkflowDocument
from shared.models.limits import DefinitionName
from shared.models.messages import DecideRequest, RaiseEvent, StartWorkflow
from shared.models.runtime import CamelModel, TaskStatus, WorkflowStatus
from shared.operations import await_document
from shared.ports.store import Store, stitch_history

router = APIRouter(prefix="/api/workflow", tags=["code workflows"])
Ctx = Annotated[ApiContext, Depends(context)]

APP_PATTERN = r"^[A-Za-z0-9._-]{1,100}$"


async def start_code_workflow(ctx: ApiContext, start: StartWorkflow) -> str:
    """Publish the start and wait until the engine shows it. Dapr's rules: an id held by a
    running instance is refused; the id of a finished one may be scheduled again (a new run of
    it begins, as a retried child workflow does)."""
    existing = await ctx.store.load_workflow(start.workflow_id)
    if existing is not None and not existing.state.status.is_terminal:
        raise ApiError(409, f"an active workflow with ID '{start.workflow_id}' already exists")
    if existing is not None and existing.kind != CODE:
        raise ApiError(409, f"workflow {start.workflow_id!r} is a JSON workflow; choose another id")
    await ctx.bus.publish([outgoing(ctx.topics.workflow_start, start, start.workflow_id, telemetry.inject())])
    before = existing.version if existing is not None else 0
    if not await _until_moved(ctx, start.workflow_id, before):
        raise ApiError(
            503,
            f"workflow {start.workflow_id!r} was started (its start is durable) but the engine has not "
            f"shown it within {ctx.start_visible_within_s:g} s: it is catching up; read it in a few seconds",
            headers={"Retry-After": "2", "X-Cairn-Workflow-Id": start.workflow_id},
        )
    return start.workflow_id


async def _until_moved(ctx: ApiContext, workflow_id: str, version_before: int) -> bool:
    found = await await_document(
        ctx.store, workflow_id, lambda d: d.version > version_before, ctx.start_visible_within_s
    )
    return found is not None


async def _code_document(ctx: ApiContext, workflow_id: str) -> WorkflowDocument:
    document = await ctx.store.load_workflow(workflow_id) if is_workflow_id(workflow_id) else None
    if document is None:
        raise ApiError(404, f"no workflow with id {workflow_id!r}")
    if document.kind != CODE:
        raise ApiError(
            400,
            f"workflow {workflow_id!r} is a JSON workflow: it takes signals for its WAIT tasks "
            f"(POST /api/tasks/{workflow_id}/<taskRef>/COMPLETED), not events",
        )
    return document


@router.post("/{workflow_id}/events/{name}", status_code=202)
async def raise_event(
    ctx: Ctx, workflow_id: str, name: str, payload: Annotated[Any, Body()] = None
) -> Response:
    """Dapr's raise_workflow_event: the body (any JSON, or none) is the event's data. The event
    waits in the instance until the orchestrator waits for it."""
    document = await _code_document(ctx, workflow_id)
    if document.state.status.is_terminal:
        raise ApiError(409, f"workflow {workflow_id!r} already finished ({document.state.status.value})")
    if not 1 <= len(name) <= 200:
        raise ApiError(400, "name: an event name has 1 to 200 characters", [("name", "1-200 characters")])
    refuse_past_limits(ctx, {"input": payload}, "event")
    message = RaiseEvent(id=f"event:{uuid.uuid4()}", workflow_id=workflow_id, name=name, input=payload)
    await ctx.bus.publish([outgoing(ctx.topics.workflow_signal, message, workflow_id, telemetry.inject())])
    return Response(status_code=202)


async def raise_signal_as_event(
    ctx: ApiContext, document: WorkflowDocument, name: str, status: TaskStatus, body: dict[str, Any] | None
) -> str:
    """Conductor's task update by reference (`cairn signal`) on a code workflow: the external
    event `name` with the body as its data. Answers the event's id."""
    if status is not TaskStatus.COMPLETED:
        raise ApiError(400, f"status: a code workflow takes events, not {status.value}: signal COMPLETED")
    if document.state.status.is_terminal:
        raise ApiError(
            409, f"workflow {document.workflow_id!r} already finished ({document.state.status.value})"
        )
    message = RaiseEvent(id=f"event:{uuid.uuid4()}", workflow_id=document.workflow_id, name=name, input=body)
    await ctx.bus.publish(
        [outgoing(ctx.topics.workflow_signal, message, document.workflow_id, telemetry.inject())]
    )
    return message.id


@router.get("/{workflow_id}/history")
async def history(ctx: Ctx, workflow_id: str) -> dict[str, Any]:
    """The instance's history in its current generation, in durabletask's event names."""
    document = await _code_document(ctx, workflow_id)
    return await history_json(ctx.store, document)


async def history_json(store: Store, document: WorkflowDocument) -> dict[str, Any]:
    """A code workflow's current generation as exported (`cairn history export`): its events
    in order, and those that wait for the next turn (`pending`)."""
    code = document.state.code
    assert code is not None
    chunks = await store.load_history(document.workflow_id, document.state.epoch, code.chunk_starts)
    return {
        "instanceId": document.workflow_id,
        "name": document.state.workflow_name,
        "status": document.state.status.value,
        "generation": document.state.epoch,
        "events": stitch_history(chunks, code.history_length),
        "pending": code.pending,
    }


class RuntimeAnnouncement(CamelModel):
    workflows: list[DefinitionName] = Field(default_factory=list, max_length=10_000)


@router.post("/code/{app}/runtimes")
async def runtime_connected(
    ctx: Ctx, app: str, announcement: Annotated[RuntimeAnnouncement | None, Body()] = None
) -> dict[str, Any]:
    """A runtime of `app` started. The workflows it hosts are registered as code workflows of
    the app (so they can be started by name and called as a JSON workflow's SUB_WORKFLOW; a JSON
    definition of the same name is left alone), and the app's STALLED instances get another turn
    now (the code that stalled them may have been fixed). Answers what it did."""
    if not re.fullmatch(APP_PATTERN, app):
        raise ApiError(400, f"app: {app!r} is not an app name (letters, digits, '.', '_', '-')")
    registered, skipped = [], []
    for name in announcement.workflows if announcement else []:
        existing = await ctx.store.get_workflow_def(name, None)
        if existing is not None and not is_code_definition(existing):
            skipped.append(name)
            continue
        if existing is None or existing.owner_app != app:
            await ctx.store.put_workflow_def(code_definition(name, app))
        registered.append(name)
    stalled = await ctx.store.list_workflows(status=WorkflowStatus.STALLED, name=None, limit=1000)
    woken = [
        d.workflow_id
        for d in stalled
        if d.kind == CODE and d.state.code is not None and d.state.code.app == app
    ]
    await ctx.bus.publish(
        [
            outgoing(
                ctx.topics.decide_request,
                DecideRequest(
                    id=f"wake:{uuid.uuid4()}", workflow_id=workflow_id, reason="a runtime connected"
                ),
                workflow_id,
            )
            for workflow_id in woken
        ]
    )
    return {"app": app, "registered": registered, "skippedJsonNames": skipped, "woken": woken}
