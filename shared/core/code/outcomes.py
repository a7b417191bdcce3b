"""What the orchestrator hears of its executions: each one that ended becomes a history event
for the next turn (TaskCompleted / TaskFailed, TimerFired, SubOrchestrationInstanceCompleted /
Failed), and leaves the document (its record is in the store)."""

from __future__ import annotations

from shared.core.code.run import CodeRun
from shared.core.code.turns import add_event, code_of
from shared.models.history import (
    FailureDetails,
    HistoryEvent,
    SubOrchestrationInstanceCompleted,
    SubOrchestrationInstanceFailed,
    TaskCompleted,
    TaskFailed,
    TimerFired,
)
from shared.models.runtime import TaskState, TaskStatus


def record_outcomes(run: CodeRun) -> None:
    """Turn the executions that ended since the last look into events, in the order they are
    listed (creation order; called after each inbound event, so events keep their order)."""
    state, code = run.state, code_of(run)
    if state.status.is_terminal:
        return  # what ended with the workflow (cancelled) is nobody's news
    for ref, action_id in list(code.actions.items()):
        task = state.tasks.get(ref)
        if task is not None and not task.status.is_terminal:
            continue
        del code.actions[ref]
        if task is None:
            continue
        state.tasks.pop(ref)
        run.forget_index()
        run.dirty = True
        event = outcome_event(task, action_id)
        if event is not None:
            add_event(run, event)


def outcome_event(task: TaskState, action_id: int) -> HistoryEvent | None:
    ok = task.status.is_successful
    match task.kind:
        case "SIMPLE":
            if ok:
                return TaskCompleted(task_scheduled_id=action_id, result=task.output_data.get("result"))
            return TaskFailed(task_scheduled_id=action_id, failure_details=failure_of(task))
        case "WAIT":
            return TimerFired(timer_id=action_id, fire_at=int(task.input_data.get("fireAt", 0)))
        case "SUB_WORKFLOW":
            if ok:
                return SubOrchestrationInstanceCompleted(
                    task_scheduled_id=action_id, result=task.output_data.get("result")
                )
            return SubOrchestrationInstanceFailed(
                task_scheduled_id=action_id, failure_details=failure_of(task)
            )
    return None


def failure_of(task: TaskState) -> FailureDetails:
    """The worker's report of a failure: its `errorType` and `stackTrace` outputs when it sent
    them (the Cairn runtime does), else the task status and reason."""
    output = task.output_data
    failure = output.get("failureDetails") if isinstance(output.get("failureDetails"), dict) else None
    error_type = (failure or output).get("errorType")
    if task.status is TaskStatus.TIMED_OUT:
        error_type = error_type or "TimeoutError"
    return FailureDetails(
        error_type=str(error_type or task.status.value)[:1000],
        message=str((failure or {}).get("message") or task.reason_for_incompletion or task.status.value)[
            :10_000
        ],
        stack_trace=str((failure or output).get("stackTrace"))[:100_000]
        if (failure or output).get("stackTrace")
        else None,
    )
