"""Definition kinds: which engine decides a workflow document.

Cairn runs two kinds of definitions on one store, one set of services, one api: Conductor's JSON
task graphs, decided by `decide` (shared/core/decide.py), and — in a later issue — code-first
workflows replayed from their history by the user's runtime (the decider never runs user code;
it would send the history out as a work item and commit the actions that come back). The
decider looks the engine up by the document's `kind` instead of calling the graph engine
directly; adding a kind is one engine here and one registry line.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from shared.core.code.engine import CODE, CodeEngine
from shared.core.decide import Decision, Limits, decide
from shared.core.plan import plan_of
from shared.core.run import LatestSnapshot
from shared.core.scripting import Sandbox
from shared.models.definitions import TaskDef, WorkflowDef
from shared.models.messages import DeciderInbound
from shared.models.runtime import TaskState, WorkflowState

GRAPH = "graph"
"""Conductor's JSON workflows: the definition is a task tree."""


class UnknownDefinitionKindError(KeyError):
    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind

    def __str__(self) -> str:
        return f"no engine decides workflows of kind {self.kind!r} (known: {', '.join(sorted(ENGINES))})"


class DefinitionEngine(Protocol):
    kind: str
    decides_in_place: bool
    """Whether `decide(..., in_place=True)` works on the state it is given, leaving it part-way
    when the decision asks for more (the caller then reads it again); False: always a copy."""

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
        """`in_place`: the caller owns `state` and lets the decision change it rather than a
        copy (shared/core/decide.py), if the engine `decides_in_place`."""
        ...

    def may_block(self, snapshot: WorkflowDef) -> bool:
        """True when a decision may take long (scripts run in it): the decider then runs it off
        its event loop."""
        ...


class GraphEngine:
    kind = GRAPH
    decides_in_place = True

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
        return decide(
            snapshot,
            state,
            events,
            now,
            limits=limits,
            task_defs=task_defs,
            sandbox=sandbox,
            latest=latest,
            history=history,
            in_place=in_place,
        )

    def may_block(self, snapshot: WorkflowDef) -> bool:
        return plan_of(snapshot).has_scripts


ENGINES: dict[str, DefinitionEngine] = {GRAPH: GraphEngine(), CODE: CodeEngine()}


def engine_for(kind: str) -> DefinitionEngine:
    try:
        return ENGINES[kind]
    except KeyError:
        raise UnknownDefinitionKindError(kind) from None
