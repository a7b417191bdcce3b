"""WAIT: in progress from the moment it is scheduled until a signal completes it, or, with a
`duration` or `until` input, until a durable timer fires (a signal may still end it sooner).

The signal's payload becomes the task's output. A `duration` or `until` that cannot be read fails
the task with a reason naming the value (validation catches literal ones at registration).
"""

from __future__ import annotations

from shared.core import ids
from shared.core.tasktypes.base import ScheduleContext
from shared.core.waits import WaitSpecError, wait_ends_at
from shared.models.definitions import WorkflowTask
from shared.models.runtime import PendingTimer, TaskState, TaskStatus

TIMER_WAIT = "wait"
"""A timed WAIT's end: firing completes the task."""


class WaitTask:
    name = "WAIT"
    retriable = False
    accepts_signals = True
    worker_executed = False

    def schedule(self, ctx: ScheduleContext, node: WorkflowTask, task: TaskState) -> None:
        task.status = TaskStatus.IN_PROGRESS
        task.start_time = ctx.now
        task.update_time = ctx.now
        try:
            ends_at = wait_ends_at(task.input_data, ctx.now)
        except WaitSpecError as error:
            task.status = TaskStatus.FAILED_WITH_TERMINAL_ERROR
            task.reason_for_incompletion = str(error)
            return
        if ends_at is not None:
            timer_id = ids.timer_id(task.task_id, "wait")
            ctx.timers.append(
                PendingTimer(timer_id=timer_id, purpose=TIMER_WAIT, fire_at=ends_at, task_id=task.task_id)
            )
