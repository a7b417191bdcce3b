"""decide(snapshot, state, events, now) -> Decision: the whole of Cairn's workflow semantics.

Pure: it reads its arguments, never mutates them, performs no I/O and reads no clock. The caller
(the decider service) persists `Decision.tasks`, commits `Decision.state` with a version check and
publishes `Decision.outbox` after the commit. Events that no longer match the state (a result for
a retried attempt, a cancelled timer, a duplicate signal) are ignored and explained in `notes`.

A decision is: apply the events (shared/core/events.py), enforce the timeouts that fell due
(timeouts.py), walk the task tree and start what is due (walk.py), then keep one timer armed for
the next deadline.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from shared.core.events import apply
from shared.core.run import (
    DEFAULT_LIMITS,
    DecisionRun,
    HistoryNeededError,
    LatestDefinitionNeededError,
    LatestSnapshot,
    Limits,
    Rejection,
    TaskDefsNeededError,
)
from shared.core.scripting import InProcessSandbox, Sandbox
from shared.core.tasktypes import REGISTRY, TaskTypeRegistry
from shared.core.timeouts import arm_next_deadline, enforce_timeouts
from shared.core.walk import advance_workflow
from shared.models.definitions import TaskDef, WorkflowDef
from shared.models.messages import DeciderInbound, OutboxMessage, StartWorkflow
from shared.models.runtime import TaskState, WorkflowState

__all__ = ["Decision", "Limits", "Rejection", "decide", "new_workflow_state"]

IN_PROCESS = InProcessSandbox()


@dataclass(frozen=True)
class Decision:
    state: WorkflowState
    tasks: list[TaskState] = field(default_factory=list)
    """Task executions created or changed by this decision (to upsert as task records)."""
    outbox: list[OutboxMessage] = field(default_factory=list)
    notes: list[Rejection] = field(default_factory=list)
    """Events the state machine rejected, and why; for logs, metrics and operators, never for
    control flow."""
    repairs: list[str] = field(default_factory=list)
    """What a sweeper's stale-workflow request made good (a lost dispatch or timer firing)."""
    changed: bool = False
    needs_task_defs: set[str] = field(default_factory=set)
    """Non-empty: nothing was decided; load these TaskDefs (names a task chose at run time) and
    decide again with them in `task_defs` (None for a name that is not registered)."""
    needs_latest_definition: bool = False
    """Nothing was decided: a restart asked for the latest definitions; resolve them and decide
    again with them in `latest`."""
    needs_history: bool = False
    """Nothing was decided: a rerun needs the task records; decide again with them in `history`."""
    history: list[tuple[int, int, list[dict[str, Any]]]] = field(default_factory=list)
    """A code workflow's history chunks to append with the commit: (generation, first, events)."""
    snapshot: WorkflowDef | None = None
    """A new definition snapshot the execution runs on from now on (restart with the latest
    definitions): the caller commits it with the state."""


def new_workflow_state(snapshot: WorkflowDef, start: StartWorkflow, now: int) -> WorkflowState:
    """The state of an execution that has been accepted but has not scheduled anything yet."""
    return WorkflowState(
        workflow_id=start.workflow_id,
        workflow_name=snapshot.name,
        workflow_version=snapshot.version,
        input=dict(start.input),
        variables=dict(snapshot.variables),
        correlation_id=start.correlation_id,
        create_time=now,
        start_time=now,
        update_time=now,
        parent_workflow_id=start.parent_workflow_id,
        parent_workflow_task_id=start.parent_workflow_task_id,
        idempotency_key=start.idempotency_key,
        started_by=start.id if start.idempotency_key is not None else None,
    )


def decide(
    snapshot: WorkflowDef,
    state: WorkflowState,
    events: Sequence[DeciderInbound],
    now: int,
    registry: TaskTypeRegistry = REGISTRY,
    *,
    limits: Limits = DEFAULT_LIMITS,
    task_defs: Mapping[str, TaskDef | None] | None = None,
    sandbox: Sandbox | None = None,
    latest: LatestSnapshot | None = None,
    history: Sequence[TaskState] | None = None,
    in_place: bool = False,
) -> Decision:
    """Apply `events` to `state` and walk the workflow on: the new state, what changed and what
    to send. `state` is left as it was, unless `in_place`.

    in_place: decide on `state` itself, not on a working copy. For a caller that owns the state
    (read for this decision, shared with nobody): the copy is the largest single cost of a
    decision (a JSON round trip of the whole state, ~65 µs at ten tasks). When the decision asks
    for more (needs_task_defs, needs_latest_definition, needs_history) or raises, the state is
    left part-way and must be read again before it is decided on."""
    # The working copy: a JSON round trip (in pydantic-core) is several times faster than
    # deepcopy, and the state is JSON by construction.
    working = state if in_place else WorkflowState.model_validate_json(state.model_dump_json())
    working.awaiting_continuation = False
    run = DecisionRun(
        snapshot, working, now, registry, limits, task_defs or {}, sandbox or IN_PROCESS, latest, history
    )
    try:
        for event in events:
            apply(run, event)
        enforce_timeouts(run)
        advance_workflow(run)
        arm_next_deadline(run)
    except TaskDefsNeededError as needed:
        return Decision(state=state, needs_task_defs=needed.names)
    except LatestDefinitionNeededError:
        return Decision(state=state, needs_latest_definition=True)
    except HistoryNeededError:
        return Decision(state=state, needs_history=True)
    if run.dirty:
        run.state.update_time = now
    return Decision(
        state=run.state,
        tasks=list(run.changed_tasks.values()),
        outbox=list(run.outbox),
        notes=run.notes,
        repairs=run.repairs,
        changed=run.dirty,
        snapshot=run.new_snapshot,
    )
