"""One module per task type behind a registry, like Conductor's TaskMapper per type.

A task type decides what scheduling a task execution means (dispatch it to workers, or wait for
a signal) and whether external signals may complete it. Registering a type twice, or asking for a
type nobody registered, fails loudly.
"""

from __future__ import annotations

from shared.core.tasktypes.base import ScheduleContext, TaskType, UnknownTaskTypeError
from shared.core.tasktypes.simple import SimpleTask
from shared.core.tasktypes.wait import WaitTask


class TaskTypeRegistry:
    def __init__(self) -> None:
        self._types: dict[str, TaskType] = {}

    def register(self, task_type: TaskType) -> None:
        if task_type.name in self._types:
            raise ValueError(f"task type {task_type.name!r} is already registered")
        self._types[task_type.name] = task_type

    def get(self, name: str) -> TaskType:
        try:
            return self._types[name]
        except KeyError:
            raise UnknownTaskTypeError(name) from None

    def supports(self, name: str) -> bool:
        return name in self._types

    def names(self) -> list[str]:
        return sorted(self._types)


def default_registry() -> TaskTypeRegistry:
    registry = TaskTypeRegistry()
    registry.register(SimpleTask())
    registry.register(WaitTask())
    return registry


REGISTRY = default_registry()

__all__ = ["REGISTRY", "ScheduleContext", "TaskType", "TaskTypeRegistry", "UnknownTaskTypeError"]
