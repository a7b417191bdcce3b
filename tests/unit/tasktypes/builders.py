"""Builders for the per-operator tests: definitions from Conductor JSON dicts (validated the way a
registration is), and a `Flow` that starts an execution and feeds it events, decision after
decision, keeping every task record a decision wrote (loop iterations leave the document)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from shared.core import decide, new_workflow_state
from shared.core.decide import Decision
from shared.core.run import DEFAULT_LIMITS, Limits
from shared.core.scripting import InProcessSandbox, ScriptLimits
from shared.core.validation import parse_workflow_def
from shared.models.definitions import TaskDef, WorkflowDef
from shared.models.messages import (
    DecideRequest,
    DeciderInbound,
    OutboxMessage,
    Signal,
    StartWorkflow,
    SubWorkflowEnded,
    TaskMessage,
    TaskResult,
    TerminateWorkflow,
    TimerFired,
    TimerRequest,
    WorkflowEvent,
)
from shared.models.runtime import TaskState, TaskStatus, WorkflowState

NOW = 1_700_000_000_000
WF_ID = "wf-1"
SANDBOX = InProcessSandbox(ScriptLimits(timeout_ms=300))
"""Small script limits keep a runaway script's test short."""

M = TypeVar("M")


# ---- definitions ---------------------------------------------------------------------------


def workflow(*tasks: dict[str, Any], **fields: Any) -> WorkflowDef:
    """A WorkflowDef parsed and validated from Conductor JSON, as registration does."""
    return parse_workflow_def({"name": "w", "version": 1, "tasks": list(tasks), **fields})


def simple(ref: str, name: str | None = None, **fields: Any) -> dict[str, Any]:
    """A SIMPLE task with an inline TaskDef: `retries` retries (0 by default), no retry delay."""
    retries = fields.pop("retries", 0)
    return {
        "name": name or ref,
        "taskReferenceName": ref,
        "type": "SIMPLE",
        "taskDefinition": {"name": name or ref, "retryCount": retries, "retryDelaySeconds": 0},
        **fields,
    }


def task(type_: str, ref: str, **fields: Any) -> dict[str, Any]:
    """A task of any type, named after its reference."""
    return {"name": ref, "taskReferenceName": ref, "type": type_, **fields}


def inline(ref: str, expression: str, **inputs: Any) -> dict[str, Any]:
    return task(
        "INLINE", ref, inputParameters={"evaluatorType": "javascript", "expression": expression, **inputs}
    )


def switch(
    ref: str,
    expression: str,
    cases: dict[str, list[dict[str, Any]]],
    default: list[dict[str, Any]] | None = None,
    evaluator: str = "value-param",
    **inputs: Any,
) -> dict[str, Any]:
    return task(
        "SWITCH",
        ref,
        evaluatorType=evaluator,
        expression=expression,
        inputParameters=inputs,
        decisionCases=cases,
        defaultCase=default or [],
    )


def fork(ref: str, *branches: list[dict[str, Any]]) -> dict[str, Any]:
    return task("FORK_JOIN", ref, forkTasks=list(branches))


def join(ref: str, *join_on: str) -> dict[str, Any]:
    return task("JOIN", ref, joinOn=list(join_on))


def do_while(ref: str, condition: str, *body: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return task("DO_WHILE", ref, loopCondition=condition, loopOver=list(body), **fields)


# ---- running -------------------------------------------------------------------------------


class Flow:
    """One execution driven through `decide`, one decision per call."""

    def __init__(
        self,
        definition: WorkflowDef,
        input_: Mapping[str, Any] | None = None,
        *,
        wf_id: str = WF_ID,
        now: int = NOW,
        sandbox: InProcessSandbox = SANDBOX,
        limits: Limits = DEFAULT_LIMITS,
        task_defs: Mapping[str, TaskDef | None] | None = None,
        correlation_id: str | None = None,
        parent: tuple[str, str] | None = None,
        state: WorkflowState | None = None,
    ) -> None:
        self.definition = definition
        self.now = now
        self.sandbox = sandbox
        self.limits = limits
        self.task_defs: dict[str, TaskDef | None] = dict(task_defs or {})
        self.records: dict[str, TaskState] = {}
        self.decisions: list[Decision] = []
        self.start_message = StartWorkflow(
            id=f"start-{wf_id}",
            workflow_id=wf_id,
            name=definition.name,
            input=dict(input_ or {}),
            correlation_id=correlation_id,
            parent_workflow_id=parent[0] if parent else None,
            parent_workflow_task_id=parent[1] if parent else None,
        )
        self.state = state or new_workflow_state(definition, self.start_message, now)
        self.decision = self.send(self.start_message)

    # ---- deciding ----

    def decide(self, *events: DeciderInbound, at: int | None = None) -> Decision:
        """One decision on the current state, without keeping it (for idempotency checks)."""
        return decide(
            self.definition,
            self.state,
            list(events),
            self.now if at is None else at,
            limits=self.limits,
            task_defs=self.task_defs,
            sandbox=self.sandbox,
        )

    def send(self, *events: DeciderInbound, at: int | None = None) -> Decision:
        if at is not None:
            self.now = at
        decision = self.decide(*events)
        self.decisions.append(decision)
        self.decision = decision
        if not decision.needs_task_defs:
            self.state = decision.state
            for record in decision.tasks:
                self.records[record.task_id] = record.model_copy(deep=True)
        return decision

    def complete(self, ref: str, output: Mapping[str, Any] | None = None, **kw: Any) -> Decision:
        return self.send(self.result(ref, TaskStatus.COMPLETED, output, **kw))

    def fail(self, ref: str, reason: str = "boom", status: TaskStatus = TaskStatus.FAILED) -> Decision:
        return self.send(self.result(ref, status, reason_for_incompletion=reason))

    def result(
        self,
        ref: str,
        status: TaskStatus = TaskStatus.COMPLETED,
        output: Mapping[str, Any] | None = None,
        **kw: Any,
    ) -> TaskResult:
        current = self.task(ref)
        return TaskResult(
            id=f"r-{current.task_id}-{status}-{len(self.decisions)}",
            workflow_instance_id=self.state.workflow_id,
            task_id=current.task_id,
            status=status,
            output_data=dict(output or {}),
            **kw,
        )

    def signal(
        self, ref: str, output: Mapping[str, Any] | None = None, status: TaskStatus = TaskStatus.COMPLETED
    ) -> Decision:
        return self.send(
            Signal(
                id=f"s-{ref}-{len(self.decisions)}",
                workflow_id=self.state.workflow_id,
                task_ref_name=ref,
                status=status,
                output=dict(output or {}),
            )
        )

    def terminate(self, reason: str | None = None) -> Decision:
        return self.send(
            TerminateWorkflow(
                id=f"k-{len(self.decisions)}", workflow_id=self.state.workflow_id, reason=reason
            )
        )

    def child_ended(
        self, ref: str, status: str, output: Mapping[str, Any] | None = None, reason: str | None = None
    ) -> Decision:
        current = self.task(ref)
        assert current.sub_workflow_id is not None
        return self.send(
            SubWorkflowEnded(
                id=f"ended-{current.sub_workflow_id}",
                workflow_id=self.state.workflow_id,
                task_id=current.task_id,
                sub_workflow_id=current.sub_workflow_id,
                status=status,
                output=dict(output or {}),
                reason=reason,
            )
        )

    def fire(self, timer_id: str, at: int | None = None) -> Decision:
        return self.send(
            TimerFired(id=f"f-{timer_id}", workflow_id=self.state.workflow_id, timer_id=timer_id), at=at
        )

    def look(self, at: int | None = None) -> Decision:
        return self.send(
            DecideRequest(id=f"look-{len(self.decisions)}", workflow_id=self.state.workflow_id), at=at
        )

    # ---- reading ----

    def task(self, ref: str) -> TaskState:
        """The current execution of node `ref` (the document keys executions by node ref)."""
        return self.state.tasks[ref]

    def status(self, ref: str) -> TaskStatus:
        return self.state.tasks[ref].status

    def scheduled(self) -> list[str]:
        """Node refs of worker tasks waiting for a worker (SCHEDULED, no timer pending)."""
        return sorted(
            (
                ref
                for ref, t in self.state.tasks.items()
                if t.status is TaskStatus.SCHEDULED and t.kind in WORKER_KINDS
            ),
            key=lambda ref: self.state.tasks[ref].seq,
        )

    def history(self) -> list[TaskState]:
        """Every task record written so far (the latest version of each), in seq order."""
        return sorted(self.records.values(), key=lambda t: t.seq)

    def order(self) -> list[str]:
        """Execution references of every record, in creation (seq) order."""
        return [t.reference_task_name for t in self.history()]

    def record(self, execution_ref: str, retry_count: int = 0) -> TaskState:
        [found] = [
            t
            for t in self.records.values()
            if t.reference_task_name == execution_ref and t.retry_count == retry_count
        ]
        return found

    def outbox(self, kind: type[M], decision: Decision | None = None) -> list[M]:
        return of_type((decision or self.decision).outbox, kind)

    def dispatched(self, decision: Decision | None = None) -> list[str]:
        """Reference names of the task messages the last (or given) decision published."""
        return [m.reference_task_name for m in self.outbox(TaskMessage, decision)]

    def events(self, decision: Decision | None = None) -> list[str]:
        return [m.event for m in self.outbox(WorkflowEvent, decision)]


WORKER_KINDS = frozenset(
    {"SIMPLE", "HTTP", "EVENT", "LLM_CHAT_COMPLETE", "LLM_TEXT_COMPLETE", "LIST_MCP_TOOLS", "CALL_MCP_TOOL"}
)


def of_type(messages: Sequence[OutboxMessage], kind: type[M]) -> list[M]:
    return [m for m in messages if isinstance(m, kind)]


def timer_arms(decision: Decision) -> list[TimerRequest]:
    return [m for m in decision.outbox if isinstance(m, TimerRequest) and m.action == "arm"]


def noop(ref: str) -> dict[str, Any]:
    return task("NOOP", ref)


def chat(ref: str = "chat", message: str = "go", **inputs: Any) -> dict[str, Any]:
    """An LLM_CHAT_COMPLETE of gpt-4o-mini on the `openai` integration."""
    return task(
        "LLM_CHAT_COMPLETE",
        ref,
        inputParameters={
            "llmProvider": "openai",
            "model": "gpt-4o-mini",
            "messages": [{"role": "user", "message": message}],
            **inputs,
        },
    )
