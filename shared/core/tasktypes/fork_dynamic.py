"""FORK_JOIN_DYNAMIC: a fork whose branches are made at run time from the task's input.

Two input styles, as Conductor (docs/research/conductor-operators.md, FORK_JOIN_DYNAMIC):
- `forkTaskInputs` (a list): one branch per element, each a task named `forkTaskName` of type
  `forkTaskType` (SIMPLE by default), or a SUB_WORKFLOW of `forkTaskWorkflow` /
  `forkTaskWorkflowVersion`; a map element is the branch's input, anything else `{input: v}`,
  and each gets `__index`; references are `_<name>_<i>`;
- `dynamicForkTasksParam` names an input holding a list of WorkflowTasks, and
  `dynamicForkTasksInputParamName` one holding a map of reference -> input.
The record is a FORK (taskType "FORK"), COMPLETED, its input gaining `forkedTasks` (the
references) and `forkedTaskDefs` (the tasks); the branches and the JOIN after it are created
with it, and that JOIN's `joinOn` is the forked references. A SIMPLE branch runs under the
TaskDef registered under its name (0 retries without one, as Conductor's dynamic forks).

Each branch is one task; a branch of an operator type (SWITCH, DO_WHILE, a fork) is refused with
the reason rather than half-run (docs/operators.md lists this difference).
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from shared.core.budget import allowlist_problems, literal_allowlist
from shared.core.refs import Scope
from shared.core.tasktypes.base import BaseTaskType, Engine, Problems
from shared.core.tasktypes.fork import start_join
from shared.models.definitions import TaskDef, WorkflowTask
from shared.models.runtime import TaskState, TaskStatus

OPERATOR_TYPES = frozenset(
    {
        "SWITCH",
        "DECISION",
        "DO_WHILE",
        "FORK_JOIN",
        "FORK_JOIN_DYNAMIC",
        "JOIN",
        "EXCLUSIVE_JOIN",
        "TERMINATE",
    }
)
MAX_BRANCHES = 10_000
TOOL_CALL_FIELDS = frozenset({"integrationNames", "output"})
"""Keys of the task-shaped tool calls an LLM task returns that a WorkflowTask has not: a list of
tool calls forks as it is, as in Conductor."""


class DynamicForkError(ValueError):
    """Input a dynamic fork cannot make branches from; the message says which input and why."""


def _simple_style(engine: Engine, node: WorkflowTask, given: dict[str, Any]) -> list[WorkflowTask]:
    inputs = given["forkTaskInputs"]
    task_type = str(given.get("forkTaskType") or "SIMPLE")
    workflow = given.get("forkTaskWorkflow")
    name = (
        given.get("forkTaskName")
        or workflow
        or (task_type if task_type != "SIMPLE" else None)
        or node.task_reference_name
    )
    taken = set(engine.state.tasks) | engine.definition_refs()
    branches: list[WorkflowTask] = []
    for index, element in enumerate(inputs):
        parameters = dict(element) if isinstance(element, dict) else {"input": element}
        parameters["__index"] = index
        ref = f"_{name}_{index}"
        if ref in taken and engine.dynamic_parent(ref) != node.task_reference_name:
            ref = f"_{node.task_reference_name}_{name}_{index}"
        spec: dict[str, Any] = {
            "name": str(name),
            "taskReferenceName": ref,
            "type": "SUB_WORKFLOW" if workflow else task_type,
            "inputParameters": parameters,
            "optional": node.optional,
        }
        if workflow:
            version = given.get("forkTaskWorkflowVersion")
            spec["subWorkflowParam"] = {"name": str(workflow), "version": _version(version)}
        branches.append(WorkflowTask.model_validate(spec))
    return branches


def _version(value: Any) -> int | None:
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None  # Conductor: a version that is not a number means the latest


def _list_style(node: WorkflowTask, given: dict[str, Any]) -> list[WorkflowTask]:
    tasks_param = node.dynamic_fork_tasks_param or ""
    inputs_param = node.dynamic_fork_tasks_input_param_name or ""
    raw_tasks = given.get(tasks_param)
    if not isinstance(raw_tasks, list):
        raise DynamicForkError(f"Input '{tasks_param}' is invalid: it must be a list of workflow tasks")
    raw_inputs = given.get(inputs_param)
    if not isinstance(raw_inputs, dict):
        raise DynamicForkError(f"Input to the dynamically forked tasks is not a map: '{inputs_param}'")
    branches: list[WorkflowTask] = []
    for index, raw in enumerate(raw_tasks):
        if isinstance(raw, dict):  # an LLM task's toolCalls: fields of Conductor's ToolCall, not of a task
            raw = {key: value for key, value in raw.items() if key not in TOOL_CALL_FIELDS}
        try:
            branch = WorkflowTask.model_validate(raw)
        except ValidationError as error:
            first = error.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            raise DynamicForkError(f"Input '{tasks_param}'[{index}].{where}: {first['msg']}") from None
        extra = raw_inputs.get(branch.task_reference_name)
        if isinstance(extra, dict):
            branch.input_parameters = {**branch.input_parameters, **extra}
        branches.append(branch)
    return branches


class ForkJoinDynamicTask(BaseTaskType):
    name = "FORK_JOIN_DYNAMIC"
    retriable = False
    server_side = True

    def branches(self, engine: Engine, node: WorkflowTask, given: dict[str, Any]) -> list[WorkflowTask]:
        if isinstance(given.get("forkTaskInputs"), list):
            branches = _simple_style(engine, node, given)
        elif node.dynamic_fork_tasks_param:
            branches = _list_style(node, given)
        else:
            raise DynamicForkError(
                "forkTaskInputs: required (a list), or dynamicForkTasksParam and its input"
            )
        if len(branches) > MAX_BRANCHES:
            raise DynamicForkError(f"{len(branches)} branches: at most {MAX_BRANCHES} per dynamic fork")
        seen: set[str] = set()
        taken = engine.definition_refs()
        for branch in branches:
            ref = branch.task_reference_name
            if branch.type in OPERATOR_TYPES:
                raise DynamicForkError(
                    f"branch {ref}: a {branch.type} cannot be a dynamic fork branch in Cairn"
                )
            if not engine.supports(branch.type):
                raise DynamicForkError(f"branch {ref}: task type {branch.type!r} is not supported")
            if ref in seen or ref in taken or "__" in ref:
                raise DynamicForkError(f"branch {ref}: duplicate or reserved task reference name")
            seen.add(ref)
            if branch.type == "SIMPLE" and branch.task_definition is None:
                registered = engine.task_def(branch.name)
                branch.task_definition = registered or TaskDef(name=branch.name, retry_count=0)
        return branches

    def start(self, engine: Engine, node: WorkflowTask, task: TaskState, scope: Scope) -> None:
        task.task_type = task.task_def_name = "FORK"
        try:
            branches = self.branches(engine, node, task.input_data)
        except DynamicForkError as error:
            engine.fail(task, TaskStatus.FAILED_WITH_TERMINAL_ERROR, str(error))
            return
        refusal = engine.budget.fork_refusal(node.task_reference_name, len(branches))
        if refusal is not None:
            engine.stop_for_budget(refusal)
            return
        own_list = literal_allowlist(node.input_parameters, "allowedTaskNames")
        for branch in branches:
            refused = engine.budget.task_name_refusal(branch.name, own_list)
            if refused is not None:
                engine.fail(
                    task,
                    TaskStatus.FAILED_WITH_TERMINAL_ERROR,
                    f"branch {branch.task_reference_name}: {refused}",
                )
                return
        task.input_data = {
            **task.input_data,
            "forkedTasks": [branch.task_reference_name for branch in branches],
            "forkedTaskDefs": [
                branch.model_dump(by_alias=True, exclude_defaults=True, mode="json") for branch in branches
            ],
        }
        for index, branch in enumerate(branches):
            engine.add_dynamic_node(branch, node.task_reference_name, index)
        engine.complete(task)
        for branch in branches:
            engine.walk_list([branch], scope)
        start_join(engine, engine.next_sibling(node.task_reference_name), scope)

    def advance(self, engine: Engine, node: WorkflowTask, task: TaskState, scope: Scope) -> bool:
        if task.status is not TaskStatus.COMPLETED:
            return False
        start_join(engine, engine.next_sibling(node.task_reference_name), scope)
        for ref in engine.dynamic_refs(node.task_reference_name):
            engine.walk_list([engine.dynamic_node(ref)], scope)
        return True

    def problems(self, node: WorkflowTask, path: str) -> Problems:
        given = node.input_parameters
        found = allowlist_problems(node, path)
        if "forkTaskInputs" in given:
            return found
        if node.dynamic_fork_tasks_param and node.dynamic_fork_tasks_input_param_name:
            return found
        found.append(
            (
                f"{path}.dynamicForkTasksParam",
                "a FORK_JOIN_DYNAMIC needs inputParameters.forkTaskInputs (with forkTaskName), or "
                "dynamicForkTasksParam and dynamicForkTasksInputParamName",
            )
        )
        return found
