"""Conductor's synchronous run: `POST /api/workflow/execute/{name}/{version}` starts a workflow
and answers once it is done — or blocked on a WAIT with no end, or once a task named in
`waitUntilTaskRef` finished — or after `waitForSeconds` (10 by default) with what it is then
(`signalTimeout: true`). The answer is Conductor's WorkflowRun (returnStrategy TARGET_WORKFLOW,
the only one Cairn implements). conductor-python's `ConductorWorkflow.execute` calls it."""

from __future__ import annotations

import asyncio
import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query

from services.api.conductor import task_json
from services.api.context import ApiContext, ApiError, context
from services.api.executions import StartWorkflowRequest, start_execution
from services.api.views import load_executions
from shared.models.documents import WorkflowDocument
from shared.models.limits import JAVA_INT_MAX
from shared.models.runtime import TaskState, TaskStatus

router = APIRouter(prefix="/api/workflow", tags=["workflow"])
Ctx = Annotated[ApiContext, Depends(context)]
POLL_S = 0.05


def _settled(document: WorkflowDocument, tasks: list[TaskState], refs: set[str]) -> bool:
    if document.state.status.is_terminal:
        return True
    for task in tasks:
        waiting = task.kind == "WAIT" and task.status is TaskStatus.IN_PROGRESS
        if waiting and not any(t.task_id == task.task_id for t in document.state.timers.values()):
            return True  # a WAIT with no duration blocks until someone signals it
        if task.reference_task_name in refs and task.status.is_terminal:
            return True
    return False


def _workflow_run(
    document: WorkflowDocument, tasks: list[TaskState], request_id: str, timed_out: bool
) -> dict[str, Any]:
    state = document.state
    return {
        "responseType": "TARGET_WORKFLOW",
        "targetWorkflowId": state.workflow_id,
        "targetWorkflowStatus": state.status.value,
        "requestId": request_id,
        "workflowId": state.workflow_id,
        "correlationId": state.correlation_id,
        "input": state.input,
        "output": state.output,
        "signalTimeout": timed_out,
        "priority": 0,
        "variables": state.variables,
        "tasks": [task_json(task, workflow=document) for task in tasks],
        "createdBy": None,
        "createTime": state.create_time,
        "status": state.status.value,
        "updateTime": state.update_time,
    }


@router.post("/execute/{name}/{version}")
async def execute_workflow(
    ctx: Ctx,
    name: str,
    version: Annotated[int, Path(ge=0, le=JAVA_INT_MAX)],
    request: StartWorkflowRequest,
    requestId: str | None = None,
    waitUntilTaskRef: str | None = None,
    waitForSeconds: Annotated[int, Query(ge=0, le=3600)] = 10,
    returnStrategy: str = "TARGET_WORKFLOW",
) -> dict[str, Any]:
    if returnStrategy != "TARGET_WORKFLOW":
        raise ApiError(
            400,
            f"returnStrategy: {returnStrategy!r} is not supported by Cairn yet (TARGET_WORKFLOW is)",
            [("returnStrategy", "only TARGET_WORKFLOW is supported")],
        )
    started = request.model_copy(update={"name": name, "version": version or None})
    workflow_id = await start_execution(ctx, started)
    refs = {ref.strip() for ref in (waitUntilTaskRef or "").split(",") if ref.strip()}
    loop = asyncio.get_running_loop()
    deadline = loop.time() + (waitForSeconds or 10)
    while True:
        document = await ctx.store.load_workflow(workflow_id)
        tasks = await load_executions(ctx.store, document) if document is not None else []
        if document is not None and _settled(document, tasks, refs):
            return _workflow_run(document, tasks, requestId or str(uuid.uuid4()), False)
        if loop.time() >= deadline:
            if document is None:
                raise ApiError(404, f"workflow {workflow_id!r} was started but is not visible yet")
            return _workflow_run(document, tasks, requestId or str(uuid.uuid4()), True)
        await asyncio.sleep(POLL_S)
