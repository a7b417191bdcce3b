"""A turn from work item to answer: replay the past events, apply the new ones, and say what the
orchestrator asks for — or why this code cannot go on with this instance (a stall).

Cairn is stricter than Dapr here: code that no longer matches its history stalls the instance
(kept, not failed) with a description naming the instance, the sequence number, what the history
recorded and what the code asked for; a corrected runtime takes it up with the next turn.
"""

from __future__ import annotations

import logging
from contextlib import nullcontext
from typing import Any

from cairn.workflow._guard import watching
from cairn.workflow._registry import OrchestratorNotRegisteredError, Registry, VersionNotRegisteredError
from cairn.workflow._replay import Replay, failure_of
from cairn.workflow._tasks import NonDeterminismError, WorkflowStateError
from shared.models.history import (
    HISTORY,
    CompleteOrchestration,
    PatchVersion,
    Stall,
    TurnResponse,
    WorkItem,
)

log = logging.getLogger("cairn.workflow")


def execute_turn(registry: Registry, item: dict[str, Any], *, strict: bool = False) -> dict[str, Any]:
    """The answer (a TurnResponse as JSON) to one work item (a WorkItem as JSON)."""
    work = WorkItem.model_validate(item)
    response = replay_turn(registry, work, strict=strict)
    return response.model_dump(by_alias=True, mode="json", exclude_none=True)


def replay_turn(registry: Registry, work: WorkItem, *, strict: bool = False) -> TurnResponse:
    """With `strict`, an orchestrator that reads the clock or random numbers itself stalls
    (cairn/workflow/_guard.py)."""
    replay = Replay(registry, work.instance_id)
    stall: Stall | None = None
    violations: list[str] = []
    try:
        with watching(violations) if strict else nullcontext():
            for event in work.past_events:
                replay.process(event)
            replay.is_replaying = False
            for event in work.new_events:
                replay.process(event)
        if violations:
            more = f" (and {len(violations) - 1} more)" if len(violations) > 1 else ""
            raise NonDeterminismError(
                f"instance {work.instance_id!r}: the orchestrator read {violations[0]}{more}; replays of it "
                "would differ: use ctx.current_utc_datetime and ctx.new_guid() instead"
            )
    except NonDeterminismError as error:
        stall = Stall(reason="NONDETERMINISM", description=str(error))
    except VersionNotRegisteredError as error:
        stall = Stall(reason="VERSION_NOT_AVAILABLE", description=str(error))
    except OrchestratorNotRegisteredError as error:
        if work.past_events or work.stalled:  # it ran, or waits for code: keep it (Cairn)
            stall = Stall(reason="WORKFLOW_NOT_REGISTERED", description=f"{error} (in this runtime)")
        else:  # a new instance of a name nobody registered fails, as in Dapr
            replay.completion = CompleteOrchestration(
                id=replay.next_id(), orchestration_status="FAILED", failure_details=failure_of(error)
            )
    except WorkflowStateError as error:
        replay.pending_actions.clear()  # Dapr fails the instance for these
        replay.completion = CompleteOrchestration(
            id=replay.next_id(), orchestration_status="FAILED", failure_details=failure_of(error)
        )
    if stall is not None:
        log.warning("workflow %s stalled: %s", work.instance_id, stall.description)
        return TurnResponse(turn=work.turn, stall=stall)
    version = None
    if replay.version or replay.encountered_patches:
        version = PatchVersion(name=replay.version, patches=replay.encountered_patches)
    return TurnResponse(
        turn=work.turn, actions=replay.actions(), custom_status=replay.custom_status, version=version
    )


def replay_history(registry: Registry, instance_id: str, events: list[dict[str, Any]]) -> TurnResponse:
    """Replay a whole recorded history as one turn of past events (cairn.workflow.testing)."""
    parsed = HISTORY.validate_python(events)
    work = WorkItem(instance_id=instance_id, name="", turn=0, past_events=parsed[:-1], new_events=parsed[-1:])
    return replay_turn(registry, work)
