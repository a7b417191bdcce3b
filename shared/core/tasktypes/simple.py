"""SIMPLE: executed by an external worker; starting it means handing a task message to workers."""

from __future__ import annotations

from shared.core import ids
from shared.core.refs import Scope
from shared.core.secret_refs import SECRET_TASK_TYPES, secret_paths
from shared.core.tasktypes.base import BaseTaskType, Engine, from_definition
from shared.models.definitions import TaskDef, WorkflowTask
from shared.models.messages import TaskMessage
from shared.models.runtime import TaskState, TaskStatus


def dispatch(engine: Engine, task: TaskState, response_timeout_seconds: int = 0) -> None:
    """Emit one delivery of this execution to workers; each delivery has its own message id."""
    task.dispatch_count += 1
    task.status = TaskStatus.SCHEDULED
    task.update_time = engine.now
    engine.touch(task)
    engine.publish(
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
            correlation_id=engine.state.correlation_id,
            workflow_version=engine.state.workflow_version,
            secret_paths=task.secret_paths or None,
        )
    )


def response_timeout_of(node: WorkflowTask) -> int:
    """The TaskDef's responseTimeoutSeconds (embedded in the snapshot; Conductor's default else)."""
    return (node.task_definition or TaskDef(name=node.name)).response_timeout_seconds


class WorkerTask(BaseTaskType):
    """A task some worker runs: dispatched on its type's topic, finished by a TaskResult."""

    retriable = True
    worker_executed = True

    def start(self, engine: Engine, node: WorkflowTask, task: TaskState, scope: Scope) -> None:
        if self.name in SECRET_TASK_TYPES and from_definition(engine, node):
            task.secret_paths = secret_paths(node.input_parameters)
        dispatch(engine, task, engine.task_def_of(task).response_timeout_seconds)


class SimpleTask(WorkerTask):
    name = "SIMPLE"

    def default_task_def(self, name: str) -> TaskDef:
        """TaskDef's own defaults (3 retries, FIXED, 60 s), as Conductor gives a SIMPLE task."""
        return TaskDef(name=name)
