"""The Kafka contract in one table: which topic carries which message, keyed by what.

docs/protocol.md is written from it and docs/schemas/*.json are generated from it
(`python -m shared.protocol`); tests/unit/test_protocol_docs.py fails when either drifts.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel

from shared.models.messages import (
    DecideRequest,
    PauseWorkflow,
    RaiseEvent,
    RerunWorkflow,
    RestartWorkflow,
    ResumeWorkflow,
    RetryWorkflow,
    Signal,
    SkipTask,
    StartWorkflow,
    SubWorkflowEnded,
    SubWorkflowReopened,
    TaskMessage,
    TaskResult,
    TerminateWorkflow,
    TimerFired,
    TimerRequest,
    UpdateVariables,
    WorkflowEvent,
)
from shared.topics import Topics


@dataclass(frozen=True)
class Channel:
    topic: str
    key: str
    model: type[BaseModel] | None


def channels(topics: Topics | None = None) -> list[Channel]:
    t = topics or Topics()
    return [
        Channel(t.workflow_start, "workflowId", StartWorkflow),
        Channel(t.workflow_signal, "workflowId", Signal),
        Channel(t.workflow_signal, "workflowId", RaiseEvent),
        Channel(t.workflow_command, "workflowId", TerminateWorkflow),
        Channel(t.workflow_command, "workflowId", PauseWorkflow),
        Channel(t.workflow_command, "workflowId", ResumeWorkflow),
        Channel(t.workflow_command, "workflowId", RestartWorkflow),
        Channel(t.workflow_command, "workflowId", RerunWorkflow),
        Channel(t.workflow_command, "workflowId", RetryWorkflow),
        Channel(t.workflow_command, "workflowId", SkipTask),
        Channel(t.workflow_command, "workflowId", UpdateVariables),
        Channel(t.task_result, "workflowId", SubWorkflowReopened),
        Channel(t.task_result, "workflowInstanceId", TaskResult),
        Channel(t.task_result, "workflowId", SubWorkflowEnded),
        Channel(t.timer_fired, "workflowId", TimerFired),
        Channel(t.decide_request, "workflowId", DecideRequest),
        Channel(t.task_dispatch, "workflowInstanceId", TaskMessage),
        Channel(t.tasks("<taskType>"), "workflowInstanceId", TaskMessage),
        Channel(t.timer_request, "workflowId", TimerRequest),
        Channel(t.workflow_events, "workflowId", WorkflowEvent),
        Channel(t.dead_letter, "key of the original", None),
    ]


def schema_files() -> dict[str, str]:
    """File name -> JSON Schema text, for every message model on the bus."""
    files = {}
    for channel in channels():
        if channel.model is not None:
            schema = channel.model.model_json_schema(by_alias=True)
            files[f"{channel.model.__name__}.json"] = json.dumps(schema, indent=2, sort_keys=True) + "\n"
    return files


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/schemas")
    target.mkdir(parents=True, exist_ok=True)
    for name, text in schema_files().items():
        (target / name).write_text(text)
        print(f"wrote {target / name}")
