"""SWITCH (and the legacy DECISION): choose one case list by a value, run it, then go on after
the SWITCH.

Conductor's record: the SWITCH is COMPLETED as soon as it is evaluated, with output
`evaluationResult: [value]` and `selectedCase: value` (the value as text: null is "null"); its
input gains `case` and, when a case list runs, `hasChildren`. The case is the `decisionCases`
key equal to the value; only a missing key falls back to `defaultCase` — a matched empty case
runs nothing. `evaluatorType` `value-param` reads the input key named by `expression`;
`javascript`/`graaljs` run `expression` with `$` bound to the input. An evaluation error fails
the SWITCH (never retried, as a Conductor built-in).

DECISION reads `caseValueParam` or runs `caseExpression`, outputs `caseOutput: [value]`, and
falls back to the default case for an empty matched case too.
"""

from __future__ import annotations

from typing import Any

from shared.core.expressions import java_text
from shared.core.refs import Scope
from shared.core.scripting import ScriptError, check_javascript
from shared.core.tasktypes.base import BaseTaskType, Engine, Problems
from shared.models.definitions import WorkflowTask
from shared.models.runtime import TaskState, TaskStatus

JAVASCRIPT = ("javascript", "graaljs")


def case_text(value: Any) -> str:
    """`"" + value` in Java: JavaScript's integral numbers come back as integers there."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return java_text(value)


class SwitchTask(BaseTaskType):
    name = "SWITCH"
    retriable = False
    server_side = True

    def _value(self, engine: Engine, node: WorkflowTask, task: TaskState) -> Any:
        if node.evaluator_type == "value-param":
            return task.input_data.get(node.expression or "")
        return engine.javascript(node.expression or "", task.input_data, task.task_id)

    def chosen(self, node: WorkflowTask, case: str) -> list[WorkflowTask]:
        return node.decision_cases[case] if case in node.decision_cases else node.default_case

    def _output(self, case: str) -> dict[str, Any]:
        return {"evaluationResult": [case], "selectedCase": case}

    def _input(self, task: TaskState) -> dict[str, Any]:
        return task.input_data

    def start(self, engine: Engine, node: WorkflowTask, task: TaskState, scope: Scope) -> None:
        task.task_def_name = self.name
        try:
            case = case_text(self._value(engine, node, task))
        except ScriptError as error:
            engine.fail(task, TaskStatus.FAILED, str(error))
            return
        chosen = self.chosen(node, case)
        task.input_data = {**self._input(task), "case": case, **({"hasChildren": "true"} if chosen else {})}
        engine.complete(task, self._output(case))
        if chosen:  # Conductor's mapper creates the case's first task with the switch
            engine.walk_list(chosen, scope)

    def advance(self, engine: Engine, node: WorkflowTask, task: TaskState, scope: Scope) -> bool:
        if task.status is not TaskStatus.COMPLETED:
            return False
        return engine.walk_list(self.chosen(node, str(task.input_data.get("case"))), scope)

    def problems(self, node: WorkflowTask, path: str) -> Problems:
        found: Problems = []
        if not node.decision_cases:
            found.append((f"{path}.decisionCases", "a SWITCH needs at least one case"))
        if node.evaluator_type is None:
            found.append((f"{path}.evaluatorType", "required: value-param or javascript"))
        elif node.evaluator_type not in ("value-param", *JAVASCRIPT):
            found.append(
                (
                    f"{path}.evaluatorType",
                    f"{node.evaluator_type!r} is not supported (value-param, javascript, graaljs)",
                )
            )
        if not node.expression:
            found.append((f"{path}.expression", "required: the input key (value-param) or the script"))
        elif node.evaluator_type in JAVASCRIPT:
            problem = check_javascript(node.expression)
            if problem:
                found.append((f"{path}.expression", problem))
        return found


class DecisionTask(SwitchTask):
    name = "DECISION"

    def _value(self, engine: Engine, node: WorkflowTask, task: TaskState) -> Any:
        if node.case_expression and node.case_expression.strip():
            return engine.javascript(node.case_expression, task.input_data, task.task_id)
        return task.input_data.get(node.case_value_param or "")

    def chosen(self, node: WorkflowTask, case: str) -> list[WorkflowTask]:
        return node.decision_cases.get(case) or node.default_case

    def _output(self, case: str) -> dict[str, Any]:
        return {"caseOutput": [case]}

    def _input(self, task: TaskState) -> dict[str, Any]:
        return {}  # Conductor's DECISION record keeps only `case` (and `hasChildren`)

    def problems(self, node: WorkflowTask, path: str) -> Problems:
        found: Problems = []
        if not node.decision_cases:
            found.append((f"{path}.decisionCases", "a DECISION needs at least one case"))
        if not node.case_value_param and not node.case_expression:
            found.append((f"{path}.caseValueParam", "required: caseValueParam or caseExpression"))
        if node.case_expression:
            problem = check_javascript(node.case_expression)
            if problem:
                found.append((f"{path}.caseExpression", problem))
        return found
