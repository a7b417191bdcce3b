"""The end of a workflow: its output, the events others follow, and what it owes others — a
failureWorkflow to start, a parent to tell, child executions to stop."""

from __future__ import annotations

from typing import Any, Literal

from shared.core import ids
from shared.core.run import DecisionRun
from shared.models.messages import StartWorkflow, SubWorkflowEnded, WorkflowEvent
from shared.models.runtime import TaskStatus, WorkflowStatus

WorkflowEventName = Literal["completed", "failed", "terminated", "timed_out", "timeout_alert"]
END_EVENTS: dict[WorkflowStatus, WorkflowEventName] = {
    WorkflowStatus.COMPLETED: "completed",
    WorkflowStatus.FAILED: "failed",
    WorkflowStatus.TERMINATED: "terminated",
    WorkflowStatus.TIMED_OUT: "timed_out",
}


def workflow_output(run: DecisionRun) -> dict[str, Any]:
    """Conductor: the outputParameters evaluated, else the output of the last task in the list."""
    if run.snapshot.output_parameters:
        return run.evaluate(run.snapshot.output_parameters)
    finished = [t for t in run.state.tasks.values() if t.status.is_terminal]
    last = max(finished, key=lambda task: task.seq) if finished else None
    return dict(last.output_data) if last else {}


def complete_workflow(run: DecisionRun) -> None:
    """Conductor: the outputParameters evaluated, else the output of the last task in the list.
    A permissive task that failed on the way fails the workflow now."""
    permissive = [
        t
        for t in sorted(run.state.tasks.values(), key=lambda t: t.seq)
        if t.status.is_terminal and not t.status.is_successful and run.node_of(t).permissive
    ]
    if permissive:
        task = permissive[0]
        end_workflow(
            run,
            WorkflowStatus.FAILED,
            f"Task {task.task_id} ({task.reference_task_name}) failed with status {task.status}"
            + (f": {task.reason_for_incompletion}" if task.reason_for_incompletion else ""),
        )
        return
    run.state.output = workflow_output(run)
    end_workflow(run, WorkflowStatus.COMPLETED, None)


def end_workflow(
    run: DecisionRun,
    status: WorkflowStatus,
    reason: str | None,
    *,
    failure_workflow: bool = True,
    trigger_failure_workflow: bool = False,
) -> None:
    state = run.state
    if state.status.is_terminal:
        return
    state.status = status
    state.reason_for_incompletion = reason
    state.end_time = run.now
    state.held = []  # ended while PAUSED: nothing is left to start on a resume
    state.pending_skips = {}
    state.update_time = run.now
    run.dirty = True
    for task in sorted(state.tasks.values(), key=lambda t: t.seq):
        run.cancel(task, f"workflow {status}")
    for timer_id in sorted(state.timers):
        run.cancel_timer(timer_id)
    emit(run, status, END_EVENTS[status], reason)
    wants_failure_workflow = status in (
        WorkflowStatus.FAILED,
        WorkflowStatus.TIMED_OUT,
        WorkflowStatus.TERMINATED,
    )
    if failure_workflow and wants_failure_workflow and run.snapshot.failure_workflow:
        if status is not WorkflowStatus.TERMINATED or trigger_failure_workflow or _terminated_by_task(run):
            start_failure_workflow(run, run.snapshot.failure_workflow, status, reason)
    if state.parent_workflow_id and state.parent_workflow_task_id:
        run.publish(
            SubWorkflowEnded(
                id=f"{state.workflow_id}:ended:{state.epoch}",
                workflow_id=state.parent_workflow_id,
                task_id=state.parent_workflow_task_id,
                sub_workflow_id=state.workflow_id,
                status=status.value,
                output=state.output,
                reason=reason,
                kind="code" if state.code is not None else None,
            )
        )


def _terminated_by_task(run: DecisionRun) -> bool:
    """A TERMINATE task with terminationStatus TERMINATED starts the failureWorkflow (Conductor);
    an operator's terminate does so only when asked (triggerFailureWorkflow)."""
    return any(t.kind == "TERMINATE" and t.status is TaskStatus.COMPLETED for t in run.state.tasks.values())


def start_failure_workflow(run: DecisionRun, name: str, status: WorkflowStatus, reason: str | None) -> None:
    """Conductor's failureWorkflow: started with the failed execution's id, reason, failed
    task and its input and output. The id is derived from the failed workflow's, so the
    start is idempotent; both executions carry the link."""
    state = run.state
    failed = [
        t
        for t in state.tasks.values()
        if t.status.is_terminal and not t.status.is_successful and t.status is not TaskStatus.CANCELED
    ]
    failed_task = max(failed, key=lambda t: t.seq) if failed else None
    failure_id = ids.failure_workflow_id(state.workflow_id, state.epoch)
    state.failure_workflow_id = failure_id
    state.output = {**state.output, "conductor.failure_workflow": failure_id}
    run.publish(
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


def emit(run: DecisionRun, status: WorkflowStatus, event: WorkflowEventName, reason: str | None) -> None:
    state = run.state
    run.publish(
        WorkflowEvent(
            id=f"{state.workflow_id}:{event}" + (f":{state.epoch}" if state.epoch else ""),
            event=event,
            workflow_id=state.workflow_id,
            workflow_name=state.workflow_name,
            status=status.value,
            output=state.output,
            reason=reason,
        )
    )
