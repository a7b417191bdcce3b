"""Applying the inbound events of a decision to its working copy.

Every event names what it refers to (a task execution, a timer, a task reference); an event that
no longer matches the state (a result for a retried attempt, a cancelled timer, a duplicate) is
rejected with a reason code, never applied.
"""

from __future__ import annotations

from typing import assert_never

from shared.core.budget import LLM_TASK_TYPES
from shared.core.ending import end_workflow
from shared.core.operations import apply_operation
from shared.core.refs import node_ref
from shared.core.run import TIMER_DISPATCH, DecisionRun
from shared.core.tasktypes.simple import dispatch
from shared.core.tasktypes.wait import TIMER_WAIT
from shared.core.timeouts import TIMER_DEADLINE
from shared.models.limits import describe, payload_problems
from shared.models.messages import (
    DecideRequest,
    DeciderInbound,
    PauseWorkflow,
    RaiseEvent,
    RerunWorkflow,
    RestartWorkflow,
    ResumeWorkflow,
    RetryWorkflow,
    Signal,
    SkipTask,
    StartWorkflow,
    SubWorkflowEnded,
    SubWorkflowReopened,
    TaskResult,
    TerminateWorkflow,
    TimerFired,
    UpdateVariables,
)
from shared.models.runtime import TaskState, TaskStatus, WorkflowStatus


def apply(run: DecisionRun, event: DeciderInbound) -> None:
    match event:
        case StartWorkflow():
            pass  # the state was created from it; the walk starts the first task
        case TaskResult():
            _on_task_result(run, event)
        case Signal():
            _on_signal(run, event)
        case TimerFired():
            on_timer_fired(run, event)
        case TerminateWorkflow():
            _on_terminate(run, event)
        case SubWorkflowEnded():
            _on_sub_workflow_ended(run, event)
        case DecideRequest():
            if event.stale_before is not None:
                repair_lost_messages(run, event.stale_before)
        case RaiseEvent():
            run.reject(
                "raise_event_not_code",
                f"event {event.name!r} ignored: a JSON workflow takes signals for its WAIT tasks, "
                "not external events (those are for code workflows)",
            )
        case (
            PauseWorkflow()
            | ResumeWorkflow()
            | RestartWorkflow()
            | RerunWorkflow()
            | RetryWorkflow()
            | SkipTask()
            | UpdateVariables()
            | SubWorkflowReopened()
        ):
            apply_operation(run, event)
        case _:
            assert_never(event)


def _on_task_result(run: DecisionRun, result: TaskResult) -> None:
    if run.state.status.is_terminal:
        run.reject(
            "result_workflow_ended",
            f"result for task {result.task_id} ignored: workflow is {run.state.status}",
        )
        return
    task = run.live_task(result.task_id)
    if task is None:
        run.reject(
            "result_superseded", f"result for task {result.task_id} ignored: not a current task execution"
        )
        return
    if task.status.is_terminal:
        run.reject(
            "result_task_ended", f"result for task {result.task_id} ignored: task already {task.status}"
        )
        return
    task.worker_id = result.worker_id or task.worker_id
    if result.output_data:
        merged = {**task.output_data, **result.output_data}
        problems = payload_problems(merged, "outputData", run.limits.payload)
        if problems:  # a result past the limits fails its task; it never reaches the commit
            reason = f"the worker's result was refused: {describe(problems)}"
            run.fail(task, TaskStatus.FAILED_WITH_TERMINAL_ERROR, reason)
            return
        task.output_data = merged
    if task.kind in LLM_TASK_TYPES and result.status.is_terminal:
        run.budget.charge_llm(task)  # a failed attempt's tokens were paid for too
    match result.status:
        case TaskStatus.IN_PROGRESS:
            _on_in_progress(run, task, result.callback_after_seconds)
        case TaskStatus.COMPLETED:
            run.complete(task)
        case TaskStatus.FAILED | TaskStatus.FAILED_WITH_TERMINAL_ERROR:
            # Cairn: a failed attempt's callbackAfterSeconds is the soonest its retry may go
            # out (a provider's Retry-After), whatever shorter delay the TaskDef gives.
            task.callback_after_seconds = result.callback_after_seconds
            run.fail(task, result.status, result.reason_for_incompletion or "")
        case _:
            run.reject(
                "result_status_not_allowed",
                f"result for task {result.task_id} ignored: a worker cannot report {result.status}",
            )


def _on_in_progress(run: DecisionRun, task: TaskState, callback_after_seconds: int) -> None:
    if task.status is TaskStatus.SCHEDULED:
        task.start_time = run.now
    task.status = TaskStatus.IN_PROGRESS
    task.update_time = run.now
    task.callback_after_seconds = callback_after_seconds
    run.touch(task)
    if callback_after_seconds > 0:
        # Conductor puts the task back in the queue after the callback delay: redeliver it.
        run.arm_dispatch_timer(task, "callback", callback_after_seconds * 1000)


def _on_signal(run: DecisionRun, signal: Signal) -> None:
    task = run.state.tasks.get(node_ref(signal.task_ref_name))
    if task is not None and signal.task_ref_name != task.reference_task_name and "__" in signal.task_ref_name:
        task = None  # a signal for another iteration of a loop body task
    if run.state.status.is_terminal:
        run.reject(
            "signal_workflow_ended",
            f"signal for {signal.task_ref_name} ignored: workflow is {run.state.status}",
        )
        return
    if task is None or task.status.is_terminal:
        run.reject(
            "signal_no_waiting_task",
            f"signal for {signal.task_ref_name} ignored: no task waiting under that name",
        )
        return
    if not run.type_of(task).accepts_signals:
        run.reject(
            "signal_not_accepted",
            f"signal for {signal.task_ref_name} ignored: {task.kind} tasks take results, not signals",
        )
        return
    problems = payload_problems(signal.output, "output", run.limits.payload)
    if problems:  # the edges refuse such a signal; this keeps the core safe on its own
        run.reject("signal_past_limits", f"signal for {signal.task_ref_name} ignored: {describe(problems)}")
        return
    task.output_data = dict(signal.output)
    if signal.status is TaskStatus.COMPLETED:
        run.complete(task)
    elif signal.status in (TaskStatus.FAILED, TaskStatus.FAILED_WITH_TERMINAL_ERROR):
        run.fail(task, signal.status, signal.output.get("reason") or "failed by signal")
    else:
        run.reject(
            "signal_status_not_allowed",
            f"signal for {signal.task_ref_name} ignored: status {signal.status} not allowed",
        )


def on_timer_fired(run: DecisionRun, fired: TimerFired) -> None:
    timer = run.state.timers.pop(fired.timer_id, None)
    if timer is None:
        run.reject("timer_not_pending", f"timer {fired.timer_id} ignored: not pending")
        return
    run.dirty = True
    if timer.purpose == TIMER_DEADLINE:
        return  # the timeouts are enforced after the events, for every decision
    if timer.purpose == TIMER_WAIT and timer.task_id is not None:
        waiting = run.live_task(timer.task_id)
        if waiting is not None and not waiting.status.is_terminal and not run.state.status.is_terminal:
            run.complete(waiting)
        return
    if timer.purpose == TIMER_DISPATCH and timer.task_id is not None:
        task = run.live_task(timer.task_id)
        if task is None or task.status.is_terminal or run.state.status.is_terminal:
            run.reject("timer_task_ended", f"timer {fired.timer_id} fired for a task that is no longer live")
            return
        if run.state.status is WorkflowStatus.PAUSED:
            run.hold(task)  # handed out on resume
            return
        if run.type_of(task).admit(run, run.node_of(task), task):
            dispatch(run, task, run.task_def_of(task).response_timeout_seconds)


def _on_terminate(run: DecisionRun, command: TerminateWorkflow) -> None:
    if run.state.status.is_terminal:
        run.reject("terminate_workflow_ended", f"terminate ignored: workflow already {run.state.status}")
        return
    end_workflow(
        run,
        WorkflowStatus.TERMINATED,
        command.reason or "terminated by operator",
        trigger_failure_workflow=command.trigger_failure_workflow,
    )


def _on_sub_workflow_ended(run: DecisionRun, ended: SubWorkflowEnded) -> None:
    task = run.live_task(ended.task_id)
    if run.state.status.is_terminal or task is None or task.status.is_terminal:
        run.reject(
            "subworkflow_result_ignored",
            f"end of sub-workflow {ended.sub_workflow_id} ignored: its task is no longer waiting",
        )
        return
    from shared.core.tasktypes.subworkflow import on_child_ended

    on_child_ended(run, task, ended)


def repair_lost_messages(run: DecisionRun, stale_before: int) -> None:
    """What a dropped message leaves behind, made good on the sweeper's word that nothing
    has happened to this workflow since `stale_before`:

    - a timer due before then whose firing never came (its arm request or its firing was
      lost) is taken as fired now, and the timer service told to forget it;
    - a worker task still SCHEDULED since before then (its dispatch was lost, or a worker
      that reports no start lost its result) is dispatched again. Like Conductor's re-queue
      of a task nobody polled, this may hand out a task that was merely slow in a queue;
      the execution id is the same, so the first result wins and the other is rejected.
    """
    from shared.models.messages import TimerFired as Fired

    if run.state.status is not WorkflowStatus.RUNNING:
        return  # a PAUSED workflow is moved by its operator only (it needs no attention)
    for timer in sorted(run.state.timers.values(), key=lambda t: t.fire_at):
        if timer.fire_at < stale_before and timer.timer_id in run.state.timers:
            run.repairs.append(f"timer {timer.timer_id} overdue since {timer.fire_at}: taken as fired")
            run.request_timer_cancel(timer.timer_id)
            on_timer_fired(
                run,
                Fired(
                    id=f"{timer.timer_id}:repaired",
                    workflow_id=run.state.workflow_id,
                    timer_id=timer.timer_id,
                ),
            )
    waiting_for_timer = {t.task_id for t in run.state.timers.values() if t.purpose == TIMER_DISPATCH}
    for task in run.state.tasks.values():
        if (
            task.status is TaskStatus.SCHEDULED
            and task.update_time < stale_before
            and task.task_id not in waiting_for_timer
            and run.type_of(task).worker_executed
        ):
            run.repairs.append(f"task {task.task_id} SCHEDULED since {task.update_time}: dispatched again")
            dispatch(run, task, run.task_def_of(task).response_timeout_seconds)
