"""Turns: handing a code workflow's new events to its runtime, and taking the answer.

A turn is one replay. It carries the events that happened since the last turn (opened by an
OrchestratorStarted whose timestamp is the orchestrator's clock for the turn); the decider adds the
stored history as `pastEvents` when it publishes the turn (the document never holds the history).
One turn is out at a time: events that happen meanwhile wait in `code.pending` for the next, so the
history's order is the order the orchestrator saw — inputs of a turn, then what the turn did.

The answer is the turn execution's result. It is checked before anything of it is applied: a
malformed answer, an action id the history already used, or patches that contradict the ones the
execution took make the execution STALLED with the reason, and nothing of that turn is kept (its
events go back to wait for the next turn).
"""

from __future__ import annotations

from pydantic import ValidationError

from shared.core import ids
from shared.core.code.run import CodeRun
from shared.core.tasktypes.simple import dispatch
from shared.models.history import (
    ORCHESTRATOR,
    TURN_REF,
    CompleteOrchestration,
    HistoryEvent,
    OrchestratorStarted,
    Stall,
    TurnResponse,
    WorkItem,
    turn_task_type,
)
from shared.models.messages import TaskResult
from shared.models.runtime import CodeState, TaskState, TaskStatus, WorkflowStatus


def code_of(run: CodeRun) -> CodeState:
    code = run.state.code
    assert code is not None, "a code workflow's state has its code state"
    return code


def turn_in_flight(run: CodeRun) -> TaskState | None:
    task = run.state.tasks.get(TURN_REF)
    return task if task is not None and not task.status.is_terminal else None


def maybe_dispatch_turn(run: CodeRun) -> None:
    """Hand the pending events to the runtime, unless a turn is out, nothing is pending, or the
    workflow may not move (PAUSED: on resume; ended)."""
    code = code_of(run)
    status = run.state.status
    if not code.pending or turn_in_flight(run) is not None:
        return
    if status is WorkflowStatus.STALLED and not run.woken:
        return  # the turn that stalled it would stall again: wait for something new
    if status not in (WorkflowStatus.RUNNING, WorkflowStatus.STALLED):
        return
    dispatch_turn(run)


def add_event(run: CodeRun, event: HistoryEvent) -> None:
    """An event for the orchestrator's next turn."""
    event.timestamp = event.timestamp or run.now
    code_of(run).pending.append(event.to_json_dict())
    run.woken = True
    run.dirty = True


def dispatch_turn(run: CodeRun) -> TaskState:
    state, code = run.state, code_of(run)
    code.turns += 1
    started = OrchestratorStarted(timestamp=run.now).to_json_dict()
    new_events, code.pending = [started, *code.pending], []
    item = WorkItem(
        instance_id=state.workflow_id,
        name=state.workflow_name,
        turn=code.turns,
        generation=state.epoch,
        history_length=code.history_length,
        stalled=state.status is WorkflowStatus.STALLED,
    ).to_json_dict()
    item["newEvents"] = new_events
    task = TaskState(
        task_id=ids.task_id(state.workflow_id, state.epoch, f"{TURN_REF}#{code.turns}", 0),
        task_type=turn_task_type(code.app),
        kind=ORCHESTRATOR,
        task_def_name=turn_task_type(code.app),
        reference_task_name=TURN_REF,
        workflow_instance_id=state.workflow_id,
        workflow_type=state.workflow_name,
        status=TaskStatus.SCHEDULED,
        input_data=item,
        seq=state.next_seq,
        scheduled_time=run.now,
        first_scheduled_time=run.now,
        update_time=run.now,
    )
    state.next_seq += 1
    state.tasks[TURN_REF] = task
    run.forget_index()
    dispatch(run, task, run.limits.turn_timeout_s)
    return task


def take_back(run: CodeRun, turn: TaskState) -> None:
    """The turn's events wait again for the next turn (before any that came meanwhile)."""
    code = code_of(run)
    code.pending = [*turn.input_data.get("newEvents", [])[1:], *code.pending]
    close_turn(run, turn)


def close_turn(run: CodeRun, turn: TaskState) -> None:
    run.state.tasks.pop(TURN_REF, None)
    run.forget_index()
    run.dirty = True


def stall(run: CodeRun, turn: TaskState, why: Stall) -> None:
    """Kept, not failed: the execution waits for a runtime whose code matches its history; the
    next turn (a new event, or a runtime that connects) tries again."""
    code = code_of(run)
    take_back(run, turn)
    code.stall = why
    if run.state.status is WorkflowStatus.RUNNING:
        run.state.status = WorkflowStatus.STALLED
    run.state.update_time = run.now
    run.reject("code_stalled", f"workflow {run.state.workflow_id} stalled ({why.reason}): {why.description}")


def read_response(run: CodeRun, turn: TaskState, result: TaskResult) -> TurnResponse | None:
    """The runtime's answer, checked; None when the turn did not produce a usable one (the
    execution is then STALLED, or the report was a heartbeat)."""
    if result.status is TaskStatus.IN_PROGRESS:
        turn.status = TaskStatus.IN_PROGRESS
        turn.update_time = run.now
        run.touch(turn)
        return None
    if result.status is not TaskStatus.COMPLETED:
        reason = result.reason_for_incompletion or f"the runtime reported the turn {result.status}"
        stall(run, turn, Stall(reason="RUNTIME_ERROR", description=reason))
        return None
    try:
        response = TurnResponse.model_validate(result.output_data)
    except ValidationError as error:
        stall(run, turn, Stall(reason="INVALID_RESPONSE", description=_first_problems(error)))
        return None
    code = code_of(run)
    if response.turn != code.turns:
        run.reject("turn_superseded", f"answer to turn {response.turn} ignored: turn {code.turns} is current")
        return None
    if response.stall is not None:
        stall(run, turn, response.stall)
        return None
    problem = _action_id_problem(code, response) or _patch_problem(code, response)
    if problem is not None:
        stall(run, turn, problem)
        return None
    return response


def _action_id_problem(code: CodeState, response: TurnResponse) -> Stall | None:
    seen: set[int] = set()
    for action in response.actions:
        if isinstance(action, CompleteOrchestration):
            continue  # its number names no event anyone refers to
        if action.id < code.next_action_id or action.id in seen:
            return Stall(
                reason="NONDETERMINISM",
                description=f"the runtime asked for action {action.id} ({action.type}), but the "
                f"history already has actions up to {code.next_action_id - 1}: its code no longer "
                "matches the history",
            )
        seen.add(action.id)
    return None


def _patch_problem(code: CodeState, response: TurnResponse) -> Stall | None:
    """The patches the execution took must be a prefix of those the code takes now (Dapr 1.17)."""
    reported = response.version.patches if response.version is not None else []
    if reported[: len(code.patches)] != code.patches:
        return Stall(
            reason="PATCH_MISMATCH",
            description=f"the history took patches {code.patches}; the code now takes {reported}",
        )
    return None


def _first_problems(error: ValidationError, shown: int = 5) -> str:
    problems = [
        f"{'.'.join(str(part) for part in problem['loc']) or 'answer'}: {problem['msg']}"
        for problem in error.errors()[:shown]
    ]
    more = error.error_count() - shown
    return (
        "the runtime's answer is not a turn response: "
        + "; ".join(problems)
        + (f" (and {more} more)" if more > 0 else "")
    )
