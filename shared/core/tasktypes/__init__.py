"""One module per task type behind a registry, like Conductor's TaskMapper per type.

A task type decides what starting an execution means, how it drives the lists it owns and
whether external signals may complete it (base.py has the contract). Registering a type twice,
or asking for a type nobody registered, fails loudly.
"""

from __future__ import annotations

from shared.core.tasktypes.ai import (
    CallMcpToolTask,
    ListMcpToolsTask,
    LlmChatCompleteTask,
    LlmTextCompleteTask,
)
from shared.core.tasktypes.base import BaseTaskType, Engine, TaskType, UnknownTaskTypeError
from shared.core.tasktypes.do_while import DoWhileTask
from shared.core.tasktypes.dynamic import DynamicTask
from shared.core.tasktypes.fork import ForkJoinTask
from shared.core.tasktypes.fork_dynamic import ForkJoinDynamicTask
from shared.core.tasktypes.inline import InlineTask
from shared.core.tasktypes.join import ExclusiveJoinTask, JoinTask
from shared.core.tasktypes.json_jq import JsonJqTransformTask
from shared.core.tasktypes.noop import NoopTask
from shared.core.tasktypes.orchestrator import OrchestratorTurnTask
from shared.core.tasktypes.set_variable import SetVariableTask
from shared.core.tasktypes.simple import SimpleTask
from shared.core.tasktypes.subworkflow import StartWorkflowTask, SubWorkflowTask
from shared.core.tasktypes.switch import DecisionTask, SwitchTask
from shared.core.tasktypes.system import EventTask, HttpTask
from shared.core.tasktypes.terminate import TerminateTask
from shared.core.tasktypes.wait import HumanTask, WaitTask


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
    for task_type in (
        SimpleTask(),
        WaitTask(),
        HumanTask(),
        SwitchTask(),
        DecisionTask(),
        DoWhileTask(),
        ForkJoinTask(),
        ForkJoinDynamicTask(),
        JoinTask(),
        ExclusiveJoinTask(),
        SubWorkflowTask(),
        StartWorkflowTask(),
        SetVariableTask(),
        TerminateTask(),
        InlineTask(),
        JsonJqTransformTask(),
        NoopTask(),
        DynamicTask(),
        HttpTask(),
        EventTask(),
        OrchestratorTurnTask(),
        LlmChatCompleteTask(),
        LlmTextCompleteTask(),
        ListMcpToolsTask(),
        CallMcpToolTask(),
    ):
        registry.register(task_type)
    return registry


REGISTRY = default_registry()

__all__ = ["REGISTRY", "BaseTaskType", "Engine", "TaskType", "TaskTypeRegistry", "UnknownTaskTypeError"]
