"""A lifecycle operation as the CLI asks for it, and how each backend carries it out: as
Conductor's REST call (HttpBackend), or as the command message the api would publish
(DirectBackend, straight to Kafka)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, Literal

from shared.models.messages import (
    LifecycleCommand,
    PauseWorkflow,
    RerunWorkflow,
    RestartWorkflow,
    ResumeWorkflow,
    RetryWorkflow,
    SkipTask,
)

OperationKind = Literal["pause", "resume", "restart", "rerun", "retry", "skip"]


@dataclass(frozen=True)
class Operation:
    kind: OperationKind
    workflow_id: str
    use_latest_definitions: bool = False
    resume_subworkflow_tasks: bool = False
    task_id: str | None = None
    """rerun: the task execution to run again from (None: from the start)."""
    task_ref: str | None = None
    """skip: the task's reference name."""
    task_input: dict[str, Any] | None = None
    task_output: dict[str, Any] | None = None
    workflow_input: dict[str, Any] | None = None
    correlation_id: str | None = None

    def http_request(self) -> tuple[str, str, dict[str, Any]]:
        """(method, path, httpx keyword arguments) of Conductor's REST call."""
        base = f"/api/workflow/{self.workflow_id}"
        match self.kind:
            case "pause":
                return "PUT", f"{base}/pause", {}
            case "resume":
                return "PUT", f"{base}/resume", {}
            case "restart":
                return (
                    "POST",
                    f"{base}/restart",
                    {"params": {"useLatestDefinitions": self.use_latest_definitions}},
                )
            case "retry":
                return (
                    "POST",
                    f"{base}/retry",
                    {"params": {"resumeSubworkflowTasks": self.resume_subworkflow_tasks}},
                )
            case "rerun":
                body = {
                    "reRunFromWorkflowId": self.workflow_id,
                    "reRunFromTaskId": self.task_id,
                    "taskInput": self.task_input,
                    "workflowInput": self.workflow_input,
                    "correlationId": self.correlation_id,
                }
                return "POST", f"{base}/rerun", {"json": {k: v for k, v in body.items() if v is not None}}
            case "skip":
                body = {"taskInput": self.task_input or {}, "taskOutput": self.task_output or {}}
                return "PUT", f"{base}/skiptask/{self.task_ref}", {"json": body}

    def command(self) -> LifecycleCommand:
        """The command message the api would publish for this operation."""
        command_id = f"{self.kind}:{uuid.uuid4()}"
        match self.kind:
            case "pause":
                return PauseWorkflow(id=command_id, workflow_id=self.workflow_id)
            case "resume":
                return ResumeWorkflow(id=command_id, workflow_id=self.workflow_id)
            case "restart":
                return RestartWorkflow(
                    id=command_id,
                    workflow_id=self.workflow_id,
                    use_latest_definitions=self.use_latest_definitions,
                )
            case "retry":
                return RetryWorkflow(
                    id=command_id,
                    workflow_id=self.workflow_id,
                    resume_subworkflow_tasks=self.resume_subworkflow_tasks,
                )
            case "rerun":
                return RerunWorkflow(
                    id=command_id,
                    workflow_id=self.workflow_id,
                    re_run_from_task_id=self.task_id,
                    task_input=self.task_input,
                    workflow_input=self.workflow_input,
                    correlation_id=self.correlation_id,
                )
            case "skip":
                return SkipTask(
                    id=command_id,
                    workflow_id=self.workflow_id,
                    task_reference_name=self.task_ref or "",
                    task_input=self.task_input or {},
                    task_output=self.task_output or {},
                )
