"""decide(snapshot, state, events, now) -> Decision: the whole of Cairn's workflow semantics.

Pure: it reads its arguments, never mutates them, performs no I/O and reads no clock. The caller
(the decider service) persists `Decision.tasks`, commits `Decision.state` with a version check and
publishes `Decision.outbox` after the commit. Events that no longer match the state (a result for
a retried attempt, a cancelled timer, a duplicate signal) are ignored and explained in `notes`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, assert_never

from shared.core import ids
from shared.core.expressions import evaluate_parameters
from shared.core.retry import retry_delay_ms
from shared.core.tasktypes import REGISTRY, ScheduleContext, TaskTypeRegistry
from shared.core.tasktypes.simple import dispatch, response_timeout_of
from shared.core.tasktypes.wait import TIMER_WAIT
from shared.models.definitions import TaskDef, WorkflowDef, WorkflowTask
from shared.models.messages import (
    DecideRequest,
    DeciderInbound,
    OutboxMessage,
    Signal,
    StartWorkflow,
    TaskResult,
    TerminateWorkflow,
    TimerFired,
    TimerRequest,
    WorkflowEvent,
)
from shared.models.runtime import PendingTimer, TaskState, TaskStatus, WorkflowState, WorkflowStatus

TIMER_DISPATCH = "dispatch"
"""A timer that hands a SCHEDULED execution to workers when it fires (retry delay, callback)."""
WorkflowEventName = Literal["completed", "failed", "terminated", "timed_out", "timeout_alert"]
END_EVENTS: dict[WorkflowStatus, WorkflowEventName] = {
    WorkflowStatus.COMPLETED: "completed",
    WorkflowStatus.FAILED: "failed",
    WorkflowStatus.TERMINATED: "terminated",
    WorkflowStatus.TIMED_OUT: "timed_out",
}
TIMER_DEADLINE = "deadline"
"""The workflow's next timeout deadline: firing only makes the decider look again."""


@dataclass(frozen=True)
class _Deadline:
    at: int
    kind: Literal["response", "poll", "timeout", "total"]
    reason: str


@dataclass(frozen=True)
class Rejection:
    """An event the state machine did not accept: a result for a superseded attempt, a signal
    for no waiting task, a status a worker may not report. Never silent: the decider logs each
    one and counts it by `code` (metric `cairn.decider.rejected`)."""

    code: str
    message: str

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class Decision:
    state: WorkflowState
    tasks: list[TaskState] = field(default_factory=list)
    """Task executions created or changed by this decision (to upsert as task records)."""
    outbox: list[OutboxMessage] = field(default_factory=list)
    notes: list[Rejection] = field(default_factory=list)
    """Events the state machine rejected, and why; for logs, metrics and operators, never for
    control flow."""
    repairs: list[str] = field(default_factory=list)
    """What a sweeper's stale-workflow request made good (a lost dispatch or timer firing)."""
    changed: bool = False


def new_workflow_state(snapshot: WorkflowDef, start: StartWorkflow, now: int) -> WorkflowState:
    """The state of an execution that has been accepted but has not scheduled anything yet."""
    return WorkflowState(
        workflow_id=start.workflow_id,
        workflow_name=snapshot.name,
        workflow_version=snapshot.version,
        input=dict(start.input),
        variables=dict(snapshot.variables),
        correlation_id=start.correlation_id,
        create_time=now,
        start_time=now,
        update_time=now,
    )


def task_def_of(node: WorkflowTask) -> TaskDef:
    """The TaskDef a node runs under: the snapshot embeds it; Conductor's defaults otherwise."""
    return node.task_definition or TaskDef(name=node.name)


def effective_retry_count(node: WorkflowTask) -> int:
    """A retryCount on the workflow task overrides the TaskDef's, as in Conductor."""
    return node.retry_count if node.retry_count is not None else task_def_of(node).retry_count


def decide(
    snapshot: WorkflowDef,
    state: WorkflowState,
    events: Sequence[DeciderInbound],
    now: int,
    registry: TaskTypeRegistry = REGISTRY,
) -> Decision:
    run = _DecisionRun(snapshot, state.model_copy(deep=True), now, registry)
    for event in events:
        run.apply(event)
    run.enforce_timeouts()
    run.advance()
    run.arm_next_deadline()
    return run.result()


class _DecisionRun:
    """The mutable working copy of one decision. Never escapes `decide`."""

    def __init__(
        self, snapshot: WorkflowDef, state: WorkflowState, now: int, registry: TaskTypeRegistry
    ) -> None:
        self.snapshot = snapshot
        self.state = state
        self.now = now
        self.registry = registry
        self.ctx = ScheduleContext(now=now)
        self.changed_tasks: dict[str, TaskState] = {}
        self.notes: list[Rejection] = []
        self.repairs: list[str] = []
        self.dirty = False
        self.nodes = {node.task_reference_name: node for node in snapshot.tasks}
        self.order = {node.task_reference_name: index for index, node in enumerate(snapshot.tasks)}

    # ---- events ---------------------------------------------------------------------------

    def apply(self, event: DeciderInbound) -> None:
        match event:
            case StartWorkflow():
                pass  # the state was created from it; advance() schedules the first task
            case TaskResult():
                self._on_task_result(event)
            case Signal():
                self._on_signal(event)
            case TimerFired():
                self._on_timer_fired(event)
            case TerminateWorkflow():
                self._on_terminate(event)
            case DecideRequest():
                if event.stale_before is not None:
                    self._repair_lost_messages(event.stale_before)
            case _:
                assert_never(event)

    def _reject(self, code: str, message: str) -> None:
        self.notes.append(Rejection(code, message))

    def _live_task(self, task_id: str) -> TaskState | None:
        for task in self.state.tasks.values():
            if task.task_id == task_id:
                return task
        return None

    def _on_task_result(self, result: TaskResult) -> None:
        if self.state.status.is_terminal:
            self._reject(
                "result_workflow_ended",
                f"result for task {result.task_id} ignored: workflow is {self.state.status}",
            )
            return
        task = self._live_task(result.task_id)
        if task is None:
            self._reject(
                "result_superseded", f"result for task {result.task_id} ignored: not a current task execution"
            )
            return
        if task.status.is_terminal:
            self._reject(
                "result_task_ended", f"result for task {result.task_id} ignored: task already {task.status}"
            )
            return
        task.worker_id = result.worker_id or task.worker_id
        if result.output_data:
            task.output_data = {**task.output_data, **result.output_data}
        match result.status:
            case TaskStatus.IN_PROGRESS:
                self._on_in_progress(task, result.callback_after_seconds)
            case TaskStatus.COMPLETED:
                self._finish_task(task, TaskStatus.COMPLETED, None)
            case TaskStatus.FAILED | TaskStatus.FAILED_WITH_TERMINAL_ERROR:
                self._on_task_failed(task, result.status, result.reason_for_incompletion)
            case _:
                self._reject(
                    "result_status_not_allowed",
                    f"result for task {result.task_id} ignored: a worker cannot report {result.status}",
                )

    def _on_in_progress(self, task: TaskState, callback_after_seconds: int) -> None:
        if task.status is TaskStatus.SCHEDULED:
            task.start_time = self.now
        task.status = TaskStatus.IN_PROGRESS
        task.update_time = self.now
        task.callback_after_seconds = callback_after_seconds
        self._touch(task)
        if callback_after_seconds > 0:
            # Conductor puts the task back in the queue after the callback delay: redeliver it.
            self._arm_dispatch_timer(task, "callback", callback_after_seconds * 1000)

    def _on_signal(self, signal: Signal) -> None:
        task = self.state.tasks.get(signal.task_ref_name)
        if self.state.status.is_terminal:
            self._reject(
                "signal_workflow_ended",
                f"signal for {signal.task_ref_name} ignored: workflow is {self.state.status}",
            )
            return
        if task is None or task.status.is_terminal:
            self._reject(
                "signal_no_waiting_task",
                f"signal for {signal.task_ref_name} ignored: no task waiting under that name",
            )
            return
        if not self.registry.get(task.kind).accepts_signals:
            self._reject(
                "signal_not_accepted",
                f"signal for {signal.task_ref_name} ignored: {task.kind} tasks take results, not signals",
            )
            return
        task.output_data = dict(signal.output)
        if signal.status is TaskStatus.COMPLETED:
            self._finish_task(task, TaskStatus.COMPLETED, None)
        elif signal.status in (TaskStatus.FAILED, TaskStatus.FAILED_WITH_TERMINAL_ERROR):
            self._on_task_failed(task, signal.status, signal.output.get("reason") or "failed by signal")
        else:
            self._reject(
                "signal_status_not_allowed",
                f"signal for {signal.task_ref_name} ignored: status {signal.status} not allowed",
            )

    def _on_timer_fired(self, fired: TimerFired) -> None:
        timer = self.state.timers.pop(fired.timer_id, None)
        if timer is None:
            self._reject("timer_not_pending", f"timer {fired.timer_id} ignored: not pending")
            return
        self.dirty = True
        if timer.purpose == TIMER_DEADLINE:
            return  # the timeouts are enforced after the events, for every decision
        if timer.purpose == TIMER_WAIT and timer.task_id is not None:
            waiting = self._live_task(timer.task_id)
            if waiting is not None and not waiting.status.is_terminal and not self.state.status.is_terminal:
                self._finish_task(waiting, TaskStatus.COMPLETED, None)
            return
        if timer.purpose == TIMER_DISPATCH and timer.task_id is not None:
            task = self._live_task(timer.task_id)
            if task is None or task.status.is_terminal or self.state.status.is_terminal:
                self._reject(
                    "timer_task_ended", f"timer {fired.timer_id} fired for a task that is no longer live"
                )
                return
            dispatch(self.ctx, task, response_timeout_of(self.nodes[task.reference_task_name]))
            self._touch(task)

    def _repair_lost_messages(self, stale_before: int) -> None:
        """What a dropped message leaves behind, made good on the sweeper's word that nothing
        has happened to this workflow since `stale_before`:

        - a timer due before then whose firing never came (its arm request or its firing was
          lost) is taken as fired now, and the timer service told to forget it;
        - a worker task still SCHEDULED since before then (its dispatch was lost, or a worker
          that reports no start lost its result) is dispatched again. Like Conductor's re-queue
          of a task nobody polled, this may hand out a task that was merely slow in a queue;
          the execution id is the same, so the first result wins and the other is rejected.
        """
        if self.state.status.is_terminal:
            return
        for timer in sorted(self.state.timers.values(), key=lambda t: t.fire_at):
            if timer.fire_at < stale_before and timer.timer_id in self.state.timers:
                self.repairs.append(f"timer {timer.timer_id} overdue since {timer.fire_at}: taken as fired")
                self._request_timer_cancel(timer.timer_id)
                self._on_timer_fired(
                    TimerFired(
                        id=f"{timer.timer_id}:repaired",
                        workflow_id=self.state.workflow_id,
                        timer_id=timer.timer_id,
                    )
                )
        waiting_for_timer = {t.task_id for t in self.state.timers.values() if t.purpose == TIMER_DISPATCH}
        for task in self.state.tasks.values():
            if (
                task.status is TaskStatus.SCHEDULED
                and task.update_time < stale_before
                and task.task_id not in waiting_for_timer
                and self.registry.get(task.kind).worker_executed
            ):
                self.repairs.append(
                    f"task {task.task_id} SCHEDULED since {task.update_time}: dispatched again"
                )
                dispatch(self.ctx, task, response_timeout_of(self.nodes[task.reference_task_name]))
                self._touch(task)

    def enforce_timeouts(self) -> None:
        """Conductor's timeouts that Cairn implements, checked after the events of every decision
        (a result in the same batch beats its deadline); `arm_next_deadline` makes sure a
        decision happens when the next one falls due.

        - workflow timeoutSeconds: TIME_OUT_WF ends the workflow TIMED_OUT; ALERT_ONLY emits one
          `timeout_alert` event and lets it run on;
        - responseTimeoutSeconds: a worker task IN_PROGRESS with no word from its worker for that
          long (since it was handed out, or its last IN_PROGRESS report) is TIMED_OUT, then
          retried like a failure — a worker that died holding the task, a hand-out lost with an
          api that died;
        - pollTimeoutSeconds: a worker task still SCHEDULED that long after its dispatch (nobody
          took it) is TIMED_OUT, then retried.
        """
        if self.state.status.is_terminal:
            return
        workflow_deadline = self._workflow_deadline()
        if workflow_deadline is not None and self.now >= workflow_deadline:
            limit = self.snapshot.timeout_seconds
            if self.snapshot.timeout_policy == "TIME_OUT_WF":
                self._end_workflow(
                    WorkflowStatus.TIMED_OUT, f"workflow timed out after {limit}s (timeoutSeconds)"
                )
                return
            self.state.timeout_alerted = True
            self.dirty = True
            self._emit(
                WorkflowStatus.RUNNING,
                "timeout_alert",
                f"workflow running past its timeoutSeconds ({limit}s)",
            )
        for task in list(self.state.tasks.values()):
            due = [d for d in self._task_deadlines(task) if self.now >= d.at]
            if due and self.state.status is WorkflowStatus.RUNNING:
                self._on_task_deadline(task, min(due, key=lambda d: d.at))

    def _workflow_deadline(self) -> int | None:
        if self.snapshot.timeout_seconds <= 0 or self.state.timeout_alerted:
            return None
        return self.state.create_time + self.snapshot.timeout_seconds * 1000

    def _task_deadlines(self, task: TaskState) -> list[_Deadline]:
        """The timeouts that apply to a live worker task now, with when each falls due."""
        if task.status.is_terminal or not self.registry.get(task.kind).worker_executed:
            return []
        if any(t.purpose == TIMER_DISPATCH and t.task_id == task.task_id for t in self.state.timers.values()):
            return []  # waiting out a retry delay or a callback: not silent
        task_def = task_def_of(self.nodes[task.reference_task_name])
        deadlines: list[_Deadline] = []
        if task.status is TaskStatus.IN_PROGRESS:
            limit = task_def.response_timeout_seconds
            deadlines.append(
                _Deadline(
                    task.update_time + limit * 1000,
                    "response",
                    f"no response from a worker for {limit}s (responseTimeoutSeconds)",
                )
            )
        elif task_def.poll_timeout_seconds:
            limit = task_def.poll_timeout_seconds
            deadlines.append(
                _Deadline(
                    task.update_time + limit * 1000,
                    "poll",
                    f"not picked up by a worker within {limit}s (pollTimeoutSeconds)",
                )
            )
        if task_def.timeout_seconds and not task.timeout_alerted:
            # From the first IN_PROGRESS as in Conductor; a task that never reported a start
            # (a Kafka worker) counts from its dispatch.
            since = task.start_time or task.update_time
            limit = task_def.timeout_seconds
            deadlines.append(
                _Deadline(since + limit * 1000, "timeout", f"task timed out after {limit}s (timeoutSeconds)")
            )
        if task_def.total_timeout_seconds:
            since = task.first_scheduled_time or task.scheduled_time
            limit = task_def.total_timeout_seconds
            deadlines.append(
                _Deadline(
                    since + limit * 1000,
                    "total",
                    f"task exceeded {limit}s across all attempts (totalTimeoutSeconds)",
                )
            )
        return deadlines

    def _on_task_deadline(self, task: TaskState, deadline: _Deadline) -> None:
        policy = task_def_of(self.nodes[task.reference_task_name]).timeout_policy
        if deadline.kind == "timeout" and policy == "ALERT_ONLY":
            task.timeout_alerted = True
            self._touch(task)
            self._emit(
                WorkflowStatus.RUNNING, "timeout_alert", f"task {task.reference_task_name}: {deadline.reason}"
            )
            return
        if deadline.kind == "timeout" and policy == "TIME_OUT_WF":
            self._finish_task(task, TaskStatus.TIMED_OUT, deadline.reason)
            self._end_workflow(
                WorkflowStatus.TIMED_OUT,
                f"Task {task.task_id} ({task.reference_task_name}): {deadline.reason}",
            )
            return
        # response, poll, timeout with RETRY: retried per retryCount; total: no more attempts.
        self._on_task_failed(task, TaskStatus.TIMED_OUT, deadline.reason, may_retry=deadline.kind != "total")

    def arm_next_deadline(self) -> None:
        """Keep one durable timer at or before the workflow's earliest timeout deadline.

        One timer per workflow rather than one per task: a new deadline later than the armed
        one needs nothing (the armed timer fires first, and its decision arms the next), so a
        workflow of quick steps arms about one timer in its life instead of an arm and a cancel
        per step. The sweeper's stale-workflow scan stays as the safety net."""
        if self.state.status.is_terminal:
            return
        deadlines = [d for d in (self._workflow_deadline(),) if d is not None]
        deadlines += [d.at for task in self.state.tasks.values() for d in self._task_deadlines(task)]
        if not deadlines:
            return
        due = max(min(deadlines), self.now)
        armed = [t for t in self.state.timers.values() if t.purpose == TIMER_DEADLINE]
        if any(t.fire_at <= due for t in armed):
            return
        for later in armed:  # superseded by an earlier deadline
            self._cancel_timer(later.timer_id)
        timer_id = ids.timer_id(self.state.workflow_id, f"deadline-{due}")
        self._arm_timer(PendingTimer(timer_id=timer_id, purpose=TIMER_DEADLINE, fire_at=due))
        self.dirty = True

    def _on_terminate(self, command: TerminateWorkflow) -> None:
        if self.state.status.is_terminal:
            self._reject(
                "terminate_workflow_ended", f"terminate ignored: workflow already {self.state.status}"
            )
            return
        self._end_workflow(WorkflowStatus.TERMINATED, command.reason or "terminated by operator")

    # ---- task transitions -----------------------------------------------------------------

    def _finish_task(self, task: TaskState, status: TaskStatus, reason: str | None) -> None:
        task.status = status
        task.reason_for_incompletion = reason
        task.end_time = self.now
        task.update_time = self.now
        if not task.start_time:
            task.start_time = self.now
        self._touch(task)
        for timer in [t for t in self.state.timers.values() if t.task_id == task.task_id]:
            self._cancel_timer(timer.timer_id)  # a callback or timed WAIT that no longer matters

    def _on_task_failed(
        self, task: TaskState, status: TaskStatus, reason: str | None, *, may_retry: bool = True
    ) -> None:
        self._finish_task(task, status, reason)
        node = self.nodes[task.reference_task_name]
        task_type = self.registry.get(task.kind)
        retries_left = task.retry_count < effective_retry_count(node)
        if may_retry and status.is_retriable and task_type.retriable and retries_left:
            task.retried = True
            self._schedule(node, retry_of=task)
            return
        if node.optional:
            task.status = TaskStatus.COMPLETED_WITH_ERRORS
            return
        self._end_workflow(
            WorkflowStatus.FAILED,
            f"Task {task.task_id} ({task.reference_task_name}) failed with status {status}"
            + (f": {reason}" if reason else ""),
        )

    def _schedule(self, node: WorkflowTask, retry_of: TaskState | None = None) -> None:
        task_type = self.registry.get(node.type)
        retry_count = retry_of.retry_count + 1 if retry_of else 0
        task = TaskState(
            task_id=ids.task_id(self.state.workflow_id, node.task_reference_name, 0, retry_count),
            task_type=node.name if node.type == "SIMPLE" else node.type,
            kind=node.type,
            task_def_name=node.name,
            reference_task_name=node.task_reference_name,
            workflow_instance_id=self.state.workflow_id,
            workflow_type=self.state.workflow_name,
            status=TaskStatus.SCHEDULED,
            input_data=(
                dict(retry_of.input_data)
                if retry_of
                else evaluate_parameters(node.input_parameters, self._expression_context())
            ),
            retry_count=retry_count,
            retried_task_id=retry_of.task_id if retry_of else None,
            seq=self.state.next_seq,
            scheduled_time=self.now,
            first_scheduled_time=(retry_of.first_scheduled_time or retry_of.scheduled_time)
            if retry_of
            else self.now,
            update_time=self.now,
        )
        self.state.next_seq += 1
        self.state.tasks[node.task_reference_name] = task
        self._touch(task)
        delay_ms = retry_delay_ms(task_def_of(node), retry_count, task.task_id) if retry_of else 0
        if delay_ms > 0:
            self._arm_dispatch_timer(task, "retry", delay_ms)
        else:
            task_type.schedule(self.ctx, node, task)
            self._after_schedule(task)

    def _after_schedule(self, task: TaskState) -> None:
        """Arm what the task type asked for; a task that could not start (a WAIT whose
        `until` cannot be read) fails as if it had run."""
        for timer in self.ctx.timers:
            self._arm_timer(timer)
        self.ctx.timers.clear()
        if task.status in (TaskStatus.FAILED, TaskStatus.FAILED_WITH_TERMINAL_ERROR):
            self._on_task_failed(task, task.status, task.reason_for_incompletion)

    def _arm_dispatch_timer(self, task: TaskState, why: str, delay_ms: int) -> None:
        timer_id = ids.timer_id(task.task_id, f"{why}-{task.dispatch_count}")
        self._arm_timer(
            PendingTimer(
                timer_id=timer_id, purpose=TIMER_DISPATCH, fire_at=self.now + delay_ms, task_id=task.task_id
            )
        )

    def _arm_timer(self, timer: PendingTimer) -> None:
        """Record a pending timer in the state and ask the timer service to arm it."""
        self.state.timers[timer.timer_id] = timer
        self.ctx.outbox.append(
            TimerRequest(
                id=f"{timer.timer_id}:arm",
                action="arm",
                timer_id=timer.timer_id,
                workflow_id=self.state.workflow_id,
                fire_at=timer.fire_at,
            )
        )

    def _cancel_timer(self, timer_id: str) -> None:
        """Forget a pending timer and ask the timer service to cancel it."""
        self.state.timers.pop(timer_id, None)
        self._request_timer_cancel(timer_id)

    def _request_timer_cancel(self, timer_id: str) -> None:
        self.ctx.outbox.append(
            TimerRequest(
                id=f"{timer_id}:cancel",
                action="cancel",
                timer_id=timer_id,
                workflow_id=self.state.workflow_id,
            )
        )

    def _touch(self, task: TaskState) -> None:
        self.changed_tasks[task.task_id] = task
        self.dirty = True

    # ---- workflow transitions -------------------------------------------------------------

    def advance(self) -> None:
        """Schedule what the graph makes due; complete the workflow when nothing is left."""
        while self.state.status is WorkflowStatus.RUNNING:
            if not self.state.tasks:
                self._schedule(self.snapshot.tasks[0])
                continue
            last_ref = max(self.state.tasks, key=lambda ref: self.order[ref])
            last = self.state.tasks[last_ref]
            if not last.status.is_terminal or not last.status.is_successful:
                return
            index = self.order[last_ref] + 1
            if index < len(self.snapshot.tasks):
                self._schedule(self.snapshot.tasks[index])
            else:
                self._complete_workflow()

    def _expression_context(self) -> dict[str, Any]:
        state = self.state
        context: dict[str, Any] = {
            "workflow": {
                "workflowId": state.workflow_id,
                "workflowType": state.workflow_name,
                "version": state.workflow_version,
                "input": state.input,
                "output": state.output,
                "status": state.status.value,
                "variables": state.variables,
                "correlationId": state.correlation_id,
                "createTime": state.create_time,
                "startTime": state.start_time,
            }
        }
        for ref, task in state.tasks.items():
            context[ref] = {
                "input": task.input_data,
                "output": task.output_data,
                "status": task.status.value,
                "taskId": task.task_id,
                "referenceTaskName": ref,
                "retryCount": task.retry_count,
                "reasonForIncompletion": task.reason_for_incompletion,
                "workerId": task.worker_id,
            }
        return context

    def _complete_workflow(self) -> None:
        if self.snapshot.output_parameters:
            output = evaluate_parameters(self.snapshot.output_parameters, self._expression_context())
        else:
            last = max(self.state.tasks.values(), key=lambda task: task.seq)
            output = dict(last.output_data)
        self.state.output = output
        self._end_workflow(WorkflowStatus.COMPLETED, None)

    def _end_workflow(self, status: WorkflowStatus, reason: str | None) -> None:
        state = self.state
        state.status = status
        state.reason_for_incompletion = reason
        state.end_time = self.now
        state.update_time = self.now
        self.dirty = True
        for task in state.tasks.values():
            if not task.status.is_terminal:
                self._finish_task(task, TaskStatus.CANCELED, f"workflow {status}")
        for timer_id in sorted(state.timers):
            self._cancel_timer(timer_id)
        self._emit(status, END_EVENTS[status], reason)
        if status in (WorkflowStatus.FAILED, WorkflowStatus.TIMED_OUT) and self.snapshot.failure_workflow:
            self._start_failure_workflow(self.snapshot.failure_workflow, status, reason)

    def _start_failure_workflow(self, name: str, status: WorkflowStatus, reason: str | None) -> None:
        """Conductor's failureWorkflow: started with the failed execution's id, reason, failed
        task and its input and output. The id is derived from the failed workflow's, so the
        start is idempotent; both executions carry the link."""
        state = self.state
        failed = [
            t
            for t in state.tasks.values()
            if t.status.is_terminal and not t.status.is_successful and t.status is not TaskStatus.CANCELED
        ]
        failed_task = max(failed, key=lambda t: t.seq) if failed else None
        failure_id = ids.failure_workflow_id(state.workflow_id)
        state.failure_workflow_id = failure_id
        state.output = {**state.output, "conductor.failure_workflow": failure_id}
        self.ctx.outbox.append(
            StartWorkflow(
                id=f"start:{failure_id}",
                workflow_id=failure_id,
                name=name,
                correlation_id=state.correlation_id,
                input={
                    "workflowId": state.workflow_id,
                    "workflowType": state.workflow_name,
                    "failureStatus": status.value,
                    "reason": reason,
                    "failureTaskId": failed_task.task_id if failed_task else None,
                    "failedReferenceTaskName": failed_task.reference_task_name if failed_task else None,
                    "input": state.input,
                    "output": {k: v for k, v in state.output.items() if k != "conductor.failure_workflow"},
                },
            )
        )

    def _emit(self, status: WorkflowStatus, event: WorkflowEventName, reason: str | None) -> None:
        state = self.state
        self.ctx.outbox.append(
            WorkflowEvent(
                id=f"{state.workflow_id}:{event}",
                event=event,
                workflow_id=state.workflow_id,
                workflow_name=state.workflow_name,
                status=status.value,
                output=state.output,
                reason=reason,
            )
        )

    def result(self) -> Decision:
        if self.dirty:
            self.state.update_time = self.now
        return Decision(
            state=self.state,
            tasks=list(self.changed_tasks.values()),
            outbox=list(self.ctx.outbox),
            notes=self.notes,
            repairs=self.repairs,
            changed=self.dirty,
        )
