"""A code workflow's history and the actions its orchestrator asks for (durabletask's protocol).

A code-first workflow (docs/code-workflows.md) is an orchestrator function replayed by the user's
runtime. The engine keeps an append-only history per execution; each *turn* hands the runtime the
past events and the new ones, the runtime re-runs the function from the start, answers each call
already recorded from the history, and returns the actions the function asks for next. The event
and action names are durabletask's (the protocol under Dapr Workflow), so a history reads the same
as in Dapr's tools. Payloads are JSON values; times are epoch milliseconds, as everywhere in Cairn.

Pure models: the engine (shared/core/code) and the SDK (cairn/workflow) share them.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter
from pydantic.alias_generators import to_camel


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    def to_json_dict(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, mode="json", exclude_none=True)


class FailureDetails(_Model):
    """Why an activity, a child or an orchestrator failed (durabletask's TaskFailureDetails)."""

    error_type: str = Field(max_length=1000)
    message: str = Field(default="", max_length=10_000)
    stack_trace: str | None = Field(default=None, max_length=100_000)


class PatchVersion(_Model):
    """What the runtime's code reported in one turn: the named version it ran and the patches the
    function asked about and took (Dapr 1.17's OrchestrationVersion)."""

    name: str | None = Field(default=None, max_length=200)
    patches: list[str] = Field(default_factory=list)


# ---- history events -----------------------------------------------------------------------


class _Event(_Model):
    event_id: int = Field(
        default=-1, ge=-1, description="The action's sequence number, for the events that record one."
    )
    timestamp: int = Field(default=0, ge=0)


class ExecutionStarted(_Event):
    type: Literal["ExecutionStarted"] = "ExecutionStarted"
    name: str
    instance_id: str
    input: Any = None
    parent_instance_id: str | None = None
    parent_task_id: str | None = Field(default=None, description="The parent's task execution (Cairn).")


class OrchestratorStarted(_Event):
    """Opens every turn's new events; its timestamp is the orchestrator's `current_utc_datetime`
    for that turn. `version` is what the code reported in the turn (recorded when it committed)."""

    type: Literal["OrchestratorStarted"] = "OrchestratorStarted"
    version: PatchVersion | None = None


class OrchestratorCompleted(_Event):
    type: Literal["OrchestratorCompleted"] = "OrchestratorCompleted"


class TaskScheduled(_Event):
    type: Literal["TaskScheduled"] = "TaskScheduled"
    name: str
    input: Any = None


class TaskCompleted(_Event):
    type: Literal["TaskCompleted"] = "TaskCompleted"
    task_scheduled_id: int
    result: Any = None


class TaskFailed(_Event):
    type: Literal["TaskFailed"] = "TaskFailed"
    task_scheduled_id: int
    failure_details: FailureDetails


class TimerCreated(_Event):
    type: Literal["TimerCreated"] = "TimerCreated"
    fire_at: int


class TimerFired(_Event):
    type: Literal["TimerFired"] = "TimerFired"
    timer_id: int
    fire_at: int


class SubOrchestrationInstanceCreated(_Event):
    type: Literal["SubOrchestrationInstanceCreated"] = "SubOrchestrationInstanceCreated"
    name: str
    instance_id: str
    input: Any = None


class SubOrchestrationInstanceCompleted(_Event):
    type: Literal["SubOrchestrationInstanceCompleted"] = "SubOrchestrationInstanceCompleted"
    task_scheduled_id: int
    result: Any = None


class SubOrchestrationInstanceFailed(_Event):
    type: Literal["SubOrchestrationInstanceFailed"] = "SubOrchestrationInstanceFailed"
    task_scheduled_id: int
    failure_details: FailureDetails


class EventRaised(_Event):
    type: Literal["EventRaised"] = "EventRaised"
    name: str
    input: Any = None


class EventSent(_Event):
    type: Literal["EventSent"] = "EventSent"
    instance_id: str
    name: str
    input: Any = None


class ExecutionSuspended(_Event):
    type: Literal["ExecutionSuspended"] = "ExecutionSuspended"
    input: Any = None


class ExecutionResumed(_Event):
    type: Literal["ExecutionResumed"] = "ExecutionResumed"
    input: Any = None


class ExecutionTerminated(_Event):
    type: Literal["ExecutionTerminated"] = "ExecutionTerminated"
    input: Any = None


class ExecutionCompleted(_Event):
    type: Literal["ExecutionCompleted"] = "ExecutionCompleted"
    orchestration_status: Literal["COMPLETED", "FAILED", "TERMINATED", "CONTINUED_AS_NEW"]
    result: Any = None
    failure_details: FailureDetails | None = None


HistoryEvent = Annotated[
    ExecutionStarted
    | OrchestratorStarted
    | OrchestratorCompleted
    | TaskScheduled
    | TaskCompleted
    | TaskFailed
    | TimerCreated
    | TimerFired
    | SubOrchestrationInstanceCreated
    | SubOrchestrationInstanceCompleted
    | SubOrchestrationInstanceFailed
    | EventRaised
    | EventSent
    | ExecutionSuspended
    | ExecutionResumed
    | ExecutionTerminated
    | ExecutionCompleted,
    Field(discriminator="type"),
]
HISTORY_EVENT: TypeAdapter[HistoryEvent] = TypeAdapter(HistoryEvent)
HISTORY: TypeAdapter[list[HistoryEvent]] = TypeAdapter(list[HistoryEvent])


# ---- actions: what a turn asks for -------------------------------------------------------


class _Action(_Model):
    id: int = Field(ge=0, le=2**31 - 1, description="The action's sequence number in this execution.")


class ScheduleTask(_Action):
    type: Literal["ScheduleTask"] = "ScheduleTask"
    name: str = Field(pattern=r"^[A-Za-z0-9._-]{1,200}$", description="The activity: its task type.")
    input: Any = None


class CreateTimer(_Action):
    type: Literal["CreateTimer"] = "CreateTimer"
    fire_at: int = Field(ge=0)


class CreateSubOrchestration(_Action):
    type: Literal["CreateSubOrchestration"] = "CreateSubOrchestration"
    name: str = Field(min_length=1, max_length=200)
    instance_id: str | None = Field(default=None, max_length=200)
    input: Any = None
    app: str | None = Field(
        default=None, max_length=200, description="Another app's runtime (Dapr's app_id)."
    )


class SendEvent(_Action):
    type: Literal["SendEvent"] = "SendEvent"
    instance_id: str = Field(min_length=1, max_length=200)
    name: str = Field(min_length=1, max_length=200)
    input: Any = None


class CompleteOrchestration(_Action):
    type: Literal["CompleteOrchestration"] = "CompleteOrchestration"
    orchestration_status: Literal["COMPLETED", "FAILED", "CONTINUED_AS_NEW"]
    result: Any = None
    failure_details: FailureDetails | None = None
    carryover_events: list[HistoryEvent] = Field(
        default_factory=list, description="continue_as_new(save_events=True): events not yet taken."
    )


OrchestratorAction = Annotated[
    ScheduleTask | CreateTimer | CreateSubOrchestration | SendEvent | CompleteOrchestration,
    Field(discriminator="type"),
]


class Stall(_Model):
    """The runtime cannot go on with this execution on the code it has (Dapr's STALLED): the
    execution is kept, not failed, and the next turn tries again."""

    reason: Literal[
        "NONDETERMINISM",
        "PATCH_MISMATCH",
        "VERSION_NOT_AVAILABLE",
        "WORKFLOW_NOT_REGISTERED",
        "RUNTIME_ERROR",
        "INVALID_RESPONSE",
    ]
    """The runtime's four, and the engine's two: the runtime's worker failed the turn, or its
    answer could not be read."""
    description: str = Field(max_length=10_000)


class TurnResponse(_Model):
    """The runtime's answer to one turn: the output of the turn's task execution."""

    turn: int = Field(ge=0)
    actions: list[OrchestratorAction] = Field(default_factory=list)
    custom_status: Any = None
    version: PatchVersion | None = None
    stall: Stall | None = None


class WorkItem(_Model):
    """One turn, as the runtime receives it (the input of the turn's task execution)."""

    instance_id: str
    name: str
    turn: int
    generation: int = 0
    history_length: int = Field(default=0, description="How many events `pastEvents` holds.")
    stalled: bool = Field(default=False, description="The instance is STALLED: this turn tries again.")
    past_events: list[HistoryEvent] = Field(default_factory=list)
    new_events: list[HistoryEvent] = Field(default_factory=list)


# ---- where turns run ----------------------------------------------------------------------

ORCHESTRATOR = "ORCHESTRATOR"
"""The task kind of a turn: one replay of the orchestrator by its app's runtime."""
TURN_REF = "orchestrator"
"""The reference of a code workflow's turn in its executions (one turn at a time)."""
ORCHESTRATIONS = "orchestrations."
"""Turns of app A are task executions of type `orchestrations.A`, on topic `<prefix>orchestrations.A`."""


def turn_task_type(app: str) -> str:
    return f"{ORCHESTRATIONS}{app}"
