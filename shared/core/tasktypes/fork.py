"""FORK_JOIN: run several branches side by side; the JOIN after it waits for them.

Conductor's record is a FORK (taskType "FORK"), COMPLETED when created, together with the first
task of every branch and the JOIN that follows (IN_PROGRESS) — so the JOIN's place in the task
list comes before the branches' later tasks. The fork never cancels a branch itself: a branch
task that fails for good fails the workflow, and that cancels the rest.
"""

from __future__ import annotations

from shared.core.refs import Scope
from shared.core.tasktypes.base import BaseTaskType, Engine, Problems
from shared.models.definitions import WorkflowTask
from shared.models.runtime import TaskState

FORK_TYPES = ("FORK_JOIN", "FORK_JOIN_DYNAMIC")


def start_join(engine: Engine, join: WorkflowTask | None, scope: Scope) -> None:
    """The JOIN after a fork is created with it, as Conductor's fork mappers do."""
    if join is not None and join.type == "JOIN" and engine.current(join.task_reference_name, scope) is None:
        engine.walk_list([join], scope)


class ForkJoinTask(BaseTaskType):
    name = "FORK_JOIN"
    retriable = False
    server_side = True

    def start(self, engine: Engine, node: WorkflowTask, task: TaskState, scope: Scope) -> None:
        task.task_type = task.task_def_name = "FORK"
        engine.complete(task)
        for branch in node.fork_tasks:
            engine.walk_list(branch, scope)
        start_join(engine, engine.next_sibling(node.task_reference_name), scope)

    def advance(self, engine: Engine, node: WorkflowTask, task: TaskState, scope: Scope) -> bool:
        # A decision that stopped at its budget inside start() may not have created the JOIN
        # yet: it comes before the branches' later tasks, as in Conductor.
        start_join(engine, engine.next_sibling(node.task_reference_name), scope)
        for branch in node.fork_tasks:
            engine.walk_list(branch, scope)
        return True

    def problems(self, node: WorkflowTask, path: str) -> Problems:
        found: Problems = []
        if not node.fork_tasks:
            found.append((f"{path}.forkTasks", "a FORK_JOIN needs at least one branch"))
        for index, branch in enumerate(node.fork_tasks):
            if not branch:
                found.append((f"{path}.forkTasks[{index}]", "an empty branch cannot run"))
        return found
