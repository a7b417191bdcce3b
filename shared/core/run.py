"""DecisionRun: the mutable working copy of one decision, and the engine task types work through.

It owns the bookkeeping every task type shares: creating executions (ids, inputs, sequence
numbers), finishing and failing them (retries, optional tasks, failures travelling up the tree),
timers, the outbox, the step budget, and the lookup of a node for an execution. What a task type
does differently lives in its module under shared/core/tasktypes/; how the tree is walked in
shared/core/walk.py; inbound events in shared/core/events.py; timeouts in
shared/core/timeouts.py; the end of the workflow in shared/core/ending.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from shared.core import ids, scripting
from shared.core.budget import BudgetKeeper
from shared.core.context import ExpressionContext
from shared.core.expressions import evaluate_parameters
from shared.core.plan import Plan, plan_of
from shared.core.refs import Scope, execution_ref, node_ref, scope_of
from shared.core.retry import retry_delay_ms
from shared.core.tasktypes import TaskType, TaskTypeRegistry
from shared.models.definitions import TaskDef, WorkflowDef, WorkflowTask
from shared.models.limits import (
    DEFAULT_PAYLOAD_LIMITS,
    MAX_TIME_MS,
    PayloadLimits,
    describe,
    payload_problems,
)
from shared.models.messages import OutboxMessage, TimerRequest
from shared.models.runtime import (
    DynamicNode,
    PendingTimer,
    TaskState,
    TaskStatus,
    WorkflowState,
    WorkflowStatus,
)

TIMER_DISPATCH = "dispatch"
"""A timer that hands a SCHEDULED execution to workers when it fires (retry delay, callback)."""

WORKFLOW_STATUS_FOR_FAILED_TASK = {
    TaskStatus.TIMED_OUT: WorkflowStatus.TIMED_OUT,
    TaskStatus.CANCELED: WorkflowStatus.TERMINATED,
}
"""How a task that failed for good ends its workflow (Conductor's TerminateWorkflowException)."""


@dataclass(frozen=True)
class Limits:
    """What bounds one decision: the server-side steps it may take before it commits and asks
    itself to go on (each script's own limits are the sandbox's), and the size and shape of
    every payload it takes in or builds (a task's input, a task's output)."""

    max_steps: int = 200
    payload: PayloadLimits = DEFAULT_PAYLOAD_LIMITS
    turn_timeout_s: int = 60
    """A code workflow's turn held this long by a silent runtime is handed out again."""


DEFAULT_LIMITS = Limits()


@dataclass(frozen=True)
class Rejection:
    """An event the state machine did not accept: a result for a superseded attempt, a signal
    for no waiting task, a status a worker may not report. Never silent: the decider logs each
    one and counts it by `code` (metric `cairn.decider.rejected`)."""

    code: str
    message: str

    def __str__(self) -> str:
        return self.message


class TaskDefsNeededError(Exception):
    """The decision named a task at run time (DYNAMIC, a dynamic fork) whose TaskDef it was not
    handed; the caller loads these names and decides again."""

    def __init__(self, names: set[str]) -> None:
        super().__init__(", ".join(sorted(names)))
        self.names = names


class LatestDefinitionNeededError(Exception):
    """A restart asked for the latest definitions and the decision was not handed them: the
    caller resolves the latest snapshot of the workflow's name and decides again with it."""


class HistoryNeededError(Exception):
    """A rerun needs the workflow's task records (earlier loop iterations, retried attempts are
    not in the document): the caller loads them and decides again with them."""


LatestSnapshot = tuple[WorkflowDef | None, str]
"""The latest registered definition of a workflow's name, resolved into a snapshot, or (None,
why it cannot run)."""


class DecisionRun:
    """Never escapes `decide`."""

    def __init__(
        self,
        snapshot: WorkflowDef,
        state: WorkflowState,
        now: int,
        registry: TaskTypeRegistry,
        limits: Limits,
        task_defs: Mapping[str, TaskDef | None],
        sandbox: scripting.Sandbox,
        latest: LatestSnapshot | None = None,
        history: Sequence[TaskState] | None = None,
    ) -> None:
        self.snapshot = snapshot
        self.latest = latest
        """Handed in when a restart asked for the latest definitions (else None)."""
        self.history = history
        """The workflow's task records, handed in when a rerun asked for them (else None)."""
        self.new_snapshot: WorkflowDef | None = None
        """Set when an operation switched this execution to another definition snapshot."""
        self.plan: Plan = plan_of(snapshot)
        self.state = state
        self.budget = BudgetKeeper(snapshot.budget, state)
        self.now = now
        self.registry = registry
        self.limits = limits
        self.task_defs = task_defs
        self.sandbox = sandbox
        self.outbox: list[OutboxMessage] = []
        self.changed_tasks: dict[str, TaskState] = {}
        self.notes: list[Rejection] = []
        self.repairs: list[str] = []
        self.dirty = False
        self.steps = 0
        self.out_of_steps = False
        self.progressed = False
        self._by_id: dict[str, str] | None = None

    # ---- bookkeeping -------------------------------------------------------------------------

    def reject(self, code: str, message: str) -> None:
        self.notes.append(Rejection(code, message))

    def switch_snapshot(self, snapshot: WorkflowDef) -> None:
        """Run on another definition from now on (a restart with the latest definitions)."""
        self.snapshot = snapshot
        self.plan = plan_of(snapshot)
        self.budget = BudgetKeeper(snapshot.budget, self.state)
        self.new_snapshot = snapshot
        self.dirty = True

    def forget_index(self) -> None:
        """The executions were replaced wholesale (an operation rebuilt them)."""
        self._by_id = None

    def touch(self, task: TaskState) -> None:
        self.changed_tasks[task.task_id] = task
        self.dirty = True

    def publish(self, message: OutboxMessage) -> None:
        self.outbox.append(message)
        self.dirty = True

    def arm_timer(self, timer: PendingTimer) -> None:
        """Record a pending timer in the state and ask the timer service to arm it (never past
        the last instant the stores hold: a deadline that far away is "never")."""
        if timer.fire_at > MAX_TIME_MS:
            timer = timer.model_copy(update={"fire_at": MAX_TIME_MS})
        self.state.timers[timer.timer_id] = timer
        self.publish(
            TimerRequest(
                id=f"{timer.timer_id}:arm",
                action="arm",
                timer_id=timer.timer_id,
                workflow_id=self.state.workflow_id,
                fire_at=timer.fire_at,
            )
        )

    def cancel_timer(self, timer_id: str) -> None:
        """Forget a pending timer and ask the timer service to cancel it."""
        self.state.timers.pop(timer_id, None)
        self.request_timer_cancel(timer_id)

    def request_timer_cancel(self, timer_id: str) -> None:
        self.publish(
            TimerRequest(
                id=f"{timer_id}:cancel",
                action="cancel",
                timer_id=timer_id,
                workflow_id=self.state.workflow_id,
            )
        )

    def arm_dispatch_timer(self, task: TaskState, why: str, delay_ms: int) -> None:
        timer_id = ids.timer_id(task.task_id, f"{why}-{task.dispatch_count}")
        self.arm_timer(
            PendingTimer(
                timer_id=timer_id, purpose=TIMER_DISPATCH, fire_at=self.now + delay_ms, task_id=task.task_id
            )
        )

    # ---- lookups -----------------------------------------------------------------------------

    def type_of(self, task: TaskState) -> TaskType:
        return self.registry.get(task.kind)

    def node_of(self, task: TaskState) -> WorkflowTask:
        """The node an execution runs: a node made at run time (dynamic fork branch, resolved
        DYNAMIC task), else the definition's."""
        ref = node_ref(task.reference_task_name)
        dynamic = self.state.dynamic_nodes.get(ref)
        if dynamic is not None:
            return dynamic.node
        place = self.plan.place(ref)
        if place is None:
            raise KeyError(f"execution {task.reference_task_name} has no node in the definition")
        return place.node

    def parent_ref(self, ref: str) -> str | None:
        return self.parent_of(ref)

    def parent_of(self, ref: str) -> str | None:
        dynamic = self.state.dynamic_nodes.get(ref)
        if dynamic is not None and self.plan.place(ref) is None:
            return dynamic.parent
        place = self.plan.place(ref)
        return place.parent if place else None

    def live_task(self, task_id: str) -> TaskState | None:
        """The current execution with this id (events name executions by id)."""
        if self._by_id is None:
            self._by_id = {task.task_id: ref for ref, task in self.state.tasks.items()}
        ref = self._by_id.get(task_id)
        task = self.state.tasks.get(ref) if ref is not None else None
        if task is None or task.task_id != task_id:
            self._by_id = None  # executions changed since the index was built
            return next((t for t in self.state.tasks.values() if t.task_id == task_id), None)
        return task

    def current(self, ref: str, scope: Scope) -> TaskState | None:
        task = self.state.tasks.get(ref)
        if task is None or task.reference_task_name != execution_ref(ref, scope):
            return None
        return task

    def list_of(self, owner: str, key: str) -> list[WorkflowTask]:
        return self.plan.list_of(owner, key)

    def next_sibling(self, ref: str) -> WorkflowTask | None:
        return self.plan.next_sibling(ref)

    def previous_sibling(self, ref: str) -> WorkflowTask | None:
        return self.plan.previous_sibling(ref)

    def task_def(self, name: str) -> TaskDef | None:
        if name not in self.task_defs:
            raise TaskDefsNeededError({name})
        return self.task_defs[name]

    def task_def_of(self, task: TaskState) -> TaskDef:
        """The policy an execution runs under: its node's TaskDef (embedded in the snapshot),
        else Conductor's default for its kind."""
        node = self.node_of(task)
        if node.task_definition is not None:
            return node.task_definition
        return self.type_of(task).default_task_def(node.name)

    def definition_refs(self) -> set[str]:
        return set(self.plan.places)

    def dynamic_parent(self, ref: str) -> str | None:
        dynamic = self.state.dynamic_nodes.get(ref)
        return dynamic.parent if dynamic else None

    def dynamic_node(self, ref: str) -> WorkflowTask:
        return self.state.dynamic_nodes[ref].node

    def supports(self, task_type: str) -> bool:
        return self.registry.supports(task_type)

    def loop_body_refs(self, loop_ref: str) -> list[str]:
        """The node references below a DO_WHILE, dynamic ones included, in definition order."""
        below = list(self.plan.descendants.get(loop_ref, ()))
        inside = {*below, loop_ref}
        below += [
            ref for ref, d in self.state.dynamic_nodes.items() if d.parent in inside and ref not in inside
        ]
        return below

    def dynamic_refs(self, fork_ref: str) -> list[str]:
        """The references a dynamic fork made, in branch order."""
        made = [(d.branch, ref) for ref, d in self.state.dynamic_nodes.items() if d.parent == fork_ref]
        return [ref for _, ref in sorted(made)]

    def add_dynamic_node(self, node: WorkflowTask, parent: str, branch: int) -> None:
        self.state.dynamic_nodes[node.task_reference_name] = DynamicNode(
            node=node, parent=parent, branch=branch
        )
        self.dirty = True

    # ---- expressions and scripts -------------------------------------------------------------

    def expression_context(self) -> ExpressionContext:
        return ExpressionContext(self.state, self.plan)

    def evaluate(self, parameters: Mapping[str, Any]) -> dict[str, Any]:
        return evaluate_parameters(parameters, self.expression_context())

    def javascript(self, script: str, bindings: Mapping[str, Any], seed: str) -> Any:
        return self.sandbox.javascript(script, bindings, now_ms=self.now, seed=seed)

    def jq(self, query: str, data: Any) -> list[Any]:
        return self.sandbox.jq(query, data, now_ms=self.now)

    # ---- executions --------------------------------------------------------------------------

    def may_start(self, node: WorkflowTask) -> bool:
        """Within the step budget? Server-side tasks count; past the budget the decision stops
        where it is, commits, and asks itself to go on."""
        if self.out_of_steps:
            return False
        if self.registry.get(node.type).server_side:
            if self.steps >= self.limits.max_steps:
                self.out_of_steps = True
                return False
            self.steps += 1
        return True

    def create(self, node: WorkflowTask, scope: Scope, retry_of: TaskState | None = None) -> TaskState:
        """A new execution of `node` in `scope` (or the next attempt of `retry_of`), current for
        its node from now on."""
        reference = execution_ref(node.task_reference_name, scope)
        retry_count = retry_of.retry_count + 1 if retry_of else 0
        # A retry re-resolves its inputParameters over the failed attempt's input (Conductor).
        evaluated = self.evaluate(node.input_parameters)
        input_data = {**retry_of.input_data, **evaluated} if retry_of else evaluated
        task = TaskState(
            task_id=ids.task_id(self.state.workflow_id, self.state.epoch, reference, retry_count),
            task_type=node.name if node.type == "SIMPLE" else node.type,
            kind=node.type,
            task_def_name=node.name,
            reference_task_name=reference,
            workflow_instance_id=self.state.workflow_id,
            workflow_type=self.state.workflow_name,
            status=TaskStatus.SCHEDULED,
            input_data=input_data,
            retry_count=retry_count,
            retried_task_id=retry_of.task_id if retry_of else None,
            seq=self.state.next_seq,
            iteration=scope[-1] if scope else 0,
            loop_over_task=bool(scope),
            scheduled_time=self.now,
            first_scheduled_time=(retry_of.first_scheduled_time or retry_of.scheduled_time)
            if retry_of
            else self.now,
            update_time=self.now,
        )
        self.state.next_seq += 1
        self.state.tasks[node.task_reference_name] = task
        self.budget.count_task()
        self.touch(task)
        return task

    def start(self, node: WorkflowTask, scope: Scope) -> TaskState | None:
        """Create and start an execution of `node` in `scope`; None when the run's budget
        allows no more executions (the workflow has ended FAILED)."""
        refusal = self.budget.task_refusal()
        if refusal is not None:
            self.stop_for_budget(refusal)
            return None
        skips = self.state.pending_skips
        skip = None
        if skips:  # this very iteration's (`body__3`), else the node's next run (`body`)
            skip = skips.pop(execution_ref(node.task_reference_name, scope), None)
            if skip is None:
                skip = skips.pop(node.task_reference_name, None)
        task = self.create(node, scope)
        if skip is not None:  # an operator skipped it before it ran (shared/core/operations)
            task.input_data = {**task.input_data, **skip.task_input}
            task.output_data = dict(skip.task_output)
            self.finish(task, TaskStatus.SKIPPED)
            return task
        problems = payload_problems(task.input_data, "inputData", self.limits.payload)
        if problems:  # built from outputs and expressions: each may pass and their sum not
            self.fail(task, TaskStatus.FAILED_WITH_TERMINAL_ERROR, describe(problems))
            return task
        self.registry.get(node.type).start(self, node, task, scope)
        return task

    def complete(self, task: TaskState, output: Mapping[str, Any] | None = None) -> None:
        """Complete `task` with `output` merged into its output, unless that is past the payload
        limits: then it fails for good (Conductor's FAILED_WITH_TERMINAL_ERROR for an output over
        its maximum), and nothing of the output is kept."""
        if output:
            merged = {**task.output_data, **output}
            problems = payload_problems(merged, "outputData", self.limits.payload)
            if problems:
                self.fail(task, TaskStatus.FAILED_WITH_TERMINAL_ERROR, describe(problems))
                return
            task.output_data = merged
        self.finish(task, TaskStatus.COMPLETED)

    def finish(self, task: TaskState, status: TaskStatus, reason: str | None = None) -> None:
        self.progressed = True  # a finished execution may let its list (or its JOIN) move on
        task.status = status
        task.reason_for_incompletion = reason
        task.end_time = self.now
        task.update_time = self.now
        if not task.start_time:
            task.start_time = self.now
        self.touch(task)
        for timer in [t for t in self.state.timers.values() if t.task_id == task.task_id]:
            self.cancel_timer(timer.timer_id)  # a callback or timed WAIT that no longer matters

    def fail(self, task: TaskState, status: TaskStatus, reason: str, *, may_retry: bool = True) -> None:
        """Conductor's order: retry while attempts are left; an optional task is tolerated
        (COMPLETED_WITH_ERRORS); a permissive one stays failed while the workflow goes on (its
        JOIN, its DO_WHILE or, at the end, the workflow fails for it); anything else fails the
        workflow at once — TIMED_OUT for a task that timed out, TERMINATED for a cancelled one,
        FAILED otherwise."""
        self.finish(task, status, reason)
        node = self.node_of(task)
        task_def = self.task_def_of(task)
        retries = node.retry_count if node.retry_count is not None else task_def.retry_count
        if may_retry and status.is_retriable and self.type_of(task).retriable and task.retry_count < retries:
            task.retried = True
            self.retry(node, task, task_def)
            return
        if node.optional:
            task.status = TaskStatus.COMPLETED_WITH_ERRORS
            return
        if node.permissive:
            self._tell_ancestors(task)
            return
        from shared.core.ending import workflow_output

        self.state.output = workflow_output(self)  # Conductor's output on failure, too
        self.end_workflow(
            WORKFLOW_STATUS_FOR_FAILED_TASK.get(status, WorkflowStatus.FAILED),
            f"Task {task.task_id} ({task.reference_task_name}) failed with status {status}"
            + (f": {reason}" if reason else ""),
        )

    def stop_for_budget(self, reason: str) -> None:
        """A limit of the run's budget would be passed: the workflow ends FAILED (its
        failureWorkflow runs) before the task that would pass it (shared/core/budget.py)."""
        from shared.core.ending import workflow_output

        self.state.output = workflow_output(self)
        self.end_workflow(WorkflowStatus.FAILED, reason)

    def _tell_ancestors(self, task: TaskState) -> None:
        child = task
        parent_ref = self.parent_of(node_ref(child.reference_task_name))
        while parent_ref is not None and self.state.status is WorkflowStatus.RUNNING:
            parent = self.state.tasks.get(parent_ref)
            if parent is None or self.type_of(parent).on_child_failed(
                self, self.node_of(parent), parent, child
            ):
                return
            child = parent
            parent_ref = self.parent_of(parent_ref)

    def retry(self, node: WorkflowTask, failed: TaskState, task_def: TaskDef) -> None:
        refusal = self.budget.task_refusal()
        if refusal is not None:
            self.stop_for_budget(refusal)
            return
        task = self.create(node, scope_of(failed.reference_task_name), retry_of=failed)
        task.kind = failed.kind
        task.task_type = failed.task_type
        task.task_def_name = failed.task_def_name
        if not self.type_of(task).admit(self, node, task):
            return
        # A worker's FAILED result may ask for a later retry (a provider's Retry-After, a
        # Cairn extension): never sooner than the TaskDef's delay.
        asked_ms = failed.callback_after_seconds * 1000 if failed.status is TaskStatus.FAILED else 0
        delay_ms = max(retry_delay_ms(task_def, task.retry_count, task.task_id), asked_ms)
        if delay_ms > 0 and self.type_of(task).worker_executed:
            self.arm_dispatch_timer(task, "retry", delay_ms)
        elif self.state.status is WorkflowStatus.PAUSED:
            self.hold(task)
        else:
            self.type_of(task).start(self, node, task, scope_of(failed.reference_task_name))

    def hold(self, task: TaskState) -> None:
        """A PAUSED workflow schedules nothing new: this execution starts on resume."""
        if task.task_id not in self.state.held:
            self.state.held.append(task.task_id)
        self.dirty = True

    def release_held(self) -> None:
        """On resume: start (or hand out) what was held while PAUSED, in the order it was held."""
        from shared.core.tasktypes.simple import dispatch

        held, self.state.held = self.state.held, []
        for task_id in held:
            task = self.live_task(task_id)
            if task is None or task.status.is_terminal:
                continue
            if self.type_of(task).worker_executed:  # a retry, or a callback's redelivery
                if self.type_of(task).admit(self, self.node_of(task), task):
                    dispatch(self, task, self.task_def_of(task).response_timeout_seconds)
            elif task.status is TaskStatus.SCHEDULED:  # a server-side task's retry
                self.type_of(task).start(self, self.node_of(task), task, scope_of(task.reference_task_name))

    def cancel(self, task: TaskState, reason: str) -> None:
        if task.status.is_terminal:
            return
        self.finish(task, TaskStatus.CANCELED, reason)
        self.type_of(task).on_cancel(self, self.node_of(task), task)

    def cancel_below(self, owner: str, reason: str) -> None:
        below = set(self.plan.descendants.get(owner, ()))
        below |= {
            ref for ref, dynamic in self.state.dynamic_nodes.items() if dynamic.parent in below | {owner}
        }
        for ref in sorted(below, key=lambda r: self.state.tasks[r].seq if r in self.state.tasks else 0):
            task = self.state.tasks.get(ref)
            if task is not None:
                self.cancel(task, reason)

    def forget_below(self, owner: str) -> None:
        """Drop the executions under `owner` from the document (a loop's next iteration): they
        are finished and written as task records, so they live on in history only."""
        below = set(self.plan.descendants.get(owner, ()))
        dynamic = {ref for ref, node in self.state.dynamic_nodes.items() if node.parent in below | {owner}}
        for ref in below | dynamic:
            self.state.tasks.pop(ref, None)
        for ref in dynamic:
            self.state.dynamic_nodes.pop(ref, None)
        self.dirty = True

    def end_workflow(self, status: WorkflowStatus, reason: str | None) -> None:
        from shared.core.ending import end_workflow

        end_workflow(self, status, reason)

    def walk_list(self, tasks: list[WorkflowTask], scope: Scope) -> bool:
        from shared.core.walk import walk_list

        return walk_list(self, tasks, scope)
