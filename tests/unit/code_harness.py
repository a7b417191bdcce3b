"""A pure stand-in for the decider around the code engine: it keeps the state, the history the
decisions appended, the task records and the outbox, and fills a turn's `pastEvents` from the
history the way services/decider/code_turns.py does when it publishes a turn."""

from __future__ import annotations

import itertools
from typing import Any

from shared.core import new_workflow_state
from shared.core.code.engine import decide_code
from shared.core.code.run import code_definition
from shared.core.decide import Decision
from shared.models.definitions import TaskDef
from shared.models.history import ORCHESTRATIONS
from shared.models.messages import DeciderInbound, OutboxMessage, StartWorkflow, TaskMessage, TaskResult
from shared.models.runtime import CodeState, TaskState, TaskStatus, WorkflowState

NOW = 1_700_000_000_000


class CodeHarness:
    def __init__(self, name: str = "wf", input_: Any = None, wf_id: str = "code-1", app: str = "app") -> None:
        self.definition = code_definition(name, app)
        self.now = NOW
        self.history: dict[int, list[dict[str, Any]]] = {}
        self.records: dict[str, TaskState] = {}
        self.outbox: list[OutboxMessage] = []
        self.registered: dict[str, TaskDef] = {}
        """TaskDefs "registered in the store", handed to decisions that ask for them."""
        self._ids = itertools.count(1)
        start = StartWorkflow(
            id="m-start", workflow_id=wf_id, name=name, input={"input": input_}, kind="code", app=app
        )
        self.state: WorkflowState = new_workflow_state(self.definition, start, NOW)
        self.state.code = CodeState(app=app)
        self.last = self.send(start)

    def send(self, *events: DeciderInbound, advance_ms: int = 1000) -> Decision:
        self.now += advance_ms
        task_defs: dict[str, TaskDef | None] = {}
        for _ in range(3):  # as the decider does: load the TaskDefs a decision asks for, decide again
            decision = decide_code(self.definition, self.state, list(events), self.now, task_defs=task_defs)
            if not decision.needs_task_defs:
                break
            task_defs.update({name: self.registered.get(name) for name in decision.needs_task_defs})
        for generation, first, chunk in decision.history:
            stored = self.history.setdefault(generation, [])
            assert first == len(stored), f"chunk at {first} appended to a history of {len(stored)}"
            stored.extend(chunk)
        self.state = decision.state
        for task in decision.tasks:
            if task.status.is_terminal:
                self.records[task.task_id] = task
        self.outbox.extend(decision.outbox)
        self.last = decision
        return decision

    def next_id(self) -> str:
        return f"m-{next(self._ids)}"

    # ---- what the runtime sees --------------------------------------------------------------

    def dispatched(self) -> list[TaskMessage]:
        return [m for m in self.last.outbox if isinstance(m, TaskMessage)]

    def turn(self) -> dict[str, Any]:
        """The work item of the turn in flight, as the runtime receives it."""
        task = self.state.tasks["orchestrator"]
        assert not task.status.is_terminal, "no turn in flight"
        item = dict(task.input_data)
        item["pastEvents"] = self.history.get(item["generation"], [])[: item["historyLength"]]
        return item

    def turn_task(self) -> TaskState:
        return self.state.tasks["orchestrator"]

    def answer(self, *actions: dict[str, Any], **fields: Any) -> Decision:
        """Answer the turn in flight with these actions (and customStatus, version, stall)."""
        turn = self.turn()
        output = {"turn": turn["turn"], "actions": list(actions), **fields}
        return self.send(self.result(self.turn_task(), TaskStatus.COMPLETED, output))

    def result(self, task: TaskState, status: TaskStatus, output: dict[str, Any]) -> TaskResult:
        return TaskResult(
            id=self.next_id(),
            workflow_instance_id=self.state.workflow_id,
            task_id=task.task_id,
            status=status,
            output_data=output,
        )

    def activity(self, ref: str) -> TaskState:
        return self.state.tasks[ref]

    def complete(self, ref: str, result: Any) -> Decision:
        return self.send(self.result(self.activity(ref), TaskStatus.COMPLETED, {"result": result}))

    def fail(self, ref: str, reason: str, **output: Any) -> Decision:
        task = self.activity(ref)
        return self.send(
            TaskResult(
                id=self.next_id(),
                workflow_instance_id=self.state.workflow_id,
                task_id=task.task_id,
                status=TaskStatus.FAILED,
                reason_for_incompletion=reason,
                output_data=output,
            )
        )

    def events_of(self, generation: int = 0) -> list[str]:
        return [event["type"] for event in self.history.get(generation, [])]


def is_turn(message: OutboxMessage) -> bool:
    return isinstance(message, TaskMessage) and message.task_type.startswith(ORCHESTRATIONS)
