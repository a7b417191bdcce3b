"""WAIT: in progress from the moment it is scheduled until a signal completes it, or, with a
`duration` or `until` input, until a durable timer fires (a signal may still end it sooner).

The signal's payload becomes the task's output. A `duration` or `until` that cannot be read fails
the task with a reason naming the value (validation catches literal ones at registration).
"""

from __future__ import annotations

from shared.core import ids
from shared.core.refs import Scope
from shared.core.tasktypes.base import BaseTaskType, Engine, Problems, in_progress
from shared.core.waits import WaitSpecError, wait_ends_at
from shared.models.definitions import WorkflowTask
from shared.models.runtime import PendingTimer, TaskState, TaskStatus

TIMER_WAIT = "wait"
"""A timed WAIT's end: firing completes the task."""


class WaitTask(BaseTaskType):
    name = "WAIT"
    retriable = False
    accepts_signals = True

    def start(self, engine: Engine, node: WorkflowTask, task: TaskState, scope: Scope) -> None:
        in_progress(engine, task)
        try:
            ends_at = wait_ends_at(task.input_data, engine.now)
        except WaitSpecError as error:
            engine.fail(task, TaskStatus.FAILED_WITH_TERMINAL_ERROR, str(error))
            return
        if ends_at is not None:
            timer_id = ids.timer_id(task.task_id, "wait")
            engine.arm_timer(
                PendingTimer(timer_id=timer_id, purpose=TIMER_WAIT, fire_at=ends_at, task_id=task.task_id)
            )

    def problems(self, node: WorkflowTask, path: str) -> Problems:
        """A literal duration/until must be readable now; an expression is checked when it runs."""
        given = {k: v for k, v in node.input_parameters.items() if k in ("duration", "until")}
        if len(given) == 2:
            return [(f"{path}.inputParameters", "a WAIT takes either duration or until, not both")]
        literal = {k: v for k, v in given.items() if not (isinstance(v, str) and "${" in v)}
        try:
            wait_ends_at(literal, 0)
        except WaitSpecError as error:
            return [(f"{path}.inputParameters.{next(iter(literal))}", str(error))]
        return []


class HumanTask(BaseTaskType):
    """HUMAN: in progress until a person's signal (or a task update) completes or fails it."""

    name = "HUMAN"
    retriable = False
    accepts_signals = True

    def start(self, engine: Engine, node: WorkflowTask, task: TaskState, scope: Scope) -> None:
        in_progress(engine, task)
