"""Runtime state: the task execution record and the workflow state the decision core works on.

Wire/JSON names follow Conductor's Task and Workflow JSON (camelCase) so clients written for
Conductor can read them. Times are epoch milliseconds, as in Conductor.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_serializer
from pydantic.alias_generators import to_camel

from shared.models.definitions import TaskDef, WorkflowTask
from shared.models.history import PatchVersion, Stall


class CamelModel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    def to_json_dict(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, mode="json")


class TaskStatus(StrEnum):
    """Conductor's task state machine. The three flags drive every decision about a task."""

    SCHEDULED = "SCHEDULED"
    IN_PROGRESS = "IN_PROGRESS"
    COMPLETED = "COMPLETED"
    COMPLETED_WITH_ERRORS = "COMPLETED_WITH_ERRORS"
    FAILED = "FAILED"
    FAILED_WITH_TERMINAL_ERROR = "FAILED_WITH_TERMINAL_ERROR"
    TIMED_OUT = "TIMED_OUT"
    CANCELED = "CANCELED"
    SKIPPED = "SKIPPED"

    @property
    def is_terminal(self) -> bool:
        return self not in (TaskStatus.SCHEDULED, TaskStatus.IN_PROGRESS)

    @property
    def is_successful(self) -> bool:
        return self in (TaskStatus.COMPLETED, TaskStatus.COMPLETED_WITH_ERRORS, TaskStatus.SKIPPED)

    @property
    def is_retriable(self) -> bool:
        return self in (TaskStatus.FAILED, TaskStatus.TIMED_OUT)


class WorkflowStatus(StrEnum):
    RUNNING = "RUNNING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    TIMED_OUT = "TIMED_OUT"
    TERMINATED = "TERMINATED"
    PAUSED = "PAUSED"
    STALLED = "STALLED"
    """A code workflow whose history the runtime's code cannot replay (Dapr's STALLED): kept, not
    failed; it goes on once a runtime with the right code takes its next turn."""

    @property
    def is_terminal(self) -> bool:
        return self not in (WorkflowStatus.RUNNING, WorkflowStatus.PAUSED, WorkflowStatus.STALLED)

    @property
    def is_successful(self) -> bool:
        return self is WorkflowStatus.COMPLETED


class TaskState(CamelModel):
    """One task execution. A retry is a new TaskState with a new id linked to the one it retries."""

    task_id: str
    task_type: str
    """Conductor's taskType: the task name for SIMPLE tasks (what workers subscribe to), else the type."""
    kind: str
    """The workflow task's type (SIMPLE, WAIT, ...): selects the task type module."""
    task_def_name: str
    reference_task_name: str
    workflow_instance_id: str
    workflow_type: str
    status: TaskStatus
    input_data: dict[str, Any] = Field(default_factory=dict)
    output_data: dict[str, Any] = Field(default_factory=dict)
    reason_for_incompletion: str | None = None
    retry_count: int = 0
    retried_task_id: str | None = None
    retried: bool = False
    seq: int = 0
    iteration: int = 0
    scheduled_time: int = 0
    start_time: int = 0
    end_time: int = 0
    update_time: int = 0
    worker_id: str | None = None
    callback_after_seconds: int = 0
    dispatch_count: int = 0
    first_scheduled_time: int = 0
    """When the first attempt of this task was scheduled (carried across retries, for
    totalTimeoutSeconds)."""
    timeout_alerted: bool = False
    """The execution ran past timeoutSeconds under ALERT_ONLY and the alert went out (once)."""
    sub_workflow_id: str | None = None
    """SUB_WORKFLOW: the child execution this task runs (Conductor's Task.subWorkflowId)."""
    loop_over_task: bool = False
    """The execution runs inside a DO_WHILE body (Conductor's Task.loopOverTask)."""
    secret_paths: list[list[str | int]] = Field(default_factory=list, exclude_if=lambda v: not v)
    """Where the definition put `${secrets.NAME}` in the input: the only places the system-task
    worker resolves secrets (shared/core/secret_refs.py)."""
    # The workflow document version whose commit made this record current. A record written
    # before a commit that then failed carries a version the document never reached.
    workflow_version: int = 0


class PendingTimer(CamelModel):
    """A timer the workflow armed and has neither seen fire nor cancelled."""

    timer_id: str
    purpose: str
    fire_at: int
    task_id: str | None = None


class DynamicNode(CamelModel):
    """A task node made at run time (a FORK_JOIN_DYNAMIC branch): the plan of the definition
    does not know it, so the state carries it while it can still run."""

    node: WorkflowTask
    parent: str
    """Reference name of the FORK_JOIN_DYNAMIC that made it."""
    branch: int

    @field_serializer("node")
    def _compact(self, node: WorkflowTask) -> dict[str, Any]:
        """Only what differs from Conductor's defaults: a 1,000-way fork keeps 1,000 of these."""
        return node.model_dump(by_alias=True, exclude_defaults=True, mode="json")


class PendingSkip(CamelModel):
    """An operator's skip of a task not yet run: applied when the walk reaches its node."""

    task_input: dict[str, Any] = Field(default_factory=dict)
    task_output: dict[str, Any] = Field(default_factory=dict)


class Usage(CamelModel):
    """What a run with a budget has spent so far (shared/core/budget.py): the task history is
    not in the document, so the counts are."""

    tasks: int = 0
    llm_tokens: int = 0
    cost_usd: float = 0.0


class OperationRecord(CamelModel):
    """One lifecycle command the decider took (or refused): what the api waits for to answer
    the operator, and what an operator reads to learn who paused what when."""

    id: str
    operation: str
    at: int
    applied: bool
    reason: str | None = None


class CodeState(CamelModel):
    """Where a code workflow stands (docs/code-workflows.md): its history lives in the store,
    append-only; the document holds the cursor into it and what the next turn will carry."""

    app: str
    """The runtime that replays it: its turns go to `orchestrations.<app>`."""
    history_length: int = 0
    """Events of this generation in the stored history (the next chunk starts there)."""
    chunk_starts: list[int] = Field(default_factory=list)
    """Where each stored chunk of this generation starts: the chunks are read by their ids."""
    next_action_id: int = 0
    """Every action the orchestrator took has an id below this one."""
    turns: int = 0
    """Turns dispatched in this generation (each a task execution of its own)."""
    pending: list[dict[str, Any]] = Field(default_factory=list)
    """History events that happened since the turn in flight was dispatched: the next turn's."""
    actions: dict[str, int] = Field(default_factory=dict)
    """Live task executions (activities, timers, children) by reference: their action ids."""
    custom_status: Any = None
    version: PatchVersion | None = None
    """The named version and patches the code reported in its last turn."""
    patches: list[str] = Field(default_factory=list)
    """Every patch this execution has taken, in the order first taken (the prefix check)."""
    stall: Stall | None = None
    """Why the execution is STALLED, while it is."""
    task_defs: dict[str, TaskDef | None] = Field(default_factory=dict)
    """The TaskDefs of the activities it ran, taken when each was first scheduled (None: none is
    registered): like a JSON execution's snapshot, later edits do not change a running instance."""


OPERATIONS_KEPT = 20
"""How many lifecycle commands a workflow document remembers."""


class WorkflowState(CamelModel):
    """Everything the decision core needs about one execution, besides its definition snapshot.

    `tasks` holds the current execution of each task reference only; the full history (every
    retry) lives in task records, so the document stays small however long the workflow runs.
    """

    workflow_id: str
    workflow_name: str
    workflow_version: int
    status: WorkflowStatus = WorkflowStatus.RUNNING
    input: dict[str, Any] = Field(default_factory=dict)
    output: dict[str, Any] = Field(default_factory=dict)
    variables: dict[str, Any] = Field(default_factory=dict)
    correlation_id: str | None = None
    reason_for_incompletion: str | None = None
    create_time: int = 0
    start_time: int = 0
    end_time: int = 0
    update_time: int = 0
    tasks: dict[str, TaskState] = Field(default_factory=dict)
    timers: dict[str, PendingTimer] = Field(default_factory=dict)
    next_seq: int = 1
    deadline_timers: int = 0
    """How many deadline timers this execution has armed: part of each one's id, so an id is
    never armed again after it was cancelled or fired (a reused id's firing would be taken for a
    duplicate, and a cancel and a re-arm of one id could cross)."""
    timeout_alerted: bool = False
    """The workflow passed its timeoutSeconds under ALERT_ONLY and the alert went out (once)."""
    failure_workflow_id: str | None = None
    """The failureWorkflow execution this workflow's failure started (the link, this side)."""
    epoch: int = 0
    """Bumped by restart and rerun, so a new run's execution ids never collide with the past."""
    parent_workflow_id: str | None = None
    """Set on a SUB_WORKFLOW's child: the workflow whose task started it."""
    parent_workflow_task_id: str | None = None
    """The parent's SUB_WORKFLOW task execution that this child reports its end to."""
    dynamic_nodes: dict[str, DynamicNode] = Field(default_factory=dict)
    """Nodes of open dynamic forks, by reference name (see DynamicNode)."""
    awaiting_continuation: bool = False
    """The last decision stopped at its step budget and asked itself (a decide request) to go
    on: the workflow is waiting for that decision, not stuck."""
    idempotency_key: str | None = Field(default=None, exclude_if=lambda v: v is None)
    """The key this execution holds (Orkes's idempotencyKey), if it was started with one."""
    started_by: str | None = Field(default=None, exclude_if=lambda v: v is None)
    """The id of the start message that created a keyed execution (a redelivered keyed start is
    told apart from a new one by it). The new fields of lifecycle operations are left out of the
    stored JSON while empty: every byte of the document costs on every commit."""
    last_retried_time: int = Field(default=0, exclude_if=lambda v: not v)
    """When a retry or rerun last made this execution run again (Conductor's lastRetriedTime):
    the workflow's timeoutSeconds counts from then."""
    held: list[str] = Field(default_factory=list, exclude_if=lambda v: not v)
    """Executions created while PAUSED (a retry of a failure, a redelivery a timer asked for):
    started or handed out on resume, in this order."""
    pending_skips: dict[str, PendingSkip] = Field(default_factory=dict, exclude_if=lambda v: not v)
    """Skips of tasks not yet run, by node reference."""
    superseded: list[tuple[int, int]] = Field(default_factory=list, exclude_if=lambda v: not v)
    """Ranges [first, last] of `seq` whose executions belong to earlier runs (before a restart or
    a rerun): their task records stay readable, but they are not this run's executions."""
    operations: list[OperationRecord] = Field(default_factory=list, exclude_if=lambda v: not v)
    """The last OPERATIONS_KEPT lifecycle commands, oldest first."""
    code: CodeState | None = Field(default=None, exclude_if=lambda v: v is None)
    usage: Usage | None = Field(default=None, exclude_if=lambda v: v is None)
    """Set on a run whose definition has a budget: what it spent (tasks, tokens, dollars)."""
    """Set on a code workflow (kind "code"): its place in its history."""

    def is_superseded(self, seq: int) -> bool:
        return any(first <= seq <= last for first, last in self.superseded)
