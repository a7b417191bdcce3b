"""The engine of code workflows (kind "code"): one decision of a replayed orchestrator.

Pure, like the graph engine: events in, new state, executions, outbox and history chunks out.
It never runs user code. An event that concerns the orchestrator (an activity's end, a timer, a
child, an external event, a pause) becomes a history event waiting for the next turn; a turn's
answer is checked and carried out (shared/core/code/turns.py, actions.py); lifecycle commands a
code workflow has no meaning for (restart, rerun, retry, skip, variables) are refused, recorded
as any refused operation is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import assert_never

from shared.core.code.actions import append_history, apply_response, new_generation
from shared.core.code.outcomes import record_outcomes
from shared.core.code.run import CodeRun
from shared.core.code.turns import (
    add_event,
    code_of,
    maybe_dispatch_turn,
    read_response,
    take_back,
    turn_in_flight,
)
from shared.core.decide import IN_PROCESS, Decision, Limits
from shared.core.ending import end_workflow
from shared.core.events import apply as apply_graph_event
from shared.core.operations import apply_operation, record_operation
from shared.core.run import LatestSnapshot, TaskDefsNeededError
from shared.core.scripting import Sandbox
from shared.core.tasktypes import REGISTRY
from shared.core.timeouts import arm_next_deadline, enforce_timeouts
from shared.models.definitions import TaskDef, WorkflowDef
from shared.models.history import (
    ORCHESTRATOR,
    EventRaised,
    ExecutionCompleted,
    ExecutionResumed,
    ExecutionStarted,
    ExecutionSuspended,
    ExecutionTerminated,
    OrchestratorStarted,
)
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
from shared.models.runtime import TaskState, WorkflowState, WorkflowStatus

CODE = "code"
"""Code-first workflows (cairn.workflow): an orchestrator replayed from its history."""


class CodeEngine:
    kind = CODE
    decides_in_place = False
    """decide_code always works on its own copy."""

    def decide(
        self,
        snapshot: WorkflowDef,
        state: WorkflowState,
        events: Sequence[DeciderInbound],
        now: int,
        *,
        limits: Limits,
        task_defs: Mapping[str, TaskDef | None],
        sandbox: Sandbox | None,
        latest: LatestSnapshot | None = None,
        history: Sequence[TaskState] | None = None,
        in_place: bool = False,
    ) -> Decision:
        return decide_code(snapshot, state, events, now, limits=limits, task_defs=task_defs)

    def may_block(self, snapshot: WorkflowDef) -> bool:
        return False  # a code workflow's decisions run no scripts


def decide_code(
    snapshot: WorkflowDef,
    state: WorkflowState,
    events: Sequence[DeciderInbound],
    now: int,
    *,
    limits: Limits = Limits(),
    task_defs: Mapping[str, TaskDef | None] | None = None,
) -> Decision:
    """One decision. Activities run under the TaskDefs registered for their names: when one is
    not in `task_defs`, nothing is decided and `needs_task_defs` names it (the decider loads it
    and decides again, as for a DYNAMIC task)."""
    working = WorkflowState.model_validate_json(state.model_dump_json())
    run = CodeRun(snapshot, working, now, REGISTRY, limits, task_defs or {}, IN_PROCESS)
    try:
        for event in events:
            apply(run, event)
            record_outcomes(run)
        enforce_timeouts(run)
        record_outcomes(run)
        maybe_dispatch_turn(run)
        arm_next_deadline(run)
    except TaskDefsNeededError as needed:
        return Decision(state=state, needs_task_defs=needed.names)
    if run.dirty:
        run.state.update_time = now
    return Decision(
        state=run.state,
        tasks=[task for task in run.changed_tasks.values() if task.kind != ORCHESTRATOR],
        outbox=list(run.outbox),
        notes=run.notes,
        repairs=run.repairs,
        changed=run.dirty,
        history=list(run.appends),
    )


def apply(run: CodeRun, event: DeciderInbound) -> None:
    match event:
        case StartWorkflow():
            _on_start(run, event)
        case TaskResult():
            _on_task_result(run, event)
        case RaiseEvent():
            _on_external_event(run, event.name, event.input)
        case Signal():  # `cairn signal` and Conductor's task update by reference: an external event
            _on_external_event(run, event.task_ref_name, event.output)
        case SubWorkflowEnded():  # a JSON child's whole output is the orchestrator's result
            ended = (
                event
                if event.kind == "code"
                else event.model_copy(update={"output": {"result": event.output}})
            )
            apply_graph_event(run, ended)
        case TimerFired():
            apply_graph_event(run, event)
        case DecideRequest():
            run.woken = True  # a runtime connected, or the sweeper looks: a STALLED one tries again
            apply_graph_event(run, event)
        case TerminateWorkflow():
            _on_terminate(run, event)
        case PauseWorkflow():
            _on_pause(run, event)
        case ResumeWorkflow():
            _on_resume(run, event)
        case RestartWorkflow() | RerunWorkflow() | RetryWorkflow() | SkipTask() | UpdateVariables():
            record_operation(
                run,
                event,
                refusal=f"{event.type} is for JSON workflows; a code workflow's code decides what runs again",
            )
        case SubWorkflowReopened():
            run.reject("reopen_not_supported", "a code workflow does not take back a child's end")
        case _:
            assert_never(event)


def _on_start(run: CodeRun, start: StartWorkflow) -> None:
    state, code = run.state, code_of(run)
    if state.status.is_terminal:  # Dapr lets a finished instance's id be scheduled again
        _start_again(run, start)
        return
    if code.turns or code.history_length or code.pending:
        return  # a start delivered again
    add_event(
        run,
        ExecutionStarted(
            name=state.workflow_name,
            instance_id=state.workflow_id,
            input=state.input.get("input"),
            parent_instance_id=state.parent_workflow_id,
            parent_task_id=state.parent_workflow_task_id,
        ),
    )


def _start_again(run: CodeRun, start: StartWorkflow) -> None:
    """A new run of a finished instance under its id (a retried child workflow keeps its id):
    a new generation, as after continue_as_new, with the start's input and parent."""
    state = run.state
    state.status = WorkflowStatus.RUNNING
    state.reason_for_incompletion = None
    state.output = {}
    state.end_time = 0
    state.start_time = run.now
    state.correlation_id = start.correlation_id
    state.parent_workflow_id = start.parent_workflow_id
    state.parent_workflow_task_id = start.parent_workflow_task_id
    new_generation(run, start.input.get("input"), [], app=start.app)


def _on_task_result(run: CodeRun, result: TaskResult) -> None:
    turn = turn_in_flight(run)
    if turn is not None and result.task_id == turn.task_id:
        response = read_response(run, turn, result)
        if response is not None:
            apply_response(run, turn, response)
        return
    apply_graph_event(run, result)  # an activity's result (a stale turn's is rejected as superseded)


def _on_external_event(run: CodeRun, name: str, payload: object) -> None:
    if run.state.status.is_terminal:
        run.reject("event_workflow_ended", f"event {name!r} ignored: workflow is {run.state.status}")
        return
    add_event(run, EventRaised(name=name, input=payload))


def _on_terminate(run: CodeRun, command: TerminateWorkflow) -> None:
    state = run.state
    if state.status.is_terminal:
        run.reject("terminate_workflow_ended", f"terminate ignored: workflow already {state.status}")
        return
    turn = turn_in_flight(run)
    if turn is not None:
        take_back(run, turn)
    code = code_of(run)
    reason = command.reason or "terminated by operator"
    chunk = [OrchestratorStarted(timestamp=run.now).to_json_dict(), *code.pending]
    chunk.append(ExecutionTerminated(input=reason, timestamp=run.now).to_json_dict())
    chunk.append(
        ExecutionCompleted(orchestration_status="TERMINATED", result=reason, timestamp=run.now).to_json_dict()
    )
    code.pending = []
    append_history(run, chunk)
    state.output = {"result": command.reason} if command.reason else {}  # Dapr's terminate output
    end_workflow(run, WorkflowStatus.TERMINATED, reason, failure_workflow=False)


def _on_pause(run: CodeRun, command: PauseWorkflow) -> None:
    was = run.state.status
    apply_operation(run, command)
    if run.state.status is WorkflowStatus.PAUSED and was is not WorkflowStatus.PAUSED:
        add_event(run, ExecutionSuspended())


def _on_resume(run: CodeRun, command: ResumeWorkflow) -> None:
    was = run.state.status
    apply_operation(run, command)
    if was is WorkflowStatus.PAUSED and run.state.status is WorkflowStatus.RUNNING:
        if code_of(run).stall is not None:
            run.state.status = WorkflowStatus.STALLED
        add_event(run, ExecutionResumed())
