"""`GET /api/tasks/search`: task executions that ended, by Conductor's query language over task
fields (shared/search.TASK_FIELDS), as a SearchResult of Conductor's TaskSummary. Live
executions are in their workflows (`GET /api/workflow/{id}`); task records are written when an
execution ends, and searched without an index (a scan: an operator's call)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query

from services.api.context import ApiContext, context
from services.api.search_params import parsed_search
from shared.models.runtime import TaskState
from shared.search import (
    TASK_FIELDS,
    SearchRequest,
    free_text_of,
)

router = APIRouter(prefix="/api/tasks", tags=["tasks"])
Ctx = Annotated[ApiContext, Depends(context)]


def _iso(ms: int) -> str:
    """Conductor's TaskSummary times: `yyyy-MM-dd'T'HH:mm:ss.SSS'Z'`, epoch 0 included."""
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def task_summary_json(task: TaskState) -> dict[str, Any]:
    return {
        "workflowId": task.workflow_instance_id,
        "workflowType": task.workflow_type,
        "correlationId": None,
        "scheduledTime": _iso(task.scheduled_time),
        "startTime": _iso(task.start_time),
        "updateTime": _iso(task.update_time),
        "endTime": _iso(task.end_time),
        "status": task.status.value,
        "reasonForIncompletion": task.reason_for_incompletion,
        "executionTime": max(task.end_time - task.start_time, 0) if task.end_time else 0,
        "queueWaitTime": max(task.start_time - task.scheduled_time, 0) if task.start_time else 0,
        "taskDefName": task.task_def_name,
        "taskType": task.task_type,
        "taskId": task.task_id,
        "referenceTaskName": task.reference_task_name,
        "input": json.dumps(task.input_data),
        "output": json.dumps(task.output_data),
        "workflowPriority": 0,
        "domain": None,
    }


@router.get("/search")
async def search_tasks(
    ctx: Ctx,
    start: Annotated[int, Query(ge=0, le=100_000)] = 0,
    size: Annotated[int, Query(ge=0)] = 100,
    sort: str | None = None,
    freeText: str | None = None,
    query: str | None = None,
) -> dict[str, Any]:
    parsed, order = parsed_search(query, sort, size, "tasks", TASK_FIELDS)
    total, tasks = await ctx.store.search_tasks(
        SearchRequest(parsed, free_text_of(freeText), order, start, size)
    )
    return {"totalHits": total, "results": [task_summary_json(task) for task in tasks]}
