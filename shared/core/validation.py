"""Definition validation: every problem is reported with the JSON field path where it sits.

Two kinds of rejection: a malformed definition (wrong type, missing field, unknown field, unknown
task type, duplicate reference) and a well-formed Conductor definition using something Cairn does
not implement yet. The second kind names the field too, so the author knows exactly what to drop.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

from pydantic import ValidationError

from shared.core.secret_refs import reference_problems
from shared.core.tasktypes import REGISTRY, TaskTypeRegistry
from shared.models.definitions import (
    CONDUCTOR_TASK_TYPES,
    TASK_NAME_PATTERN,
    TaskDef,
    WorkflowDef,
    WorkflowTask,
)


class DefinitionError(ValueError):
    """An invalid or unsupported definition. `problems` holds (field path, message) pairs."""

    def __init__(self, problems: Sequence[tuple[str, str]], what: str = "definition") -> None:
        self.problems = list(problems)
        lines = "; ".join(f"{path}: {message}" for path, message in self.problems)
        super().__init__(f"invalid {what}: {lines}")


def format_location(location: Iterable[Any]) -> str:
    """('tasks', 2, 'type') -> 'tasks[2].type'."""
    path = ""
    for part in location:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else str(part)
    return path or "(root)"


def problems_from_validation_error(error: ValidationError, prefix: str = "") -> list[tuple[str, str]]:
    problems = []
    for item in error.errors():
        location = format_location(item["loc"])
        message = item["msg"]
        if item["type"] == "extra_forbidden":
            message = "unknown field (not a Conductor field Cairn knows)"
        problems.append((f"{prefix}{location}" if prefix else location, message))
    return problems


def parse_workflow_def(data: Any, registry: TaskTypeRegistry = REGISTRY) -> WorkflowDef:
    """Parse and fully validate a WorkflowDef from JSON data; raise DefinitionError on any problem."""
    try:
        definition = WorkflowDef.model_validate(data)
    except ValidationError as error:
        problems = problems_from_validation_error(error) + _raw_type_problems(data, registry)
        raise DefinitionError(problems, "workflow definition") from None
    validate_workflow_def(definition, registry)
    return definition


def _raw_type_problems(data: Any, registry: TaskTypeRegistry) -> list[tuple[str, str]]:
    """Task-type problems of a definition that failed to parse, so one report lists them all."""
    tasks = data.get("tasks") if isinstance(data, dict) else None
    if not isinstance(tasks, list):
        return []
    problems = []
    for index, task in enumerate(tasks):
        task_type = task.get("type", "SIMPLE") if isinstance(task, dict) else None
        if isinstance(task_type, str):
            problems += _type_problems(task_type, f"tasks[{index}]", registry)
    return problems


def _type_problems(task_type: str, path: str, registry: TaskTypeRegistry) -> list[tuple[str, str]]:
    if task_type not in CONDUCTOR_TASK_TYPES:
        return [(f"{path}.type", f"unknown task type {task_type!r}")]
    if not registry.supports(task_type):
        supported = ", ".join(registry.names())
        return [
            (
                f"{path}.type",
                f"task type {task_type!r} is not supported by Cairn yet (supported: {supported})",
            )
        ]
    return []


def parse_task_def(data: Any, prefix: str = "") -> TaskDef:
    try:
        task_def = TaskDef.model_validate(data)
    except ValidationError as error:
        raise DefinitionError(problems_from_validation_error(error, prefix), "task definition") from None
    problems = task_def_problems(task_def, prefix)
    if problems:
        raise DefinitionError(problems, "task definition")
    return task_def


_NOT_YET = "is not supported by Cairn yet; remove it or leave it at Conductor's default"


_NAME_RULE = "letters, digits, '.', '_' and '-' only (at most 200): it becomes a topic name"


def task_def_problems(task_def: TaskDef, prefix: str = "") -> list[tuple[str, str]]:
    naming = [] if re.match(TASK_NAME_PATTERN, task_def.name) else [(f"{prefix}name", _NAME_RULE)]
    checks: list[tuple[str, bool]] = [
        ("concurrentExecLimit", bool(task_def.concurrent_exec_limit)),
        ("rateLimitPerFrequency", bool(task_def.rate_limit_per_frequency)),
        ("inputTemplate", bool(task_def.input_template)),
        ("enforceSchema", task_def.enforce_schema),
        ("isolationGroupId", bool(task_def.isolation_group_id)),
        ("executionNameSpace", bool(task_def.execution_name_space)),
    ]
    ordering = []
    if task_def.timeout_seconds and task_def.response_timeout_seconds > task_def.timeout_seconds:
        ordering.append(
            (f"{prefix}responseTimeoutSeconds", "must not exceed timeoutSeconds (as in Conductor)")
        )
    return naming + ordering + [(f"{prefix}{name}", _NOT_YET) for name, used in checks if used]


# Operator fields and the types that own them: one on any other type would be silently ignored.
_OWNED_FIELDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "decision_cases": ("decisionCases", ("SWITCH", "DECISION")),
    "default_case": ("defaultCase", ("SWITCH", "DECISION")),
    "case_value_param": ("caseValueParam", ("DECISION",)),
    "case_expression": ("caseExpression", ("DECISION",)),
    "evaluator_type": ("evaluatorType", ("SWITCH",)),
    "expression": ("expression", ("SWITCH",)),
    "fork_tasks": ("forkTasks", ("FORK_JOIN",)),
    "join_on": ("joinOn", ("JOIN", "EXCLUSIVE_JOIN")),
    "default_exclusive_join_task": ("defaultExclusiveJoinTask", ("EXCLUSIVE_JOIN",)),
    "loop_condition": ("loopCondition", ("DO_WHILE",)),
    "loop_over": ("loopOver", ("DO_WHILE",)),
    "items": ("items", ("DO_WHILE",)),
    "sub_workflow_param": ("subWorkflowParam", ("SUB_WORKFLOW",)),
    "dynamic_task_name_param": ("dynamicTaskNameParam", ("DYNAMIC",)),
    "dynamic_fork_tasks_param": ("dynamicForkTasksParam", ("FORK_JOIN_DYNAMIC",)),
    "dynamic_fork_tasks_input_param_name": ("dynamicForkTasksInputParamName", ("FORK_JOIN_DYNAMIC",)),
    "dynamic_fork_join_tasks_param": ("dynamicForkJoinTasksParam", ()),
    "sink": ("sink", ("EVENT",)),
    "script_expression": ("scriptExpression", ()),
}


_TOLERATED = {("join_on", "FORK_JOIN")}
"""Conductor's own builders (conductor-python's ForkTask) write joinOn on the FORK_JOIN too, and
Conductor ignores it there; so does Cairn (the JOIN's joinOn is what counts)."""


def _field_problems(node: WorkflowTask, path: str) -> list[tuple[str, str]]:
    problems = []
    for attribute, (alias, owners) in _OWNED_FIELDS.items():
        value = getattr(node, attribute)
        if value in (None, [], {}) or node.type in owners or (attribute, node.type) in _TOLERATED:
            continue
        if owners:
            problems.append(
                (f"{path}.{alias}", f"only a {' or '.join(owners)} task takes {alias}, not {node.type}")
            )
        else:
            problems.append((f"{path}.{alias}", _NOT_YET))
    return problems


def _task_problems(node: WorkflowTask, path: str, registry: TaskTypeRegistry) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    if node.type not in CONDUCTOR_TASK_TYPES:
        return [(f"{path}.type", f"unknown task type {node.type!r}")]
    if not registry.supports(node.type):
        supported = ", ".join(registry.names())
        return [
            (
                f"{path}.type",
                f"task type {node.type!r} is not supported by Cairn yet (supported: {supported})",
            )
        ]
    if node.type == "SIMPLE" and not re.match(TASK_NAME_PATTERN, node.name):
        problems.append((f"{path}.name", _NAME_RULE))
    ref = node.task_reference_name
    if "__" in ref:
        problems.append((f"{path}.taskReferenceName", "'__' is reserved: loop iterations run as ref__N"))
    if ref == "workflow":
        problems.append((f"{path}.taskReferenceName", "'workflow' is reserved for ${workflow...}"))
    checks: list[tuple[str, bool]] = [
        ("startDelay", node.start_delay != 0),
        ("asyncComplete", node.async_complete),
        ("rateLimited", bool(node.rate_limited)),
        ("cacheConfig", node.cache_config is not None),
        ("onStateChange", bool(node.on_state_change)),
    ]
    problems += [(f"{path}.{name}", _NOT_YET) for name, used in checks if used]
    problems += _field_problems(node, path)
    problems += reference_problems(node.type, node.input_parameters, f"{path}.inputParameters")
    problems += registry.get(node.type).problems(node, path)
    if node.task_definition is not None:
        problems += task_def_problems(node.task_definition, f"{path}.taskDefinition.")
    return problems


def _list_problems(
    tasks: list[WorkflowTask], path: str, registry: TaskTypeRegistry, seen: dict[str, str]
) -> list[tuple[str, str]]:
    """Every node of one list and, recursively, of the lists it owns."""
    problems: list[tuple[str, str]] = []
    for index, node in enumerate(tasks):
        here = f"{path}[{index}]"
        problems += _task_problems(node, here, registry)
        ref = node.task_reference_name
        if ref in seen:
            problems.append(
                (f"{here}.taskReferenceName", f"duplicate taskReferenceName {ref!r} (also at {seen[ref]})")
            )
        seen.setdefault(ref, here)
        problems += _join_problems(tasks, index, here)
        for key, children in node.decision_cases.items():
            problems += _list_problems(children, f"{here}.decisionCases.{key}", registry, seen)
        problems += _list_problems(node.default_case, f"{here}.defaultCase", registry, seen)
        for branch_index, branch in enumerate(node.fork_tasks):
            problems += _list_problems(branch, f"{here}.forkTasks[{branch_index}]", registry, seen)
        problems += _list_problems(node.loop_over, f"{here}.loopOver", registry, seen)
    return problems


def _refs_below(node: WorkflowTask) -> set[str]:
    found: set[str] = set()
    for child in [*node.default_case, *node.loop_over]:
        found |= {child.task_reference_name, *_refs_below(child)}
    for children in [*node.decision_cases.values(), *node.fork_tasks]:
        for child in children:
            found |= {child.task_reference_name, *_refs_below(child)}
    return found


def _join_problems(tasks: list[WorkflowTask], index: int, path: str) -> list[tuple[str, str]]:
    """A fork must be followed by its JOIN, and a JOIN after a static fork may only name tasks of
    that fork (Conductor fails such a workflow when it runs; Cairn refuses it up front)."""
    node = tasks[index]
    following = tasks[index + 1] if index + 1 < len(tasks) else None
    if node.type in ("FORK_JOIN", "FORK_JOIN_DYNAMIC") and (following is None or following.type != "JOIN"):
        return [(path, f"a {node.type} must be followed by a JOIN in the same list")]
    if node.type != "JOIN":
        return []
    fork = tasks[index - 1] if index > 0 else None
    if fork is None or fork.type not in ("FORK_JOIN", "FORK_JOIN_DYNAMIC"):
        return [(path, "a JOIN must follow a FORK_JOIN or FORK_JOIN_DYNAMIC")]
    if fork.type == "FORK_JOIN":
        inside = _refs_below(fork)
        return [
            (f"{path}.joinOn[{i}]", f"{ref!r} is not a task of the fork {fork.task_reference_name!r}")
            for i, ref in enumerate(node.join_on)
            if ref not in inside
        ]
    return []


def validate_workflow_def(definition: WorkflowDef, registry: TaskTypeRegistry = REGISTRY) -> None:
    """Raise DefinitionError listing every problem of an already-parsed definition."""
    problems: list[tuple[str, str]] = []
    checks: list[tuple[str, bool]] = [
        ("workflowStatusListenerEnabled", definition.workflow_status_listener_enabled),
        ("inputTemplate", bool(definition.input_template)),
        ("enforceSchema", definition.enforce_schema),
        ("rateLimitConfig", definition.rate_limit_config is not None),
    ]
    problems += [(name, _NOT_YET) for name, used in checks if used]
    problems += _list_problems(definition.tasks, "tasks", registry, {})
    if problems:
        raise DefinitionError(problems, f"workflow definition {definition.name!r}")
