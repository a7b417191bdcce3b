"""JSON_JQ_TRANSFORM: run the jq program `queryExpression` over the task's whole input.

As Conductor: output `result` (the first value, null when there is none) and `resultList` (every
value); a jq error (compile or run time, or past its time or memory limit) fails the task with
FAILED — retriable per its TaskDef — and the message is also in the output as `error`.
"""

from __future__ import annotations

from shared.core.refs import Scope
from shared.core.scripting import ScriptError
from shared.core.tasktypes.base import BaseTaskType, Engine, Problems
from shared.models.definitions import WorkflowTask
from shared.models.runtime import TaskState, TaskStatus


class JsonJqTransformTask(BaseTaskType):
    name = "JSON_JQ_TRANSFORM"
    retriable = True
    server_side = True

    def start(self, engine: Engine, node: WorkflowTask, task: TaskState, scope: Scope) -> None:
        query = task.input_data.get("queryExpression")
        if not isinstance(query, str) or not query.strip():
            reason = "Missing 'queryExpression' in input parameters"
            task.output_data = {"error": reason}
            engine.fail(task, TaskStatus.FAILED, reason)
            return
        try:
            results = engine.jq(query, task.input_data)
        except ScriptError as error:
            task.output_data = {"error": str(error)}
            engine.fail(task, TaskStatus.FAILED, str(error))
            return
        engine.complete(task, {"result": results[0] if results else None, "resultList": results})

    def problems(self, node: WorkflowTask, path: str) -> Problems:
        if "queryExpression" not in node.input_parameters:
            return [(f"{path}.inputParameters.queryExpression", "required: the jq program to run")]
        return []
