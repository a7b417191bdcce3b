"""The definition snapshot a new execution embeds: what it runs for its whole life, whatever
happens to the registered definitions afterwards."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping

from shared.core.validation import DefinitionError, validate_workflow_def
from shared.models.definitions import ModelPrice, WorkflowDef, WorkflowTask
from shared.ports.store import Store


async def resolve_snapshot(
    store: Store, definition: WorkflowDef, prices: Mapping[str, ModelPrice] | None = None
) -> tuple[WorkflowDef | None, str]:
    """A deep copy of `definition` with, as Conductor's MetadataMapperService does:
    - every task's registered TaskDef (by the task's name) embedded where it has none inline —
      a SIMPLE task without one runs under TaskDef's defaults, a system task under no retries;
    - every SUB_WORKFLOW without a version fixed to the latest version registered now (a name
      nobody registered refuses the start: the child could never run);
    - a budget in dollars given the model prices of the configuration (CAIRN_AI_PRICES), under
      the definition's own, so a price change never changes a running execution.
    Returns (None, why) when the snapshot cannot run."""
    snapshot = definition.model_copy(deep=True)
    nodes = snapshot.all_tasks()
    wanted = sorted({node.name for node in nodes if node.task_definition is None})
    task_defs = await store.get_task_defs(wanted) if wanted else {}
    for node in nodes:
        if node.task_definition is None and node.name in task_defs:
            node.task_definition = task_defs[node.name]
    budget = snapshot.budget
    if budget is not None and budget.max_cost_usd is not None and prices:
        budget.prices = {**prices, **budget.prices}
    for node in nodes:
        problem = await _fix_sub_workflow_version(store, node)
        if problem:
            return None, problem
    try:
        validate_workflow_def(snapshot)
    except DefinitionError as error:
        return None, str(error)
    return snapshot, ""


async def _fix_sub_workflow_version(store: Store, node: WorkflowTask) -> str:
    params = node.sub_workflow_param
    if node.type != "SUB_WORKFLOW" or params is None or params.version is not None:
        return ""
    if (params.model_extra or {}).get("workflowDefinition") is not None:
        return ""
    if not params.name or "${" in params.name:
        return ""  # chosen at run time: the child's own start finds the latest version
    latest = await store.get_workflow_def(params.name, None)
    if latest is None:
        return f"sub-workflow {params.name!r} of task {node.task_reference_name!r} is not registered"
    params.version = latest.version
    return ""


Resolved = tuple[WorkflowDef | None, str]


class SnapshotMemo:
    """The snapshots of registered definitions this decider resolved, kept while the store's
    definitions_generation reads the same: nothing they were resolved from has changed since.

    Why: resolving is a parse of the registered definition, a deep copy, a read and parse of
    its TaskDefs and a full validation — about 1.5 ms for a ten-task definition on this machine,
    paid by every batch of starts (benchmarks/README.md). A store that cannot tell (generation
    None) gets nothing kept. A snapshot is shared by the executions that run it, as the store's
    own snapshot cache shares it: definitions are never changed in place."""

    def __init__(self, capacity: int = 256) -> None:
        self._capacity = capacity
        self._entries: OrderedDict[tuple[str, int | None], tuple[int, Resolved]] = OrderedDict()

    def get(self, name: str, version: int | None, generation: int | None) -> Resolved | None:
        entry = self._entries.get((name, version))
        if entry is None or generation is None or entry[0] != generation:
            return None
        self._entries.move_to_end((name, version))
        return entry[1]

    def put(self, name: str, version: int | None, generation: int | None, resolved: Resolved) -> None:
        if generation is None:
            return
        self._entries[(name, version)] = (generation, resolved)
        self._entries.move_to_end((name, version))
        while len(self._entries) > self._capacity:
            self._entries.popitem(last=False)
