"""Cairn's records in the JSON shapes Conductor's REST API returns (Task, Workflow, errors).

Conductor clients deserialize these shapes field by field, so names and types follow Conductor's
`Task` and `Workflow` models; fields Cairn has no concept of are present with Conductor's defaults.
"""

from __future__ import annotations

import json
import socket
from typing import Any

from shared.core.plan import plan_of
from shared.core.refs import node_ref
from shared.models.definitions import WorkflowTask
from shared.models.documents import WorkflowDocument
from shared.models.messages import TaskMessage
from shared.models.runtime import TaskState

INSTANCE = socket.gethostname()

# Workflow statuses are already Conductor's. Task statuses too, except that Conductor reports a
# task handed to a worker as IN_PROGRESS; Cairn's SCHEDULED covers "queued" only.


def task_json(task: TaskState, *, workflow: WorkflowDocument | None = None) -> dict[str, Any]:
    """One task execution as Conductor's Task JSON."""
    body = task.to_json_dict()
    body.pop("kind", None)
    body.pop("dispatchCount", None)
    body.update(
        {
            "pollCount": task.dispatch_count,
            "callbackFromWorker": True,
            "responseTimeoutSeconds": 0,
            "startDelayInSeconds": 0,
            "executed": task.status.is_terminal,
            "domain": None,
            "workflowPriority": 0,
            "rateLimitPerFrequency": 0,
            "rateLimitFrequencyInSeconds": 0,
            "subworkflowChanged": False,
            "queueWaitTime": max(task.start_time - task.scheduled_time, 0) if task.start_time else 0,
            "correlationId": workflow.state.correlation_id if workflow else None,
            "taskStatus": task.status.value,
        }
    )
    body["loopOverTask"] = task.loop_over_task
    if workflow is not None and workflow.definition is not None:
        node = node_for(workflow, task)
        if node is not None:
            body["workflowTask"] = node.model_dump(by_alias=True, mode="json", exclude_none=True)
    return body


def node_for(workflow: WorkflowDocument, task: TaskState) -> WorkflowTask | None:
    """The definition node an execution ran (a loop iteration's `x__3` is node `x`; a dynamic
    fork's branch lives in the state while its fork is open)."""
    ref = node_ref(task.reference_task_name)
    dynamic = workflow.state.dynamic_nodes.get(ref)
    if dynamic is not None:
        return dynamic.node
    if workflow.definition is None:
        return None
    place = plan_of(workflow.definition).place(ref)
    return place.node if place else None


def polled_task_json(task: TaskMessage, worker_id: str, now: int) -> dict[str, Any]:
    """A task handed to an HTTP poller: Conductor marks it IN_PROGRESS at poll time."""
    return {
        "taskType": task.task_type,
        "taskDefName": task.task_def_name,
        "status": "IN_PROGRESS",
        "inputData": task.input_data,
        "outputData": {},
        "referenceTaskName": task.reference_task_name,
        "retryCount": task.retry_count,
        "seq": 0,
        "pollCount": task.poll_count,
        "scheduledTime": task.scheduled_time,
        "startTime": now,
        "endTime": 0,
        "updateTime": now,
        "workflowInstanceId": task.workflow_instance_id,
        "workflowType": task.workflow_type,
        "taskId": task.task_id,
        "workerId": worker_id,
        "callbackAfterSeconds": 0,
        "responseTimeoutSeconds": task.response_timeout_seconds,
        "retried": False,
        "executed": False,
        "callbackFromWorker": True,
        "startDelayInSeconds": 0,
        "workflowPriority": 0,
        "iteration": 0,
        "domain": None,
    }


def workflow_json(document: WorkflowDocument, tasks: list[TaskState] | None) -> dict[str, Any]:
    """A workflow execution as Conductor's Workflow JSON; `tasks` None leaves the list empty
    (Conductor's includeTasks=false)."""
    state = document.state
    failed = [t for t in (tasks or []) if t.status.is_terminal and not t.status.is_successful]
    shown = {
        **_workflow_fields(document, tasks, failed),
        **(code_fields(document) if state.code is not None else {}),
    }
    return shown


def code_fields(document: WorkflowDocument) -> dict[str, Any]:
    """Cairn's fields for a code workflow: its kind and app, custom status, version and patches,
    and why it is STALLED (ownerApp is Conductor's)."""
    code = document.state.code
    assert code is not None
    return {
        "kind": "code",
        "ownerApp": code.app,
        "customStatus": code.custom_status,
        "codeVersion": code.version.to_json_dict() if code.version is not None else None,
        "patches": code.patches,
        "stall": code.stall.to_json_dict() if code.stall is not None else None,
    }


def _workflow_fields(
    document: WorkflowDocument, tasks: list[TaskState] | None, failed: list[TaskState]
) -> dict[str, Any]:
    state = document.state
    return {
        "workflowId": state.workflow_id,
        "workflowName": state.workflow_name,
        "workflowVersion": state.workflow_version,
        "workflowType": state.workflow_name,
        "version": state.workflow_version,
        "status": state.status.value,
        "input": state.input,
        "output": state.output,
        "variables": state.variables,
        "correlationId": state.correlation_id,
        "reasonForIncompletion": state.reason_for_incompletion,
        "createTime": state.create_time,
        "startTime": state.start_time or state.create_time,
        "updateTime": state.update_time,
        "endTime": state.end_time,
        "tasks": [task_json(task, workflow=document) for task in (tasks or [])],
        "failedReferenceTaskNames": sorted({t.reference_task_name for t in failed}),
        "failedTaskNames": sorted({t.task_def_name for t in failed}),
        "taskToDomain": {},
        "priority": 0,
        "ownerApp": None,
        "createdBy": None,
        "updatedBy": None,
        "parentWorkflowId": state.parent_workflow_id,
        "parentWorkflowTaskId": state.parent_workflow_task_id,
        "reRunFromWorkflowId": None,
        "event": None,
        "lastRetriedTime": state.last_retried_time,
        "idempotencyKey": state.idempotency_key,
        "history": [],
        "workflowDefinition": (
            document.definition.model_dump(by_alias=True, mode="json", exclude_none=True)
            if document.definition
            else None
        ),
    }


ERROR_CODES = {
    400: "INVALID_INPUT",
    401: "UNAUTHORIZED",
    403: "FORBIDDEN",
    404: "NOT_FOUND",
    405: "METHOD_NOT_ALLOWED",
    409: "CONFLICT",
    413: "PAYLOAD_TOO_LARGE",
    503: "SERVICE_UNAVAILABLE",
}


def error_json(
    status: int, message: str, validation: list[tuple[str, str]] | None = None, error: str | None = None
) -> dict[str, Any]:
    """Conductor's error body (ErrorResponse): status, code, message, instance (the host that
    answered), retryable, validationErrors; `error` adds Orkes's token reason (EXPIRED_TOKEN,
    INVALID_TOKEN), the field Conductor's clients read to renew their token."""
    body: dict[str, Any] = {
        "status": status,
        "code": ERROR_CODES.get(status, "INTERNAL_ERROR" if status >= 500 else "INVALID_INPUT"),
        "message": message,
        "instance": INSTANCE,
        "retryable": status >= 500,
        "validationErrors": [{"path": path, "message": text} for path, text in validation or []],
    }
    if error is not None:
        body["error"] = error
    return body


def workflow_summary_json(document: WorkflowDocument) -> dict[str, Any]:
    """Conductor's WorkflowSummary (search results). As in Conductor, input and output are JSON
    text here, not objects."""
    state = document.state
    return {
        "workflowType": state.workflow_name,
        "version": state.workflow_version,
        "workflowId": state.workflow_id,
        "correlationId": state.correlation_id,
        "startTime": state.start_time or state.create_time,
        "updateTime": state.update_time,
        "endTime": state.end_time,
        "status": state.status.value,
        "input": json.dumps(state.input),
        "output": json.dumps(state.output),
        "reasonForIncompletion": state.reason_for_incompletion,
        "executionTime": max(state.end_time - state.create_time, 0) if state.end_time else 0,
        "event": None,
        "failedReferenceTaskNames": "",
        "priority": 0,
        "idempotencyKey": state.idempotency_key,
    }
