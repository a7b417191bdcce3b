"""The invariants a committed workflow state must satisfy, whatever happened to its messages.

A RUNNING workflow that waits for nothing outside itself is stuck for good: no worker holds a
task, no signal or child workflow is awaited, no timer will fire, so no event will ever arrive to
move it. (A live JOIN or DO_WHILE does not count: it only moves when something below it does.)
A PAUSED workflow waits for its operator; what it holds for the resume must be live.
The core never commits such a state, the sweeper checks every workflow it finds idle against
these rules, and the tests check every state they observe. Pure: no I/O.
"""

from __future__ import annotations

from shared.core.tasktypes import REGISTRY, TaskTypeRegistry
from shared.models.runtime import WorkflowState, WorkflowStatus


def invariant_violations(state: WorkflowState, registry: TaskTypeRegistry = REGISTRY) -> list[str]:
    """Why this state breaks an invariant; empty when it is healthy."""
    live = sorted(ref for ref, task in state.tasks.items() if not task.status.is_terminal)
    waiting = [
        ref
        for ref in live
        if not registry.supports(state.tasks[ref].kind) or not registry.get(state.tasks[ref].kind).server_side
    ]
    problems: list[str] = []
    if (
        state.status is WorkflowStatus.RUNNING
        and not waiting
        and not state.timers
        and not state.awaiting_continuation
        and state.code is None  # a code workflow may wait for an external event forever
    ):
        problems.append(
            f"workflow {state.workflow_id} is RUNNING with no task scheduled or in progress "
            "and no timer armed: nothing can move it"
        )
    if state.status.is_terminal:
        if live:
            problems.append(f"workflow {state.workflow_id} is {state.status} but tasks {live} are still live")
        if state.timers:
            problems.append(
                f"workflow {state.workflow_id} is {state.status} "
                f"but timers {sorted(state.timers)} are still pending"
            )
    if state.held and state.status is not WorkflowStatus.PAUSED:
        problems.append(f"workflow {state.workflow_id} is {state.status} but holds {state.held} for a resume")
    live_ids = {state.tasks[ref].task_id for ref in live}
    if any(task_id not in live_ids for task_id in state.held):
        problems.append(
            f"workflow {state.workflow_id} holds {sorted(set(state.held) - live_ids)}, "
            "which are not live executions"
        )
    for ref in live:
        task = state.tasks[ref]
        if not registry.supports(task.kind):
            problems.append(f"task {ref} of workflow {state.workflow_id} has unknown type {task.kind!r}")
    return problems
