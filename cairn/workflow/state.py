"""WorkflowState and WorkflowStatus: an instance as Dapr's client shows it, read from Cairn's
Conductor-shaped execution JSON."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from enum import Enum
from typing import Any

from cairn.workflow._serialization import to_text
from cairn.workflow._tasks import FailureDetails


class WorkflowStatus(Enum):
    UNKNOWN = 0
    RUNNING = 1
    COMPLETED = 2
    FAILED = 3
    TERMINATED = 4
    PENDING = 5
    SUSPENDED = 6
    STALLED = 7


FROM_CAIRN = {
    "RUNNING": WorkflowStatus.RUNNING,
    "COMPLETED": WorkflowStatus.COMPLETED,
    "FAILED": WorkflowStatus.FAILED,
    "TIMED_OUT": WorkflowStatus.FAILED,
    "TERMINATED": WorkflowStatus.TERMINATED,
    "PAUSED": WorkflowStatus.SUSPENDED,
    "STALLED": WorkflowStatus.STALLED,
}
TERMINAL = frozenset({WorkflowStatus.COMPLETED, WorkflowStatus.FAILED, WorkflowStatus.TERMINATED})


class WorkflowFailedError(Exception):
    def __init__(self, message: str, details: FailureDetails) -> None:
        super().__init__(message)
        self.details = details


def _time(ms: int | None) -> datetime:
    return datetime(1970, 1, 1) + timedelta(milliseconds=ms or 0)


class WorkflowState:
    """One instance: status, times, and its payloads as JSON text (`serialized_*`)."""

    def __init__(self, workflow: dict[str, Any], *, fetch_payloads: bool = True) -> None:
        output = workflow.get("output") or {}
        self.instance_id: str = workflow["workflowId"]
        self.name: str = workflow.get("workflowName") or workflow.get("workflowType") or ""
        self.runtime_status = FROM_CAIRN.get(workflow.get("status", ""), WorkflowStatus.UNKNOWN)
        self.created_at = _time(workflow.get("createTime"))
        self.last_updated_at = _time(workflow.get("updateTime") or workflow.get("createTime"))
        self.serialized_input: str | None = None
        self.serialized_output: str | None = None
        self.serialized_custom_status: str | None = None
        if fetch_payloads:
            self.serialized_input = to_text((workflow.get("input") or {}).get("input"))
            result = output.get("result")
            if self.runtime_status is WorkflowStatus.TERMINATED:  # the raw output it was given
                self.serialized_output = result if isinstance(result, str) else to_text(result)
            else:
                self.serialized_output = to_text(result)
            custom = workflow.get("customStatus")
            self.serialized_custom_status = (
                custom if isinstance(custom, str) or custom is None else json.dumps(custom)
            )
        failure = output.get("failureDetails")
        self.failure_details: FailureDetails | None = None
        if isinstance(failure, dict) and (failure.get("message") or failure.get("errorType")):
            self.failure_details = FailureDetails(
                failure.get("message", ""), failure.get("errorType", ""), failure.get("stackTrace")
            )
        stall = workflow.get("stall")
        self.stall_reason: str | None = stall.get("reason") if isinstance(stall, dict) else None
        """Cairn: why a STALLED instance is stalled (PATCH_MISMATCH, VERSION_NOT_AVAILABLE, ...)."""
        self.stall_description: str | None = stall.get("description") if isinstance(stall, dict) else None

    def raise_if_failed(self) -> None:
        if self.failure_details is not None:
            raise WorkflowFailedError(
                f"Orchestration '{self.instance_id}' failed: {self.failure_details.message}",
                self.failure_details,
            )

    def to_json(self) -> dict[str, Any]:
        cairn_name = {WorkflowStatus.SUSPENDED: "SUSPENDED"}.get(
            self.runtime_status, self.runtime_status.name
        )
        details = self.failure_details
        return {
            "instance_id": self.instance_id,
            "name": self.name,
            "runtime_status": cairn_name,
            "created_at": self.created_at,
            "last_updated_at": self.last_updated_at,
            "serialized_input": self.serialized_input,
            "serialized_output": self.serialized_output,
            "serialized_custom_status": self.serialized_custom_status,
            "failure_details": {
                "message": details.message,
                "error_type": details.error_type,
                "stack_trace": details.stack_trace,
            }
            if details is not None
            else None,
        }

    def __str__(self) -> str:
        return json.dumps(self.to_json(), indent=4, sort_keys=True, default=str)
