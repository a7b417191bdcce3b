"""Replay as a tool: test a change of an orchestrator against histories production recorded,
before deploying it (as Temporal's replayer does).

    from cairn.workflow.testing import replay
    replay(my_workflow, json.load(open("history.json")))   # `cairn history export ID -o history.json`

`replay` re-runs the function against every recorded event, as a runtime would on its next
turn, and raises NonDeterminismError when the code no longer matches the history: a call of
another kind or name at a recorded sequence number, a recorded call the code no longer makes,
a patch the history took that the code no longer takes, or an instance that ended otherwise than
the code now ends it. It returns what the code would ask for next when the instance is still
running. No server is needed: the history holds every result the function needs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from cairn.workflow._context import name_of
from cairn.workflow._executor import replay_turn
from cairn.workflow._registry import Registry
from cairn.workflow._tasks import NonDeterminismError
from shared.models.history import (
    HISTORY,
    ExecutionCompleted,
    ExecutionTerminated,
    HistoryEvent,
    OrchestratorAction,
    OrchestratorStarted,
    TurnResponse,
    WorkItem,
)

ENDINGS = (ExecutionCompleted, ExecutionTerminated)


def replay(
    workflow: Callable[..., Any],
    history: Mapping[str, Any] | Sequence[Mapping[str, Any]],
    *,
    instance_id: str | None = None,
) -> list[OrchestratorAction]:
    """Replay `workflow` against `history` (an export, or its list of events); the actions the
    code asks for next (empty for an instance that ended). Raises NonDeterminismError."""
    workflow = getattr(workflow, "__wrapped__", workflow)  # a @wfr.workflow reference: its function
    exported = history if isinstance(history, Mapping) else {"events": list(history)}
    events: list[HistoryEvent] = HISTORY.validate_python(list(exported["events"]))
    instance = instance_id or str(exported.get("instanceId", "replay"))
    ended = next((e for e in reversed(events) if isinstance(e, ExecutionCompleted)), None)
    replayed = [e for e in events if not isinstance(e, ENDINGS)]
    if not replayed:
        raise ValueError("the history has no events to replay")
    registry = Registry()
    registry.add_workflow(
        name_of(workflow) if exported.get("name") is None else str(exported["name"]), workflow
    )
    work = WorkItem(instance_id=instance, name=str(exported.get("name", "")), turn=0, past_events=replayed)
    response = replay_turn(registry, work)
    if response.stall is not None:
        raise NonDeterminismError(response.stall.description)
    _check_patches(events, response)
    if ended is not None:
        _check_ending(ended, response)
        return []
    return list(response.actions)


def _check_patches(events: Sequence[HistoryEvent], response: TurnResponse) -> None:
    taken = [p for e in events if isinstance(e, OrchestratorStarted) and e.version for p in e.version.patches]
    reported = response.version.patches if response.version is not None else []
    if taken and reported[: len(taken)] != taken:
        raise NonDeterminismError(f"the history took patches {taken}; the code now takes {reported}")


def _check_ending(ended: ExecutionCompleted, response: TurnResponse) -> None:
    completion = next((a for a in response.actions if a.type == "CompleteOrchestration"), None)
    if ended.orchestration_status == "TERMINATED":
        return  # an operator ended it; the code had no say
    if completion is None:
        raise NonDeterminismError(
            f"the history ended {ended.orchestration_status}, but the code does not end on it "
            f"(it asks for {[a.type for a in response.actions] or 'nothing'})"
        )
    status = getattr(completion, "orchestration_status", None)
    if status != ended.orchestration_status:
        raise NonDeterminismError(
            f"the history ended {ended.orchestration_status}; the code now ends {status}"
        )
    if status != "FAILED" and getattr(completion, "result", None) != ended.result:
        now = getattr(completion, "result", None)
        raise NonDeterminismError(f"the history ended with {ended.result!r}; the code now ends with {now!r}")
