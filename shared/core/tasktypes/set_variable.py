"""SET_VARIABLE: every input key becomes `workflow.variables[key]` (replaced whole, null too).

As Conductor: variables larger than 256 KB as JSON fail the task with FAILED_WITH_TERMINAL_ERROR
and leave the variables as they were. No output.
"""

from __future__ import annotations

import json

from shared.core.refs import Scope
from shared.core.tasktypes.base import BaseTaskType, Engine
from shared.models.definitions import WorkflowTask
from shared.models.runtime import TaskState, TaskStatus

MAX_VARIABLES_BYTES = 256 * 1024


class SetVariableTask(BaseTaskType):
    name = "SET_VARIABLE"
    retriable = False
    server_side = True

    def start(self, engine: Engine, node: WorkflowTask, task: TaskState, scope: Scope) -> None:
        variables = {**engine.state.variables, **task.input_data}
        size = len(json.dumps(variables, separators=(",", ":")).encode())
        if size > MAX_VARIABLES_BYTES:
            engine.fail(
                task,
                TaskStatus.FAILED_WITH_TERMINAL_ERROR,
                f"The variables payload size: {size // 1024} kilobytes is greater than the permissible "
                f"limit: {MAX_VARIABLES_BYTES // 1024} kilobytes",
            )
            return
        engine.state.variables = variables
        engine.complete(task)
