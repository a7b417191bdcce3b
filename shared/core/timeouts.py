"""Conductor's timeouts, checked after the events of every decision (a result in the same batch
beats its deadline), and the one durable timer that makes sure a decision happens when the next
deadline falls due.

- workflow timeoutSeconds: TIME_OUT_WF ends the workflow TIMED_OUT; ALERT_ONLY emits one
  `timeout_alert` event and lets it run on;
- responseTimeoutSeconds: a worker task IN_PROGRESS with no word from its worker for that long
  (since it was handed out, or its last IN_PROGRESS report) is TIMED_OUT, then retried like a
  failure — a worker that died holding the task, a hand-out lost with an api that died;
- pollTimeoutSeconds: a worker task still SCHEDULED that long after its dispatch (nobody took
  it) is TIMED_OUT, then retried;
- timeoutSeconds of a task (RETRY / TIME_OUT_WF / ALERT_ONLY) and totalTimeoutSeconds across
  its attempts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from shared.core import ids
from shared.core.ending import emit, end_workflow
from shared.core.run import TIMER_DISPATCH, DecisionRun
from shared.models.runtime import PendingTimer, TaskState, TaskStatus, WorkflowStatus

TIMER_DEADLINE = "deadline"
"""The workflow's next timeout deadline: firing only makes the decider look again."""


@dataclass(frozen=True)
class Deadline:
    at: int
    kind: Literal["response", "poll", "timeout", "total"]
    reason: str


def enforce_timeouts(run: DecisionRun) -> None:
    state = run.state
    if state.status is not WorkflowStatus.RUNNING:
        return  # PAUSED: as in Conductor, nothing is decided; what fell due meanwhile, on resume
    workflow_deadline = _workflow_deadline(run)
    if workflow_deadline is not None and run.now >= workflow_deadline:
        limit = run.snapshot.timeout_seconds
        if run.snapshot.timeout_policy == "TIME_OUT_WF":
            end_workflow(run, WorkflowStatus.TIMED_OUT, f"workflow timed out after {limit}s (timeoutSeconds)")
            return
        state.timeout_alerted = True
        run.dirty = True
        emit(
            run,
            WorkflowStatus.RUNNING,
            "timeout_alert",
            f"workflow running past its timeoutSeconds ({limit}s)",
        )
    for task in list(state.tasks.values()):
        due = [d for d in task_deadlines(run, task) if run.now >= d.at]
        if due and state.status is WorkflowStatus.RUNNING:
            _on_task_deadline(run, task, min(due, key=lambda d: d.at))


def _workflow_deadline(run: DecisionRun) -> int | None:
    if run.snapshot.timeout_seconds <= 0 or run.state.timeout_alerted:
        return None
    since = run.state.last_retried_time or run.state.create_time  # Conductor's order
    return since + run.snapshot.timeout_seconds * 1000


def task_deadlines(run: DecisionRun, task: TaskState) -> list[Deadline]:
    """The timeouts that apply to a live worker task now, with when each falls due."""
    if task.status.is_terminal or not run.type_of(task).worker_executed:
        return []
    if any(t.purpose == TIMER_DISPATCH and t.task_id == task.task_id for t in run.state.timers.values()):
        return []  # waiting out a retry delay or a callback: not silent
    task_def = run.task_def_of(task)
    deadlines: list[Deadline] = []
    if task.status is TaskStatus.IN_PROGRESS:
        limit = task_def.response_timeout_seconds
        deadlines.append(
            Deadline(
                task.update_time + limit * 1000,
                "response",
                f"no response from a worker for {limit}s (responseTimeoutSeconds)",
            )
        )
    elif task_def.poll_timeout_seconds:
        limit = task_def.poll_timeout_seconds
        deadlines.append(
            Deadline(
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
            Deadline(since + limit * 1000, "timeout", f"task timed out after {limit}s (timeoutSeconds)")
        )
    if task_def.total_timeout_seconds:
        since = task.first_scheduled_time or task.scheduled_time
        limit = task_def.total_timeout_seconds
        deadlines.append(
            Deadline(
                since + limit * 1000,
                "total",
                f"task exceeded {limit}s across all attempts (totalTimeoutSeconds)",
            )
        )
    return deadlines


def _on_task_deadline(run: DecisionRun, task: TaskState, deadline: Deadline) -> None:
    policy = run.task_def_of(task).timeout_policy
    if deadline.kind == "timeout" and policy == "ALERT_ONLY":
        task.timeout_alerted = True
        run.touch(task)
        emit(
            run,
            WorkflowStatus.RUNNING,
            "timeout_alert",
            f"task {task.reference_task_name}: {deadline.reason}",
        )
        return
    if deadline.kind == "timeout" and policy == "TIME_OUT_WF":
        run.finish(task, TaskStatus.TIMED_OUT, deadline.reason)
        end_workflow(
            run,
            WorkflowStatus.TIMED_OUT,
            f"Task {task.task_id} ({task.reference_task_name}): {deadline.reason}",
        )
        return
    # response, poll, timeout with RETRY: retried per retryCount; total: no more attempts.
    run.fail(task, TaskStatus.TIMED_OUT, deadline.reason, may_retry=deadline.kind != "total")


def arm_next_deadline(run: DecisionRun) -> None:
    """Keep one durable timer at or before the workflow's earliest timeout deadline.

    One timer per workflow rather than one per task: a new deadline later than the armed
    one needs nothing (the armed timer fires first, and its decision arms the next), so a
    workflow of quick steps arms about one timer in its life instead of an arm and a cancel
    per step. The sweeper's stale-workflow scan stays as the safety net."""
    if run.state.status is not WorkflowStatus.RUNNING:
        return
    deadlines = [d for d in (_workflow_deadline(run),) if d is not None]
    deadlines += [d.at for task in run.state.tasks.values() for d in task_deadlines(run, task)]
    if not deadlines:
        return
    due = max(min(deadlines), run.now)
    armed = [t for t in run.state.timers.values() if t.purpose == TIMER_DEADLINE]
    if any(t.fire_at <= due for t in armed):
        return
    for later in armed:  # superseded by an earlier deadline
        run.cancel_timer(later.timer_id)
    run.state.deadline_timers += 1
    timer_id = ids.timer_id(run.state.workflow_id, f"deadline-{run.state.deadline_timers}-{due}")
    run.arm_timer(PendingTimer(timer_id=timer_id, purpose=TIMER_DEADLINE, fire_at=due))
