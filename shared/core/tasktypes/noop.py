"""NOOP: does nothing and completes at once (Conductor gives it no input either)."""

from __future__ import annotations

from shared.core.refs import Scope
from shared.core.tasktypes.base import BaseTaskType, Engine
from shared.models.definitions import WorkflowTask
from shared.models.runtime import TaskState


class NoopTask(BaseTaskType):
    name = "NOOP"
    retriable = False
    server_side = True

    def start(self, engine: Engine, node: WorkflowTask, task: TaskState, scope: Scope) -> None:
        task.input_data = {}
        engine.complete(task)
