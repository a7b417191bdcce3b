"""ORCHESTRATOR: one turn of a code workflow (shared/core/code), run by its app's runtime.

Like a worker task it is dispatched, claimed by an HTTP poller or consumed from its topic, and
handed out again when it is lost; its result is the turn's actions. It never appears in a JSON
definition: it is not one of Conductor's types, so validation refuses it there.
"""

from __future__ import annotations

from shared.core.refs import Scope
from shared.core.tasktypes.base import BaseTaskType, Engine
from shared.models.definitions import WorkflowTask
from shared.models.history import ORCHESTRATOR
from shared.models.runtime import TaskState


class OrchestratorTurnTask(BaseTaskType):
    """A turn: dispatched with its work item by shared/core/code/turns.py."""

    name = ORCHESTRATOR
    retriable = False
    worker_executed = True

    def start(self, engine: Engine, node: WorkflowTask, task: TaskState, scope: Scope) -> None:
        return None  # dispatched by shared/core/code/turns.py with its work item
