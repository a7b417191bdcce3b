"""The contract every task type module implements."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from shared.models.definitions import WorkflowTask
from shared.models.messages import OutboxMessage
from shared.models.runtime import PendingTimer, TaskState


class UnknownTaskTypeError(KeyError):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name

    def __str__(self) -> str:
        return f"task type {self.name!r} is not registered"


@dataclass
class ScheduleContext:
    """What a task type may touch while scheduling: the clock it was handed and the outbox."""

    now: int
    outbox: list[OutboxMessage] = field(default_factory=list)
    timers: list[PendingTimer] = field(default_factory=list)
    """Timers a task type asks for; the decision arms them (durably) once `schedule` returns."""


class TaskType(Protocol):
    name: str
    accepts_signals: bool
    """True when an external signal (WAIT, HUMAN) completes the task rather than a worker."""
    retriable: bool
    """False for tasks whose failure is not the kind a retry can fix (control flow, signals)."""
    worker_executed: bool
    """True when an external worker runs the task, so a worker that falls silent for the TaskDef's
    responseTimeoutSeconds times the execution out."""

    def schedule(self, ctx: ScheduleContext, node: WorkflowTask, task: TaskState) -> None:
        """Put a freshly created execution in motion: set its status, emit what it needs."""
        ...
