"""SIMPLE: executed by an external worker; scheduling means handing a task message to workers."""

from __future__ import annotations

from shared.core import ids
from shared.core.tasktypes.base import ScheduleContext
from shared.models.definitions import TaskDef, WorkflowTask
from shared.models.messages import TaskMessage
from shared.models.runtime import TaskState, TaskStatus


def dispatch(ctx: ScheduleContext, task: TaskState, response_timeout_seconds: int = 0) -> None:
    """Emit one delivery of this execution to workers; each delivery has its own message id."""
    task.dispatch_count += 1
    task.status = TaskStatus.SCHEDULED
    task.update_time = ctx.now
    ctx.outbox.append(
        TaskMessage(
            id=ids.dispatch_message_id(task.task_id, task.dispatch_count),
            task_id=task.task_id,
            task_type=task.task_type,
            task_def_name=task.task_def_name,
            reference_task_name=task.reference_task_name,
            workflow_instance_id=task.workflow_instance_id,
            workflow_type=task.workflow_type,
            input_data=task.input_data,
            retry_count=task.retry_count,
            poll_count=task.dispatch_count,
            scheduled_time=task.scheduled_time,
            response_timeout_seconds=response_timeout_seconds,
        )
    )


def response_timeout_of(node: WorkflowTask) -> int:
    """The TaskDef's responseTimeoutSeconds (embedded in the snapshot; Conductor's default else)."""
    return (node.task_definition or TaskDef(name=node.name)).response_timeout_seconds


class SimpleTask:
    name = "SIMPLE"
    retriable = True
    accepts_signals = False
    worker_executed = True

    def schedule(self, ctx: ScheduleContext, node: WorkflowTask, task: TaskState) -> None:
        dispatch(ctx, task, response_timeout_of(node))
