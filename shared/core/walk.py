"""The walk: after the events of a decision, start whatever the tree makes due.

Idempotent: it looks at the executions the state holds and starts only what is missing, so
walking twice changes nothing the first walk did not. A list is walked in order: a node without
an execution is started (its type's `start`, which may finish at once for a server-side task),
and its type's `advance` says whether the list may move past it — a leaf once it succeeded, a
SWITCH once its case list is done, a FORK at once (its JOIN waits), a DO_WHILE once its loop
ended. Operators walk the lists they own from their `advance`.

The walk goes in waves, as Conductor's decider loop does: one pass starts at most one new node
per list (an operator's start may create the heads of its lists, as Conductor's mappers do), and
passes repeat until nothing new starts. So executions are created, and numbered, in Conductor's
order: a fork's branch heads and its JOIN come before the branches' second tasks.
"""

from __future__ import annotations

from shared.core.ending import complete_workflow
from shared.core.plan import ROOT_LIST
from shared.core.refs import Scope
from shared.core.run import DecisionRun
from shared.models.definitions import WorkflowTask
from shared.models.messages import DecideRequest
from shared.models.runtime import TaskStatus, WorkflowStatus


def walk_list(run: DecisionRun, tasks: list[WorkflowTask], scope: Scope) -> bool:
    for node in tasks:
        if run.state.status is not WorkflowStatus.RUNNING:
            return False
        task = run.current(node.task_reference_name, scope)
        if task is None:
            if run.may_start(node):
                run.start(node, scope)
                run.progressed = True
            return False
        node_run = run.node_of(task)
        if task.status.is_terminal and task.status is not TaskStatus.COMPLETED:
            # A tolerated failure (optional: COMPLETED_WITH_ERRORS; permissive: FAILED) or a
            # skip: whatever the execution owned does not run, and the list goes on past it.
            if task.status.is_successful or node_run.permissive:
                continue
            return False
        if not run.type_of(task).advance(run, node_run, task, scope):
            return False
    return True


def advance_workflow(run: DecisionRun) -> None:
    """Walk the root list in passes; complete the workflow once it is done and nothing is live."""
    root = run.plan.list_of(None, ROOT_LIST)
    while run.state.status is WorkflowStatus.RUNNING:
        run.progressed = False
        done = walk_list(run, root, ())
        if run.state.status is not WorkflowStatus.RUNNING:
            return
        if done and not any(not task.status.is_terminal for task in run.state.tasks.values()):
            complete_workflow(run)
            return
        if not run.progressed or run.out_of_steps:
            break
    if run.out_of_steps and run.state.status is WorkflowStatus.RUNNING:
        # Past the step budget: commit what is done and come back in a decision of its own, so
        # no decision runs unbounded and other workflows on this partition get their turn.
        state = run.state
        state.awaiting_continuation = True
        run.publish(
            DecideRequest(
                id=f"continue:{state.workflow_id}:{state.epoch}:{state.next_seq}",
                workflow_id=state.workflow_id,
                reason="step budget of one decision reached; continuing",
            )
        )
