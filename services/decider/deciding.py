"""One workflow's decision as the decider makes it: the engine's decide(), handed what it asks
for (TaskDefs named at run time, the latest definition for a restart, the task records for a
rerun), off the event loop when the definition runs scripts, and on the document's own state
when the decider owns the document.

Why in place: the working copy of the state (a JSON round trip of the whole state) was the
largest single cost of a decision, 10-14% of `cairn dev`'s CPU in the W1 profile
(benchmarks/README.md). A document the decider read for this decision (from the store, or taken
out of its recent cache) is held by nothing else, so the decision may change it directly. The
price is paid only when a decision asks for more: its state is then part-way, so the document is
read again from the store (the same version: decided again on it; a newer one: the workflow is
decided again from a fresh read, as after a lost commit).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Mapping
from dataclasses import dataclass, field

from services.decider.snapshot import resolve_snapshot
from shared.core.decide import Decision, Limits
from shared.core.engines import engine_for
from shared.core.scripting import Sandbox
from shared.models.definitions import ModelPrice, TaskDef, WorkflowDef
from shared.models.documents import WorkflowDocument
from shared.models.messages import DeciderInbound
from shared.models.runtime import TaskState
from shared.ports.store import Store

MAX_TASK_DEF_ROUNDS = 5


class WorkflowMovedOnError(Exception):
    """A document decided in place had to be read again, and the store holds another version
    (or none): the workflow is to be decided again from a fresh read."""


@dataclass
class Deciding:
    store: Store
    limits: Limits
    sandbox: Sandbox | None = None
    prices: Mapping[str, ModelPrice] = field(default_factory=dict)
    reads_again: int = 0
    """Documents decided in place that had to be read again (for tests and benchmarks)."""

    async def decide(
        self, document: WorkflowDocument, events: list[DeciderInbound], now: int, *, owned: bool
    ) -> tuple[Decision, WorkflowDocument]:
        """The decision, and the document it was made on: `document` itself, or, when a decision
        made in place (`owned`) asked for more, the same version read again. Raises
        WorkflowMovedOnError when that read finds another version."""
        assert document.definition is not None
        task_defs: dict[str, TaskDef | None] = {}
        latest: tuple[WorkflowDef | None, str] | None = None
        history: list[TaskState] | None = None
        engine = engine_for(document.kind)
        in_place = owned and engine.decides_in_place
        for _ in range(MAX_TASK_DEF_ROUNDS):
            call = functools.partial(
                engine.decide,
                document.definition,
                document.state,
                events,
                now,
                limits=self.limits,
                task_defs=task_defs,
                sandbox=self.sandbox,
                latest=latest,
                history=history,
                in_place=in_place,
            )
            decision = await asyncio.to_thread(call) if engine.may_block(document.definition) else call()
            if decision.needs_latest_definition:  # a restart onto the latest definitions
                latest = await self._latest_snapshot(document.state.workflow_name)
            elif decision.needs_history:  # a rerun: the task records, as committed
                records = await self.store.list_tasks(document.workflow_id)
                history = [task for task in records if task.workflow_version <= document.version]
            elif decision.needs_task_defs:
                found = await self.store.get_task_defs(sorted(decision.needs_task_defs))
                task_defs.update({name: found.get(name) for name in decision.needs_task_defs})
            else:
                return decision, document
            if in_place:
                document = await self._read_again(document)
        raise RuntimeError(f"decision kept asking for TaskDefs: {sorted(task_defs)}")

    async def _read_again(self, document: WorkflowDocument) -> WorkflowDocument:
        """The document as committed at its version, for a decision made in place part-way."""
        self.reads_again += 1
        try:
            fresh = (await self.store.load_workflows([document.workflow_id])).get(document.workflow_id)
        except Exception as error:  # decided again in the next round, whose own read fails the
            # batch (redelivered) if the store is still failing: not a dead letter for a blip
            raise WorkflowMovedOnError(document.workflow_id) from error
        if fresh is None or fresh.version != document.version:
            raise WorkflowMovedOnError(document.workflow_id)
        return fresh

    async def _latest_snapshot(self, name: str) -> tuple[WorkflowDef | None, str]:
        found = await self.store.get_workflow_def(name, None)
        if found is None:
            return None, f"workflow definition {name!r} is no longer registered"
        return await resolve_snapshot(self.store, found, self.prices)
