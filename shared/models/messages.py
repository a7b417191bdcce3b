"""Versioned message envelopes: one model per message kind on the bus.

Every message is JSON with a `type` discriminator and a schema version `v`. Inbound messages (to
the decider) name what they refer to — task id, timer id, task reference — so the decider can
ignore what no longer matches the workflow's state. docs/protocol.md documents each of them.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter
from pydantic.alias_generators import to_camel

from shared.models.limits import (
    JAVA_INT_MAX,
    MAX_TIME_MS,
    DefinitionName,
    Reference,
    Text,
    WorkflowId,
    truncated,
)
from shared.models.runtime import TaskStatus

SCHEMA_VERSION: Literal[1] = 1


class IdempotencyStrategy(StrEnum):
    """What a start with an idempotencyKey does when an execution already holds the key
    (Orkes Conductor's; shared/idempotency.py)."""

    FAIL = "FAIL"
    RETURN_EXISTING = "RETURN_EXISTING"
    FAIL_ON_RUNNING = "FAIL_ON_RUNNING"


class Envelope(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    v: Literal[1] = SCHEMA_VERSION
    id: str = Field(min_length=1, max_length=1000, description="Message id; the receiver's dedupe key.")

    def to_json_dict(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, mode="json", exclude_none=True)

    def to_bytes(self) -> bytes:
        return self.model_dump_json(by_alias=True, exclude_none=True).encode()


# ---- inbound: everything the decider consumes -------------------------------------------


class StartWorkflow(Envelope):
    """Start one execution. `workflowId` is chosen by the sender so a redelivery is idempotent."""

    type: Literal["start_workflow"] = "start_workflow"
    workflow_id: WorkflowId
    name: DefinitionName
    version: int | None = Field(default=None, ge=1, le=JAVA_INT_MAX)
    input: dict[str, Any] = Field(default_factory=dict)
    correlation_id: Text | None = None
    workflow_def: dict[str, Any] | None = Field(
        default=None,
        description="An inline WorkflowDef to run instead of a registered one (validated like a "
        "registration; nothing is registered).",
    )
    parent_workflow_id: WorkflowId | None = Field(
        default=None, description="Set when a SUB_WORKFLOW task starts this execution."
    )
    parent_workflow_task_id: str | None = Field(
        default=None, description="The parent's SUB_WORKFLOW task execution, told when this one ends."
    )
    idempotency_key: Text | None = Field(
        default=None,
        description="One execution per key and workflow name: the execution runs under the id derived "
        "from (name, key), and a start whose key is held is refused, or answered with the holder "
        "(idempotencyStrategy; docs/protocol.md).",
    )
    idempotency_strategy: IdempotencyStrategy | None = Field(
        default=None, description="FAIL (the default), RETURN_EXISTING or FAIL_ON_RUNNING."
    )
    kind: Literal["code"] | None = Field(
        default=None,
        description="`code`: a code-first workflow replayed by the runtime of `app` "
        "(docs/code-workflows.md); absent: a JSON workflow.",
    )
    app: Annotated[str, Field(pattern=r"^[A-Za-z0-9._-]{1,100}$")] | None = Field(
        default=None, description="The app whose runtime replays a code workflow."
    )


class TaskResult(Envelope):
    """A worker's report on one task execution (Conductor's TaskResult)."""

    type: Literal["task_result"] = "task_result"
    workflow_instance_id: WorkflowId
    task_id: Reference
    status: TaskStatus
    output_data: dict[str, Any] = Field(default_factory=dict)
    reason_for_incompletion: Annotated[str | None, truncated] = Field(
        default=None, description="Cut to its first 1,000 characters (Conductor keeps 500)."
    )
    worker_id: Text | None = None
    callback_after_seconds: int = Field(default=0, ge=0, le=JAVA_INT_MAX)
    logs: list[str] = Field(default_factory=list)


class Signal(Envelope):
    """Completes (or fails) a WAIT task by reference name; `output` becomes the task's output."""

    type: Literal["signal"] = "signal"
    workflow_id: WorkflowId
    task_ref_name: Reference
    status: TaskStatus = TaskStatus.COMPLETED
    output: dict[str, Any] = Field(default_factory=dict)


class RaiseEvent(Envelope):
    """An external event for a code workflow (Dapr's raise_workflow_event): delivered to the
    orchestrator's `wait_for_external_event(name)`, buffered until it waits for it."""

    type: Literal["raise_event"] = "raise_event"
    workflow_id: WorkflowId
    name: Annotated[str, Field(min_length=1, max_length=200)]
    input: Any = None


class TerminateWorkflow(Envelope):
    """Operator command: stop the execution, cancel what is in flight. With
    `triggerFailureWorkflow` the definition's failureWorkflow starts, as after a failure."""

    type: Literal["terminate"] = "terminate"
    workflow_id: WorkflowId
    reason: Annotated[str | None, truncated] = None
    trigger_failure_workflow: bool = False


class PauseWorkflow(Envelope):
    """Operator command: schedule nothing new until resumed; what runs finishes and is recorded."""

    type: Literal["pause"] = "pause"
    workflow_id: WorkflowId


class ResumeWorkflow(Envelope):
    """Operator command: go on from where the PAUSED execution stopped."""

    type: Literal["resume"] = "resume"
    workflow_id: WorkflowId


class RestartWorkflow(Envelope):
    """Operator command: run a finished execution again from the start, under the same id, in a
    new epoch (the earlier run's task records stay readable)."""

    type: Literal["restart"] = "restart"
    workflow_id: WorkflowId
    use_latest_definitions: bool = False
    epoch: int | None = Field(
        default=None, ge=0, le=JAVA_INT_MAX, description="The run the operator saw; another is refused."
    )


class RerunWorkflow(Envelope):
    """Operator command (Conductor's RerunWorkflowRequest): run a finished execution again from
    one of its task executions, keeping what ran before it."""

    type: Literal["rerun"] = "rerun"
    workflow_id: WorkflowId
    re_run_from_task_id: Reference | None = None
    task_input: dict[str, Any] | None = None
    workflow_input: dict[str, Any] | None = None
    correlation_id: Text | None = None
    epoch: int | None = Field(default=None, ge=0, le=JAVA_INT_MAX)


class RetryWorkflow(Envelope):
    """Operator command: run the failed (or timed-out, or cancelled) executions of a finished
    execution again, each as its next attempt, and go on."""

    type: Literal["retry"] = "retry"
    workflow_id: WorkflowId
    resume_subworkflow_tasks: bool = False
    epoch: int | None = Field(default=None, ge=0, le=JAVA_INT_MAX)


class SkipTask(Envelope):
    """Operator command: the task under this reference, not yet run or running, ends SKIPPED
    with the given output, and the workflow goes on."""

    type: Literal["skip_task"] = "skip_task"
    workflow_id: WorkflowId
    task_reference_name: Reference
    task_input: dict[str, Any] = Field(default_factory=dict)
    task_output: dict[str, Any] = Field(default_factory=dict)


class UpdateVariables(Envelope):
    """Set workflow variables of a RUNNING or PAUSED execution (an event handler's
    update_workflow_variables action); with `appendArray`, a list variable is appended to."""

    type: Literal["update_variables"] = "update_variables"
    workflow_id: WorkflowId
    variables: dict[str, Any] = Field(default_factory=dict)
    append_array: bool = False


class SubWorkflowReopened(Envelope):
    """Sent by a child execution to its parent when an operator made the finished child run
    again (retry, rerun, restart): the parent's SUB_WORKFLOW task waits for it again, and the
    parent runs again from that task."""

    type: Literal["subworkflow_reopened"] = "subworkflow_reopened"
    workflow_id: WorkflowId = Field(description="The parent workflow.")
    task_id: Reference = Field(description="The parent's SUB_WORKFLOW task execution.")
    sub_workflow_id: WorkflowId


LifecycleCommand = (
    PauseWorkflow
    | ResumeWorkflow
    | RestartWorkflow
    | RerunWorkflow
    | RetryWorkflow
    | SkipTask
    | UpdateVariables
)
"""The operations of docs/operations.md (terminate aside, which existed before them)."""


class SubWorkflowEnded(Envelope):
    """A SUB_WORKFLOW's child execution ended; sent by the child's decision to its parent."""

    type: Literal["subworkflow_ended"] = "subworkflow_ended"
    workflow_id: WorkflowId = Field(description="The parent workflow.")
    task_id: Reference = Field(description="The parent's SUB_WORKFLOW task execution.")
    sub_workflow_id: WorkflowId
    status: str = Field(max_length=40, description="The child's final WorkflowStatus.")
    output: dict[str, Any] = Field(default_factory=dict)
    reason: Annotated[str | None, truncated] = None
    kind: Literal["code"] | None = Field(
        default=None, description="`code` when the child is a code workflow (its result is `output.result`)."
    )


class TimerFired(Envelope):
    type: Literal["timer_fired"] = "timer_fired"
    workflow_id: WorkflowId
    timer_id: str = Field(min_length=1, max_length=1000)


class DecideRequest(Envelope):
    """Sent by the sweeper: re-evaluate this workflow and republish its unsent outbox."""

    type: Literal["decide_request"] = "decide_request"
    workflow_id: WorkflowId
    reason: Annotated[str, truncated] = ""
    stale_before: int | None = Field(default=None, ge=0, le=MAX_TIME_MS)
    """Epoch ms. When set, the workflow looked stuck: the decider repairs what a lost message
    would leave behind — it dispatches again a worker task still SCHEDULED since before this
    time, and treats a timer due before this time as fired."""


DeciderInbound = Annotated[
    StartWorkflow
    | TaskResult
    | Signal
    | TerminateWorkflow
    | TimerFired
    | DecideRequest
    | SubWorkflowEnded
    | PauseWorkflow
    | ResumeWorkflow
    | RestartWorkflow
    | RerunWorkflow
    | RetryWorkflow
    | SkipTask
    | UpdateVariables
    | SubWorkflowReopened
    | RaiseEvent,
    Field(discriminator="type"),
]
DECIDER_INBOUND: TypeAdapter[DeciderInbound] = TypeAdapter(DeciderInbound)


def workflow_id_of(message: DeciderInbound) -> str:
    """The workflow a decider-bound message is about: the partitioning and grouping key."""
    if isinstance(message, TaskResult):
        return message.workflow_instance_id
    return message.workflow_id


# ---- outbound: what a decision publishes (kept in the workflow document's outbox) ----------


class TaskMessage(Envelope):
    """A task execution handed to workers. `taskId` + `retryCount` is the worker's idempotency key."""

    type: Literal["task"] = "task"
    task_id: str
    task_type: str
    task_def_name: str
    reference_task_name: str
    workflow_instance_id: str
    workflow_type: str
    input_data: dict[str, Any] = Field(default_factory=dict)
    retry_count: int = 0
    poll_count: int = 0
    scheduled_time: int = 0
    response_timeout_seconds: int = 0
    correlation_id: str | None = None
    workflow_version: int | None = None
    secret_paths: list[list[str | int]] | None = Field(
        default=None,
        description="Where in inputData the definition put `${secrets.NAME}`: the system-task worker "
        "resolves secrets there and nowhere else (docs/agents.md).",
    )


class TimerRequest(Envelope):
    """Arm or cancel a durable timer. Arming an armed timer id, or cancelling twice, is harmless."""

    type: Literal["timer_request"] = "timer_request"
    action: Literal["arm", "cancel"]
    timer_id: str = Field(min_length=1, max_length=1000)
    workflow_id: WorkflowId
    fire_at: int = Field(default=0, ge=0, le=MAX_TIME_MS)


class WorkflowEvent(Envelope):
    """A lifecycle event other systems can follow: completed, failed, terminated, timed_out,
    start_rejected, and timeout_alert (the workflow ran past its timeoutSeconds under the
    ALERT_ONLY policy and goes on)."""

    type: Literal["workflow_event"] = "workflow_event"
    event: Literal["completed", "failed", "terminated", "timed_out", "start_rejected", "timeout_alert"]
    workflow_id: str
    workflow_name: str
    status: str
    output: dict[str, Any] = Field(default_factory=dict)
    reason: str | None = None


OutboxMessage = Annotated[
    TaskMessage
    | TimerRequest
    | WorkflowEvent
    | StartWorkflow
    | TerminateWorkflow
    | SubWorkflowEnded
    | DecideRequest
    | RetryWorkflow
    | SubWorkflowReopened
    | RaiseEvent,
    Field(discriminator="type"),
]
"""What a decision publishes after its commit: task dispatches, timer requests, lifecycle events,
starts (failureWorkflow, SUB_WORKFLOW, START_WORKFLOW), terminations of child executions, a
child's end reported to its parent, a retry of a failed child and a child's reopening reported to
its parent (retry with resumeSubworkflowTasks, rerun inside a child), a decide request to
itself when a decision stopped at its step budget, and a code workflow's event for another
(send_event)."""
OUTBOX_MESSAGE: TypeAdapter[OutboxMessage] = TypeAdapter(OutboxMessage)

KEYED_BY_TARGET: tuple[type[Envelope], ...] = (
    StartWorkflow,
    TerminateWorkflow,
    SubWorkflowEnded,
    DecideRequest,
    RetryWorkflow,
    SubWorkflowReopened,
    RaiseEvent,
)
"""The outbox messages that concern another workflow than the deciding one (or itself, named in
the message): each carries the workflow_id it is for, and is keyed by it so it reaches that
workflow's decider partition. Kept beside OutboxMessage so a new kind is classified where it is
added."""
WORKER_TASK: TypeAdapter[TaskMessage] = TypeAdapter(TaskMessage)
