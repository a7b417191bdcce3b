"""The contract every task type module implements, and the engine facade it works through.

A task type owns what is particular to it: what starting an execution means (dispatch it to
workers, arm a timer, evaluate a script and finish at once, start a child workflow), how it
drives the lists it owns (a SWITCH's chosen case, a fork's branches, a loop's body), whether the
list around it may move past it, what a failed child means to it, and what it must undo when
it is cancelled. Everything common (creating executions, retries, timeouts, the outbox, ending
the workflow) lives in the engine, so adding an operator is one module and one registry line.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from shared.core.budget import BudgetKeeper
from shared.core.refs import Scope
from shared.models.definitions import TaskDef, WorkflowTask
from shared.models.messages import OutboxMessage
from shared.models.runtime import PendingTimer, TaskState, TaskStatus, WorkflowState, WorkflowStatus

Problems = list[tuple[str, str]]

SYSTEM_TASK_DEFAULT = TaskDef(name="system_task_default", retry_count=0)
"""Conductor's policy for a system task without a TaskDef: no retries (a SIMPLE task without
one gets TaskDef's own defaults: 3 retries, FIXED, 60 s)."""


class UnknownTaskTypeError(KeyError):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name

    def __str__(self) -> str:
        return f"task type {self.name!r} is not registered"


class Engine(Protocol):
    """What a task type may use of the decision in progress (shared.core.run.DecisionRun)."""

    now: int
    state: WorkflowState
    budget: BudgetKeeper
    """The run's budget and what it spent (shared/core/budget.py)."""

    def stop_for_budget(self, reason: str) -> None:
        """End the workflow FAILED: a limit of its budget would be passed."""
        ...

    def walk_list(self, tasks: list[WorkflowTask], scope: Scope) -> bool:
        """Start and drive the nodes of one list in order; True once every node is done."""
        ...

    def list_of(self, owner: str, key: str) -> list[WorkflowTask]: ...

    def next_sibling(self, ref: str) -> WorkflowTask | None:
        """The node after `ref` in its list (a fork's JOIN)."""
        ...

    def previous_sibling(self, ref: str) -> WorkflowTask | None:
        """The node before `ref` in its list (a JOIN's fork)."""
        ...

    def current(self, ref: str, scope: Scope) -> TaskState | None:
        """The execution of node `ref` in `scope`, if one was started."""
        ...

    def complete(self, task: TaskState, output: Mapping[str, Any] | None = None) -> None:
        """Finish an execution COMPLETED (merging `output` into its output)."""
        ...

    def fail(self, task: TaskState, status: TaskStatus, reason: str) -> None:
        """Finish an execution unsuccessfully: retried, tolerated (optional) or failing upwards."""
        ...

    def finish(self, task: TaskState, status: TaskStatus, reason: str | None = None) -> None:
        """Set a terminal status without any failure handling (cancelled, skipped)."""
        ...

    def end_workflow(self, status: WorkflowStatus, reason: str | None) -> None:
        """End the workflow now (TERMINATE): cancel what is live, tell whom it concerns."""
        ...

    def reject(self, code: str, message: str) -> None:
        """An event the state machine did not accept (logged and counted by the decider)."""
        ...

    def touch(self, task: TaskState) -> None:
        """Record that an execution changed (it is written as a task record)."""
        ...

    def publish(self, message: OutboxMessage) -> None: ...

    def arm_timer(self, timer: PendingTimer) -> None: ...

    def evaluate(self, parameters: Mapping[str, Any]) -> dict[str, Any]:
        """Conductor's parameter expressions over the workflow and its executions."""
        ...

    def javascript(self, script: str, bindings: Mapping[str, Any], seed: str) -> Any:
        """Run a script in the sandbox with `$` bound; raises ScriptError."""
        ...

    def jq(self, query: str, data: Any) -> list[Any]:
        """Run a jq program; raises ScriptError."""
        ...

    def task_def_of(self, task: TaskState) -> TaskDef:
        """The policy an execution runs under (its TaskDef, or Conductor's default)."""
        ...

    def task_def(self, name: str) -> TaskDef | None:
        """A registered TaskDef by name, for tasks named at run time (DYNAMIC, dynamic forks);
        None when no such TaskDef is registered."""
        ...

    def add_dynamic_node(self, node: WorkflowTask, parent: str, branch: int) -> None: ...

    def dynamic_refs(self, fork_ref: str) -> list[str]:
        """The references a dynamic fork made, in branch order."""
        ...

    def dynamic_node(self, ref: str) -> WorkflowTask: ...

    def dynamic_parent(self, ref: str) -> str | None: ...

    def definition_refs(self) -> set[str]:
        """Every reference name the definition uses, at any depth."""
        ...

    def supports(self, task_type: str) -> bool: ...

    def parent_ref(self, ref: str) -> str | None:
        """The operator owning the list node `ref` sits in (None at the root)."""
        ...

    def loop_body_refs(self, loop_ref: str) -> list[str]:
        """The node references below a DO_WHILE (dynamic ones included)."""
        ...

    def forget_below(self, owner: str) -> None:
        """Drop the finished executions under `owner` from the document (a loop's next
        iteration); they live on in task records."""
        ...

    def node_of(self, task: TaskState) -> WorkflowTask:
        """The node an execution runs (the definition's, or one made at run time)."""
        ...

    def cancel_below(self, owner: str, reason: str) -> None:
        """Cancel every live execution under operator `owner` (a loop body between iterations,
        the branches a JOIN no longer waits for)."""
        ...


class TaskType(Protocol):
    name: str
    accepts_signals: bool
    """True when an external signal (WAIT, HUMAN) completes the task rather than a worker."""
    retriable: bool
    """False for tasks whose failure is not the kind a retry can fix (control flow, signals)."""
    worker_executed: bool
    """True when a worker (an external one, or Cairn's system-task worker) runs the task, so a
    worker that falls silent for the TaskDef's responseTimeoutSeconds times the execution out."""
    server_side: bool
    """True when the task runs inside the decision; each one counts against the step budget."""

    def start(self, engine: Engine, node: WorkflowTask, task: TaskState, scope: Scope) -> None:
        """Put a freshly created execution in motion; it may finish at once."""
        ...

    def advance(self, engine: Engine, node: WorkflowTask, task: TaskState, scope: Scope) -> bool:
        """Drive what the execution owns; True when the list around it may move past it."""
        ...

    def on_child_failed(self, engine: Engine, node: WorkflowTask, task: TaskState, child: TaskState) -> bool:
        """A permissive child failed for good (no retry left). True: this operator has dealt
        with it (a DO_WHILE fails); False: ask the operator above. A fork's JOIN judges such
        failures when it looks at its tasks, so forks need nothing here."""
        ...

    def on_cancel(self, engine: Engine, node: WorkflowTask, task: TaskState) -> None:
        """The execution was cancelled; undo what lives outside the workflow (a child run)."""
        ...

    def problems(self, node: WorkflowTask, path: str) -> Problems:
        """What makes this node impossible to run, with field paths (checked at registration)."""
        ...

    def default_task_def(self, name: str) -> TaskDef:
        """The policy of an execution whose node has no TaskDef (none inline, none registered)."""
        ...

    def admit(self, engine: Engine, node: WorkflowTask, task: TaskState) -> bool:
        """May this execution be handed to workers now? Asked before each hand-out (a first
        start, a retry, a delayed retry's timer); when not, it has failed or the workflow has
        ended (an LLM task past the run's budget, a tool not on an allowlist). Idempotent."""
        ...


class BaseTaskType:
    """Defaults for the TaskType protocol: a leaf that waits for events."""

    name = ""
    accepts_signals = False
    retriable = True
    worker_executed = False
    server_side = False

    def start(self, engine: Engine, node: WorkflowTask, task: TaskState, scope: Scope) -> None:
        return None

    def advance(self, engine: Engine, node: WorkflowTask, task: TaskState, scope: Scope) -> bool:
        """A leaf is passed once it succeeded, or failed for good while permissive."""
        return task.status.is_terminal and (task.status.is_successful or node.permissive)

    def on_child_failed(self, engine: Engine, node: WorkflowTask, task: TaskState, child: TaskState) -> bool:
        return False

    def on_cancel(self, engine: Engine, node: WorkflowTask, task: TaskState) -> None:
        return None

    def problems(self, node: WorkflowTask, path: str) -> Problems:
        return []

    def default_task_def(self, name: str) -> TaskDef:
        return SYSTEM_TASK_DEFAULT

    def admit(self, engine: Engine, node: WorkflowTask, task: TaskState) -> bool:
        return True


def from_definition(engine: Engine, node: WorkflowTask) -> bool:
    """True for a node the definition wrote; False for one made at run time from data (a
    dynamic fork's branch), whose inputParameters a model may have chosen."""
    ref = node.task_reference_name
    return ref in engine.definition_refs() and engine.dynamic_parent(ref) is None


def in_progress(engine: Engine, task: TaskState) -> None:
    """Mark an execution started (the common first step of tasks that wait for something)."""
    task.status = TaskStatus.IN_PROGRESS
    task.start_time = task.start_time or engine.now
    task.update_time = engine.now
    engine.touch(task)
