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

from shared.core.tasktypes import REGISTRY, TaskTypeRegistry
from shared.core.waits import WaitSpecError, wait_ends_at
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


def _task_problems(node: WorkflowTask, path: str, registry: TaskTypeRegistry) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    if node.type not in CONDUCTOR_TASK_TYPES:
        problems.append((f"{path}.type", f"unknown task type {node.type!r}"))
    elif not registry.supports(node.type):
        supported = ", ".join(registry.names())
        problems.append(
            (
                f"{path}.type",
                f"task type {node.type!r} is not supported by Cairn yet (supported: {supported})",
            )
        )
    if node.type == "SIMPLE" and not re.match(TASK_NAME_PATTERN, node.name):
        problems.append((f"{path}.name", _NAME_RULE))
    checks: list[tuple[str, bool]] = [
        ("startDelay", node.start_delay != 0),
        ("asyncComplete", node.async_complete),
        ("rateLimited", bool(node.rate_limited)),
        ("cacheConfig", node.cache_config is not None),
        ("onStateChange", bool(node.on_state_change)),
        ("sink", node.sink is not None),
    ]
    problems += [(f"{path}.{name}", _NOT_YET) for name, used in checks if used]
    if node.type == "WAIT":
        problems += _wait_problems(node, path)
    if node.task_definition is not None:
        problems += task_def_problems(node.task_definition, f"{path}.taskDefinition.")
    return problems


def _wait_problems(node: WorkflowTask, path: str) -> list[tuple[str, str]]:
    """A literal duration/until must be readable now; an expression is checked when it runs."""
    given = {k: v for k, v in node.input_parameters.items() if k in ("duration", "until")}
    if len(given) == 2:
        return [(f"{path}.inputParameters", "a WAIT takes either duration or until, not both")]
    literal = {k: v for k, v in given.items() if not (isinstance(v, str) and "${" in v)}
    try:
        wait_ends_at(literal, 0)
    except WaitSpecError as error:
        return [(f"{path}.inputParameters.{next(iter(literal))}", str(error))]
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
    seen: dict[str, str] = {}
    for index, node in enumerate(definition.tasks):
        path = f"tasks[{index}]"
        problems += _task_problems(node, path, registry)
        ref = node.task_reference_name
        if ref in seen:
            problems.append(
                (f"{path}.taskReferenceName", f"duplicate taskReferenceName {ref!r} (also at {seen[ref]})")
            )
        seen.setdefault(ref, path)
        if ref == "workflow":
            problems.append((f"{path}.taskReferenceName", "'workflow' is reserved for ${workflow...}"))
    if problems:
        raise DefinitionError(problems, f"workflow definition {definition.name!r}")
