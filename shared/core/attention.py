"""When a workflow needs the sweeper's attention if nothing happens to it: the store indexes it,
so the sweeper pages through the workflows that are overdue and never through healthy idle ones.

A WAIT for a person that takes three days is idle and healthy: nothing about it is due, so it has
no attention time at all (before this, the sweeper's oldest-first scan returned such workflows
first, and past its limit of them a newly stuck workflow was never repaired). What can be overdue
is what the sweeper's repair makes good (events.repair_lost_messages): a timer that should have
fired, a worker task still SCHEDULED whose dispatch may have been lost, a decision that asked
itself to continue, and a RUNNING workflow that waits for nothing (an invariant violation). The
sweeper looks at a workflow once its attention time is `CAIRN_SWEEPER_STALE_AFTER_S` past. Pure.
"""

from __future__ import annotations

from shared.core.run import TIMER_DISPATCH
from shared.core.tasktypes import REGISTRY, TaskTypeRegistry
from shared.models.runtime import TaskStatus, WorkflowState, WorkflowStatus


def attention_at(state: WorkflowState, registry: TaskTypeRegistry = REGISTRY) -> int | None:
    """The earliest moment something should have happened to this execution by itself (epoch
    ms), or None when only the outside world can move it next (or it has ended)."""
    if state.status is not WorkflowStatus.RUNNING:
        return None  # ended, or PAUSED: only its operator moves it
    due = [timer.fire_at for timer in state.timers.values()]
    waiting_for_timer = {t.task_id for t in state.timers.values() if t.purpose == TIMER_DISPATCH}
    live = [task for task in state.tasks.values() if not task.status.is_terminal]
    for task in live:
        kind = registry.get(task.kind) if registry.supports(task.kind) else None
        if (
            task.status is TaskStatus.SCHEDULED
            and task.task_id not in waiting_for_timer
            and (kind is None or kind.worker_executed)
        ):
            due.append(task.update_time)
    if state.awaiting_continuation:
        due.append(state.update_time)
    waiting = [t for t in live if not registry.supports(t.kind) or not registry.get(t.kind).server_side]
    if not waiting and not state.timers and not state.awaiting_continuation and state.code is None:
        due.append(state.update_time)  # nothing can move it: an invariant violation to look at
    # (a code workflow with nothing live waits for an external event, which may take forever)
    return min(due) if due else None
