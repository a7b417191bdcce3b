"""A pure stand-in for the decider around `decide`, for tests of lifecycle operations: it keeps
the state, the task records the decisions wrote, and hands `decide` the history or the latest
definition when a decision asks for them, as services/decider/handler.py does."""

from __future__ import annotations

import itertools
from typing import Any

from shared.core import decide, new_workflow_state
from shared.core.decide import Decision
from shared.core.refs import node_ref
from shared.models.definitions import WorkflowDef
from shared.models.messages import DeciderInbound, StartWorkflow, TaskMessage, TaskResult
from shared.models.runtime import TaskState, TaskStatus, WorkflowState

NOW = 1_700_000_000_000


class Harness:
    def __init__(
        self, definition: WorkflowDef, input_: dict[str, Any] | None = None, wf_id: str = "wf-1"
    ) -> None:
        self.definition = definition
        self.latest: WorkflowDef | None = None
        self.now = NOW
        self.records: dict[str, TaskState] = {}
        self.outbox: list[Any] = []
        self._ids = itertools.count(1)
        start = StartWorkflow(id="m-start", workflow_id=wf_id, name=definition.name, input=input_ or {})
        self.state: WorkflowState = new_workflow_state(definition, start, NOW)
        self.last = self.send(start)

    def send(self, *events: DeciderInbound) -> Decision:
        self.now += 1000
        history: list[TaskState] | None = None
        latest = None
        task_defs: dict[str, Any] = {}
        for _ in range(4):
            decision = decide(
                self.definition,
                self.state,
                list(events),
                self.now,
                history=history,
                latest=latest,
                task_defs=task_defs,
            )
            if decision.needs_task_defs:  # tasks named at run time: no TaskDefs registered
                task_defs.update({name: None for name in decision.needs_task_defs})
            elif decision.needs_history:
                history = list(self.records.values())
            elif decision.needs_latest_definition:
                latest = (self.latest, "" if self.latest else "not registered")
            else:
                break
        self.state = decision.state
        if decision.snapshot is not None:
            self.definition = decision.snapshot
        for task in decision.tasks:
            if task.status.is_terminal:
                self.records[task.task_id] = task.model_copy()
        self.outbox.extend(decision.outbox)
        self.last = decision
        return decision

    def task(self, ref: str) -> TaskState:
        return self.state.tasks[node_ref(ref)]

    def finish(self, ref: str, status: TaskStatus = TaskStatus.COMPLETED, **output: Any) -> Decision:
        task = self.task(ref)
        assert task.reference_task_name == ref, f"{ref} is not current: {task.reference_task_name}"
        return self.send(
            TaskResult(
                id=f"r-{next(self._ids)}",
                workflow_instance_id=self.state.workflow_id,
                task_id=task.task_id,
                status=status,
                output_data=output,
            )
        )

    def dispatched(self) -> list[str]:
        """References handed to workers by the last decision."""
        return [m.reference_task_name for m in self.last.outbox if isinstance(m, TaskMessage)]

    def visible(self) -> list[TaskState]:
        """This run's executions, as the api lists them (records under the document's)."""
        merged = {t.task_id: t for t in self.records.values() if not self.state.is_superseded(t.seq)}
        merged.update({t.task_id: t for t in self.state.tasks.values()})
        return sorted(merged.values(), key=lambda t: t.seq)

    def command_id(self) -> str:
        return f"op-{next(self._ids)}"
