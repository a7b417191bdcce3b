"""Carrying out what a turn asked for, and recording it in the history.

Each action becomes an execution the rest of Cairn already knows how to run — an activity a SIMPLE
execution on its workers' topic (`tasks.<activity>`), a timer a WAIT execution with a durable
timer, a child a SUB_WORKFLOW execution whose child is started through the outbox — and one
history event (TaskScheduled, TimerCreated, SubOrchestrationInstanceCreated, EventSent,
ExecutionCompleted) in the turn's chunk, after the events the turn was given.
"""

from __future__ import annotations

from typing import Any, assert_never

from shared.core import ids
from shared.core.code.run import CodeRun
from shared.core.code.turns import close_turn, code_of
from shared.core.tasktypes.base import in_progress
from shared.core.tasktypes.simple import dispatch
from shared.core.tasktypes.wait import TIMER_WAIT
from shared.models.definitions import WorkflowTask
from shared.models.history import (
    CompleteOrchestration,
    CreateSubOrchestration,
    CreateTimer,
    EventSent,
    ExecutionCompleted,
    ExecutionStarted,
    HistoryEvent,
    ScheduleTask,
    SendEvent,
    SubOrchestrationInstanceCreated,
    TaskScheduled,
    TimerCreated,
    TurnResponse,
)
from shared.models.limits import WORKFLOW_ID_PATTERN, describe, payload_problems
from shared.models.messages import RaiseEvent, StartWorkflow
from shared.models.runtime import CodeState, PendingTimer, TaskState, TaskStatus, WorkflowStatus


def apply_response(run: CodeRun, turn: TaskState, response: TurnResponse) -> None:
    """Commit one checked turn: its events and actions into the history, the actions carried out."""
    run.need_task_defs({action.name for action in response.actions if isinstance(action, ScheduleTask)})
    state, code = run.state, code_of(run)
    given = list(turn.input_data.get("newEvents", []))
    if response.version is not None and given:  # only what is new to the history (Dapr's compaction)
        new = response.version.model_copy(update={"patches": response.version.patches[len(code.patches) :]})
        given[0] = {**given[0], "version": new.to_json_dict()}
    chunk: list[dict[str, Any]] = given
    close_turn(run, turn)
    code.custom_status = response.custom_status
    if response.version is not None:
        code.version = response.version
        code.patches = list(response.version.patches)  # the history's are a prefix (turns.py)
    if state.status is WorkflowStatus.STALLED:  # this runtime's code matches the history again
        state.status = WorkflowStatus.RUNNING
        code.stall = None
    continued: CompleteOrchestration | None = None
    for action in sorted(response.actions, key=lambda a: a.id):
        code.next_action_id = max(code.next_action_id, action.id + 1)
        match action:
            case ScheduleTask():
                scheduled = TaskScheduled(event_id=action.id, name=action.name, input=action.input)
                chunk.append(_event(scheduled, run))
                _schedule_activity(run, action)
            case CreateTimer():
                chunk.append(_event(TimerCreated(event_id=action.id, fire_at=action.fire_at), run))
                _create_timer(run, action)
            case CreateSubOrchestration():
                child = _start_child(run, action)
                created = SubOrchestrationInstanceCreated(
                    event_id=action.id, name=action.name, instance_id=child, input=action.input
                )
                chunk.append(_event(created, run))
            case SendEvent():
                sent = EventSent(
                    event_id=action.id, instance_id=action.instance_id, name=action.name, input=action.input
                )
                chunk.append(_event(sent, run))
                _send_event(run, action)
            case CompleteOrchestration():
                ended = ExecutionCompleted(
                    event_id=action.id,
                    orchestration_status=action.orchestration_status,
                    result=action.result,
                    failure_details=action.failure_details,
                )
                chunk.append(_event(ended, run))
                if action.orchestration_status == "CONTINUED_AS_NEW":
                    continued = action
                else:
                    _complete(run, action)
                break  # nothing after the end of the function counts
            case _:
                assert_never(action)
    append_history(run, chunk)
    if continued is not None:
        continue_as_new(run, continued.result, continued.carryover_events)


def append_history(run: CodeRun, events: list[dict[str, Any]]) -> None:
    """One chunk of this generation's history, written with the decision's commit."""
    code = code_of(run)
    if events:
        run.appends.append((run.state.epoch, code.history_length, events))
        code.chunk_starts.append(code.history_length)
        code.history_length += len(events)
        run.dirty = True


def _event(event: HistoryEvent, run: CodeRun) -> dict[str, Any]:
    event.timestamp = run.now
    return event.to_json_dict()


def _schedule_activity(run: CodeRun, action: ScheduleTask) -> None:
    code = code_of(run)
    ref = f"{action.name}_{action.id}"
    task = run.create(WorkflowTask(name=action.name, task_reference_name=ref), ())
    task.input_data = {"input": action.input}
    code.actions[ref] = action.id
    problems = payload_problems(task.input_data, "inputData", run.limits.payload)
    if problems:  # the orchestrator hears of it as a failed activity in its next turn
        run.finish(task, TaskStatus.FAILED_WITH_TERMINAL_ERROR, describe(problems))
    elif run.state.status is WorkflowStatus.PAUSED:
        run.hold(task)  # handed out on resume
    else:
        dispatch(run, task, run.activity_def(action.name).response_timeout_seconds)


def _create_timer(run: CodeRun, action: CreateTimer) -> None:
    code = code_of(run)
    ref = f"timer_{action.id}"
    task = run.create(WorkflowTask(name="timer", task_reference_name=ref, type="WAIT"), ())
    task.input_data = {"fireAt": action.fire_at}
    code.actions[ref] = action.id
    in_progress(run, task)
    run.arm_timer(
        PendingTimer(
            timer_id=ids.timer_id(task.task_id, "wait"),
            purpose=TIMER_WAIT,
            fire_at=action.fire_at,
            task_id=task.task_id,
        )
    )


def _start_child(run: CodeRun, action: CreateSubOrchestration) -> str:
    """Start the child through the outbox (its id is the instance id the orchestrator chose,
    else derived from this execution); returns the child's id."""
    state, code = run.state, code_of(run)
    ref = f"{action.name}_{action.id}"
    task = run.create(WorkflowTask(name=action.name, task_reference_name=ref, type="SUB_WORKFLOW"), ())
    task.input_data = {"input": action.input}
    code.actions[ref] = action.id
    child = action.instance_id or ids.child_workflow_id(task.task_id)
    task.sub_workflow_id = child
    in_progress(run, task)
    problems = payload_problems(task.input_data, "input", run.limits.payload)
    if not WORKFLOW_ID_PATTERN.fullmatch(child):
        problems.append(("instanceId", f"{child!r} is not a workflow id (letters, digits and . _ : @ -)"))
    if problems:
        run.finish(task, TaskStatus.FAILED_WITH_TERMINAL_ERROR, describe(problems))
        return child
    run.publish(
        StartWorkflow(
            id=f"start:{child}:{task.task_id}",  # a retry of the child (same id) is a new start
            workflow_id=child,
            name=action.name,
            input=task.input_data,
            correlation_id=state.correlation_id,
            parent_workflow_id=state.workflow_id,
            parent_workflow_task_id=task.task_id,
            app=action.app or code.app,  # no kind: a JSON workflow of that name runs as one
        )
    )
    return child


def _send_event(run: CodeRun, action: SendEvent) -> None:
    if not WORKFLOW_ID_PATTERN.fullmatch(action.instance_id):
        why = f"event {action.name!r} not sent: {action.instance_id!r} is not a workflow id"
        run.reject("event_target_invalid", why)
        return
    run.publish(
        RaiseEvent(
            id=f"event:{run.state.workflow_id}:{run.state.epoch}:{action.id}",
            workflow_id=action.instance_id,
            name=action.name,
            input=action.input,
        )
    )


def _complete(run: CodeRun, action: CompleteOrchestration) -> None:
    state = run.state
    if action.orchestration_status == "COMPLETED":
        output = {"result": action.result}
        problems = payload_problems(output, "output", run.limits.payload)
        if problems:
            state.output = {}
            why = f"the orchestrator's result was refused: {describe(problems)}"
            run.end_workflow(WorkflowStatus.FAILED, why)
            return
        state.output = output
        run.end_workflow(WorkflowStatus.COMPLETED, None)
        return
    details = action.failure_details
    state.output = {"failureDetails": details.to_json_dict()} if details is not None else {}
    reason = f"{details.error_type}: {details.message}" if details is not None else "the orchestrator failed"
    run.end_workflow(WorkflowStatus.FAILED, reason)


def continue_as_new(run: CodeRun, new_input: Any, carryover: list[HistoryEvent]) -> None:
    """Dapr's continue_as_new: the same instance starts over with a new input and an empty
    history (a new generation: the epoch, so its execution ids are new). What was live is
    cancelled; with save_events the events not yet taken come along."""
    new_generation(run, new_input, carryover)


def new_generation(
    run: CodeRun, new_input: Any, carryover: list[HistoryEvent], app: str | None = None
) -> None:
    """Start this instance over with `new_input` and an empty history (continue_as_new, or a
    start under the id of a finished instance, which Dapr allows, on the start's app)."""
    state, code = run.state, code_of(run)
    for task in sorted(state.tasks.values(), key=lambda t: t.seq):
        run.cancel(task, "continued as new")
    for timer_id in sorted(state.timers):
        run.cancel_timer(timer_id)
    first = state.superseded[-1][1] + 1 if state.superseded else 1
    if state.next_seq - 1 >= first:
        state.superseded = [*state.superseded, (first, state.next_seq - 1)]
    state.tasks = {}
    state.epoch += 1
    state.input = {"input": new_input}
    started = ExecutionStarted(
        name=state.workflow_name,
        instance_id=state.workflow_id,
        input=new_input,
        parent_instance_id=state.parent_workflow_id,
        parent_task_id=state.parent_workflow_task_id,
        timestamp=run.now,
    )
    state.code = CodeState(
        app=app or code.app,
        pending=[started.to_json_dict(), *(event.to_json_dict() for event in carryover)],
    )
    run.woken = True
    run.forget_index()
    run.dirty = True
