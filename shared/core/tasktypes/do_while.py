"""DO_WHILE: run the `loopOver` body, then evaluate `loopCondition`; go round while it is true.

Conductor's semantics (docs/research/conductor-operators.md, DO_WHILE):
- the body always runs once; the condition is checked after each iteration;
- body executions are `ref__N` with `iteration: N` (N from 1); the DO_WHILE keeps its reference,
  stays IN_PROGRESS while it loops, and its `iteration` counts up;
- its output holds `iteration` and, per finished iteration, `"N": {bodyRef: output}`;
  `keepLastN` keeps only the last N of those (and what the API lists);
- the condition is JavaScript with `$` bound to the DO_WHILE's resolved inputParameters, plus
  `$.<loopRef>` = the DO_WHILE's output and `$.<bodyRef>` = each body task's output; a boolean
  is itself, a number is true when > 0, anything else is false; an error fails the DO_WHILE
  with FAILED_WITH_TERMINAL_ERROR;
- list mode: with `items` (an expression) or `inputParameters._items`, iteration N runs over
  item N-1 (`loopItem`, `loopIndex` in the output and the condition's bindings); the loop goes
  on while items remain and the condition (if any) is true; an empty list runs no iteration.

Cairn keeps only the current iteration's executions in the workflow document: when the next
iteration starts, the finished one lives on in task records and in the DO_WHILE's output, so a
10,000-iteration loop costs a decision no more than the first iteration did.
"""

from __future__ import annotations

from typing import Any

from shared.core.refs import Scope
from shared.core.scripting import ScriptError, check_javascript
from shared.core.tasktypes.base import BaseTaskType, Engine, Problems, in_progress
from shared.models.definitions import WorkflowTask
from shared.models.runtime import TaskState, TaskStatus


def is_true(value: Any) -> bool:
    """Conductor's evalBool: a boolean is itself, a number is true when > 0, else false."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return value > 0
    return False


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, list):
        return value
    if isinstance(value, tuple | set):
        return list(value)
    return [value]


class DoWhileTask(BaseTaskType):
    name = "DO_WHILE"
    retriable = False
    server_side = True

    # ---- list mode -------------------------------------------------------------------------

    def _items(self, engine: Engine, node: WorkflowTask) -> list[Any] | None:
        if node.items is not None and (not isinstance(node.items, str) or node.items.strip()):
            return _as_list(engine.evaluate({"items": node.items})["items"])
        if "_items" in node.input_parameters:
            return _as_list(engine.evaluate({"_items": node.input_parameters["_items"]})["_items"])
        return None

    def _set_iteration(self, task: TaskState, iteration: int, items: list[Any] | None) -> None:
        task.iteration = iteration
        task.output_data = {**task.output_data, "iteration": iteration}
        if items is not None and 0 < iteration <= len(items):
            task.output_data["loopIndex"] = iteration - 1
            task.output_data["loopItem"] = items[iteration - 1]

    # ---- the loop --------------------------------------------------------------------------

    def start(self, engine: Engine, node: WorkflowTask, task: TaskState, scope: Scope) -> None:
        in_progress(engine, task)
        items = self._items(engine, node)
        if items is not None and not items:
            task.output_data = {"iteration": 0}
            engine.complete(task)
            return
        # The body starts from advance(), in a later wave: Conductor numbers the DO_WHILE with
        # the tasks created alongside it (a fork's other branch heads, its JOIN) before the
        # loop schedules its first body task.
        self._set_iteration(task, 1, items)

    def advance(self, engine: Engine, node: WorkflowTask, task: TaskState, scope: Scope) -> bool:
        while not task.status.is_terminal:
            if not engine.walk_list(node.loop_over, (*scope, task.iteration)):
                return False
            if self._body_live(engine, node, task, scope):
                return False  # e.g. a branch its JOIN does not wait for: Conductor waits too
            self._record_iteration(engine, node, task, scope)
            try:
                go_on = self._go_on(engine, node, task, scope)
            except ScriptError as error:
                engine.fail(
                    task,
                    TaskStatus.FAILED_WITH_TERMINAL_ERROR,
                    f"Unable to evaluate condition {node.loop_condition}, exception {error}",
                )
                return False
            if not go_on:
                engine.complete(task)
                return True
            refusal = engine.budget.iteration_refusal(node.task_reference_name, task.iteration + 1)
            if refusal is not None:
                engine.stop_for_budget(refusal)
                return False
            engine.forget_below(node.task_reference_name)
            self._set_iteration(task, task.iteration + 1, self._items(engine, node))
            engine.touch(task)
        return task.status.is_successful

    def _body_live(self, engine: Engine, node: WorkflowTask, task: TaskState, scope: Scope) -> bool:
        body_scope = (*scope, task.iteration)
        for ref in engine.loop_body_refs(node.task_reference_name):
            execution = engine.current(ref, body_scope)
            if execution is not None and not execution.status.is_terminal:
                return True
        return False

    def _body_outputs(
        self, engine: Engine, node: WorkflowTask, task: TaskState, scope: Scope
    ) -> dict[str, Any]:
        body_scope = (*scope, task.iteration)
        outputs: dict[str, Any] = {}
        for ref in engine.loop_body_refs(node.task_reference_name):
            execution = engine.current(ref, body_scope)
            if execution is not None:
                outputs[ref] = execution.output_data
        return outputs

    def _record_iteration(self, engine: Engine, node: WorkflowTask, task: TaskState, scope: Scope) -> None:
        output = dict(task.output_data)
        output[str(task.iteration)] = self._body_outputs(engine, node, task, scope)
        keep = node.input_parameters.get("keepLastN")
        if isinstance(keep, int) and not isinstance(keep, bool) and keep > 0 and task.iteration > keep:
            oldest_kept = task.iteration - keep + 1
            for key in [k for k in output if k.isdigit() and int(k) < oldest_kept]:
                del output[key]
        task.output_data = output
        engine.touch(task)

    def _go_on(self, engine: Engine, node: WorkflowTask, task: TaskState, scope: Scope) -> bool:
        items = self._items(engine, node)
        condition = (node.loop_condition or "").strip()
        bindings: dict[str, Any] = dict(engine.evaluate(node.input_parameters))
        bindings[node.task_reference_name] = task.output_data
        bindings.update(self._body_outputs(engine, node, task, scope))
        if items is not None:
            index = task.iteration - 1
            bindings["loopIndex"], bindings["loopItem"] = index, items[index] if index < len(items) else None
            if index >= len(items) - 1:
                return False
            if not condition:
                return True
        return is_true(engine.javascript(condition, bindings, f"{task.task_id}/{task.iteration}"))

    def on_child_failed(self, engine: Engine, node: WorkflowTask, task: TaskState, child: TaskState) -> bool:
        """A permissive body task failed for good: the loop fails with it (Conductor)."""
        if not task.status.is_terminal:
            engine.fail(
                task,
                TaskStatus.FAILED,
                child.reason_for_incompletion or f"{child.reference_task_name} failed",
            )
        return True

    def problems(self, node: WorkflowTask, path: str) -> Problems:
        found: Problems = []
        if not node.loop_over:
            found.append((f"{path}.loopOver", "a DO_WHILE needs the tasks of its body"))
        if node.loop_condition is None:
            found.append((f"{path}.loopCondition", "required (JavaScript; may be empty with items)"))
        elif node.loop_condition.strip():
            problem = check_javascript(node.loop_condition)
            if problem:
                found.append((f"{path}.loopCondition", problem))
        keep = node.input_parameters.get("keepLastN")
        if keep is not None and (not isinstance(keep, int) or isinstance(keep, bool) or keep < 1):
            found.append((f"{path}.inputParameters.keepLastN", "a whole number of iterations, at least 1"))
        return found
