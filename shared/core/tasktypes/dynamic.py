"""DYNAMIC: a worker task whose name is chosen at run time, from the input named by
`dynamicTaskNameParam`.

As Conductor, the execution is recorded under the chosen name (taskType and taskDefName) and
dispatched on that name's topic, so any worker for it — or Cairn's system-task worker, for a
name like HTTP — runs it. It runs under the TaskDef registered under that name; without one,
under the system-task default (no retries), which is what Conductor ends up using.
"""

from __future__ import annotations

import re

from shared.core.budget import allowlist_problems, literal_allowlist
from shared.core.refs import Scope
from shared.core.tasktypes.base import SYSTEM_TASK_DEFAULT, BaseTaskType, Engine, Problems
from shared.core.tasktypes.simple import dispatch
from shared.models.definitions import TASK_NAME_PATTERN, WorkflowTask
from shared.models.runtime import TaskState, TaskStatus


class DynamicTask(BaseTaskType):
    name = "DYNAMIC"
    retriable = True
    worker_executed = True

    def start(self, engine: Engine, node: WorkflowTask, task: TaskState, scope: Scope) -> None:
        param = node.dynamic_task_name_param or ""
        chosen = task.input_data.get(param)
        if chosen is None or not re.match(TASK_NAME_PATTERN, str(chosen)):
            engine.fail(
                task,
                TaskStatus.FAILED_WITH_TERMINAL_ERROR,
                f"Cannot map a dynamic task based on the parameter and input. Parameter= {param}, "
                f"input= {task.input_data}"
                + ("" if chosen is None else f" ({chosen!r} is not a usable task name)"),
            )
            return
        name = str(chosen)
        own_list = literal_allowlist(node.input_parameters, "allowedTaskNames")
        refused = engine.budget.task_name_refusal(name, own_list)
        if refused is not None:
            engine.fail(task, TaskStatus.FAILED_WITH_TERMINAL_ERROR, refused)
            return
        resolved = node.model_copy(
            update={
                "name": name,
                "type": "SIMPLE",
                "task_definition": engine.task_def(name)
                or SYSTEM_TASK_DEFAULT.model_copy(update={"name": name}),
            }
        )
        engine.add_dynamic_node(resolved, engine.parent_ref(node.task_reference_name) or "", -1)
        task.kind = "SIMPLE"
        task.task_type = task.task_def_name = name
        dispatch(engine, task, engine.task_def_of(task).response_timeout_seconds)

    def problems(self, node: WorkflowTask, path: str) -> Problems:
        found = allowlist_problems(node, path)
        if not node.dynamic_task_name_param:
            found.append(
                (f"{path}.dynamicTaskNameParam", "required: the input key that names the task to run")
            )
        return found
