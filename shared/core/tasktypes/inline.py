"""INLINE: evaluate a script inside the decision; its value is the output `result`.

As Conductor: `inputParameters.evaluatorType` is `javascript` (the default) or `graaljs` (the
same engine) — `$` is bound to the whole task input — or `value-param` (the result is the input
named by `expression`). A script error fails the task with FAILED_WITH_TERMINAL_ERROR, a script
that runs past its time limit with FAILED (retriable per its TaskDef); the message is also in
the output as `error`.
"""

from __future__ import annotations

from shared.core.refs import Scope
from shared.core.scripting import ScriptError, ScriptTimeoutError, check_javascript
from shared.core.tasktypes.base import BaseTaskType, Engine, Problems
from shared.models.definitions import WorkflowTask
from shared.models.runtime import TaskState, TaskStatus

EVALUATORS = ("javascript", "graaljs", "value-param")


class InlineTask(BaseTaskType):
    name = "INLINE"
    retriable = True
    server_side = True

    def start(self, engine: Engine, node: WorkflowTask, task: TaskState, scope: Scope) -> None:
        evaluator = task.input_data.get("evaluatorType", "javascript")
        expression = task.input_data.get("expression")
        if not isinstance(expression, str) or not expression.strip():
            self._failed(
                engine,
                task,
                TaskStatus.FAILED_WITH_TERMINAL_ERROR,
                "Empty 'expression' in INLINE task's input parameters.",
            )
            return
        if evaluator == "value-param":
            engine.complete(task, {"result": task.input_data.get(expression)})
            return
        if evaluator not in EVALUATORS:
            self._failed(
                engine,
                task,
                TaskStatus.FAILED_WITH_TERMINAL_ERROR,
                f"Unknown evaluator '{evaluator}' in INLINE task.",
            )
            return
        try:
            result = engine.javascript(expression, task.input_data, task.task_id)
        except ScriptTimeoutError as error:
            self._failed(engine, task, TaskStatus.FAILED, str(error))
            return
        except ScriptError as error:
            self._failed(engine, task, TaskStatus.FAILED_WITH_TERMINAL_ERROR, str(error))
            return
        engine.complete(task, {"result": result})

    def _failed(self, engine: Engine, task: TaskState, status: TaskStatus, reason: str) -> None:
        task.output_data = {**task.output_data, "error": reason}
        engine.fail(task, status, reason)

    def problems(self, node: WorkflowTask, path: str) -> Problems:
        evaluator = node.input_parameters.get("evaluatorType", "javascript")
        expression = node.input_parameters.get("expression")
        where = f"{path}.inputParameters"
        if isinstance(evaluator, str) and "${" not in evaluator and evaluator not in EVALUATORS:
            return [(f"{where}.evaluatorType", f"{evaluator!r} is not supported ({', '.join(EVALUATORS)})")]
        if expression is None:
            return [(f"{where}.expression", "required: the script to run")]
        if evaluator in ("javascript", "graaljs") and isinstance(expression, str) and "${" not in expression:
            problem = check_javascript(expression)
            if problem:
                return [(f"{where}.expression", problem)]
        return []
