"""The plan of a definition snapshot: where every node sits in the task tree.

Compiled once per snapshot (and kept for the snapshots in use), so a decision finds a node's
parent, its list and its place without searching the tree. A list is named by its owner's
reference and a key: the root list is (None, "tasks"); a SWITCH owns ("case:<value>") lists and
"defaultCase"; a FORK_JOIN owns "forkTasks[i]"; a DO_WHILE owns "loopOver".
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field

from shared.models.definitions import WorkflowDef, WorkflowTask

ROOT_LIST = "tasks"
SCRIPTED_TYPES = frozenset(
    {"INLINE", "SWITCH", "DECISION", "DO_WHILE", "JSON_JQ_TRANSFORM", "FORK_JOIN_DYNAMIC"}
)
ListId = tuple[str | None, str]
"""(owner reference or None for the root, list key)."""


@dataclass(frozen=True)
class Place:
    node: WorkflowTask
    parent: str | None
    """Reference of the operator owning the list this node sits in; None at the root."""
    list_key: str
    index: int
    loops: tuple[str, ...]
    """References of the DO_WHILE loops around this node, outermost first."""


def owned_lists(node: WorkflowTask) -> Iterator[tuple[str, list[WorkflowTask]]]:
    """The lists a node owns, in Conductor's order: cases (in definition order), default case,
    fork branches, loop body."""
    for value, tasks in node.decision_cases.items():
        yield f"case:{value}", tasks
    if node.default_case:
        yield "defaultCase", node.default_case
    for index, branch in enumerate(node.fork_tasks):
        yield f"forkTasks[{index}]", branch
    if node.loop_over:
        yield "loopOver", node.loop_over


@dataclass
class Plan:
    places: dict[str, Place] = field(default_factory=dict)
    lists: dict[ListId, list[WorkflowTask]] = field(default_factory=dict)
    descendants: dict[str, list[str]] = field(default_factory=dict)
    """Every node reference below an operator, at any depth."""
    has_scripts: bool = False
    """A node may run JavaScript or jq (so a decision may take up to a script's time limit)."""

    def place(self, ref: str) -> Place | None:
        return self.places.get(ref)

    def list_of(self, owner: str | None, key: str) -> list[WorkflowTask]:
        return self.lists.get((owner, key), [])

    def next_sibling(self, ref: str) -> WorkflowTask | None:
        place = self.places.get(ref)
        if place is None:
            return None
        siblings = self.lists[(place.parent, place.list_key)]
        return siblings[place.index + 1] if place.index + 1 < len(siblings) else None

    def previous_sibling(self, ref: str) -> WorkflowTask | None:
        place = self.places[ref]
        if place.index == 0:
            return None
        return self.lists[(place.parent, place.list_key)][place.index - 1]


def compile_plan(snapshot: WorkflowDef) -> Plan:
    plan = Plan()

    def visit(tasks: list[WorkflowTask], owner: str | None, key: str, loops: tuple[str, ...]) -> list[str]:
        plan.lists[(owner, key)] = tasks
        below: list[str] = []
        for index, node in enumerate(tasks):
            ref = node.task_reference_name
            plan.places[ref] = Place(node, owner, key, index, loops)
            plan.has_scripts |= node.type in SCRIPTED_TYPES
            below.append(ref)
            inner_loops = (*loops, ref) if node.type == "DO_WHILE" else loops
            mine: list[str] = []
            for list_key, children in owned_lists(node):
                mine += visit(children, ref, list_key, inner_loops)
            plan.descendants[ref] = mine
            below += mine
        return below

    visit(snapshot.tasks, None, ROOT_LIST, ())
    return plan


_CACHE: OrderedDict[int, tuple[WorkflowDef, Plan]] = OrderedDict()
_CACHE_SIZE = 512


def plan_of(snapshot: WorkflowDef) -> Plan:
    """The snapshot's plan, compiled on first use. Keyed by identity (the cache holds the
    snapshot, so its id is not reused while cached); a decision never mutates a snapshot."""
    key = id(snapshot)
    entry = _CACHE.get(key)
    if entry is not None and entry[0] is snapshot:
        _CACHE.move_to_end(key)
        return entry[1]
    plan = compile_plan(snapshot)
    _CACHE[key] = (snapshot, plan)
    while len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
    return plan
