"""WAIT: in progress from the moment it is scheduled until a signal completes it.

The signal's payload becomes the task's output. Timed waits (`duration`, `until`) are rejected by
validation until durable-timer waits land.
"""

from __future__ import annotations

from shared.core.tasktypes.base import ScheduleContext
from shared.models.definitions import WorkflowTask
from shared.models.runtime import TaskState, TaskStatus


class WaitTask:
    name = "WAIT"
    retriable = False
    accepts_signals = True
    worker_executed = False

    def schedule(self, ctx: ScheduleContext, node: WorkflowTask, task: TaskState) -> None:
        task.status = TaskStatus.IN_PROGRESS
        task.start_time = ctx.now
        task.update_time = ctx.now
