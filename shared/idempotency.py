"""Idempotent starts (Orkes Conductor's `idempotencyKey` and `idempotencyStrategy`).

A key is scoped to a workflow name. Its executions run under ids derived from (name, key,
generation): two starts of one key choose the same id, so the store's uniqueness of a new
execution — the same commit point as any other create — lets exactly one of them start,
however many api replicas, deciders or redeliveries race. A generation is added only by
FAIL_ON_RUNNING starting again after the keyed execution ended; deleting (or purging) an
execution frees its generation, and so its key, as Orkes does.

- FAIL: start only if no execution holds the key (running or finished); else refused.
- RETURN_EXISTING: the execution that holds the key, else a new one.
- FAIL_ON_RUNNING: refused while the keyed execution is RUNNING or PAUSED; once it ended, a new
  one starts (under the next generation).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Literal

from shared.models.messages import IdempotencyStrategy
from shared.models.runtime import WorkflowStatus
from shared.ports.store import Store

_NAMESPACE = uuid.UUID("0d5a8f5e-8c1b-4f0e-9a57-3f1f6c2b7e44")
PROBE = 8
"""Generations looked up per store round trip."""


def keyed_workflow_id(name: str, key: str, generation: int) -> str:
    return str(uuid.uuid5(_NAMESPACE, f"{name}\x00{key}\x00{generation}"))


@dataclass(frozen=True)
class Resolution:
    """What a keyed start does: start `workflow_id`, return the existing one, or refuse."""

    action: Literal["start", "existing", "conflict"]
    workflow_id: str
    existing_status: WorkflowStatus | None = None

    def conflict_message(self, key: str) -> str:
        holder = f"{self.workflow_id}, {self.existing_status}"
        return f"Workflow with the idempotency key {key} already exists ({holder})"


async def current_holder(store: Store, name: str, key: str) -> tuple[int, WorkflowStatus] | None:
    """The newest generation of `key` that has an execution, and its status."""
    newest: tuple[int, WorkflowStatus] | None = None
    first = 0
    while True:
        ids = {keyed_workflow_id(name, key, g): g for g in range(first, first + PROBE)}
        found = await store.load_heads(list(ids))
        for workflow_id, heads in found.items():
            generation = ids[workflow_id]
            if newest is None or generation > newest[0]:
                newest = (generation, heads.status)
        if not found or max(ids[w] for w in found) < first + PROBE - 1:
            return newest
        first += PROBE


async def resolve(store: Store, name: str, key: str, strategy: IdempotencyStrategy) -> Resolution:
    holder = await current_holder(store, name, key)
    if holder is None:
        return Resolution("start", keyed_workflow_id(name, key, 0))
    generation, status = holder
    existing = keyed_workflow_id(name, key, generation)
    match strategy:
        case IdempotencyStrategy.RETURN_EXISTING:
            return Resolution("existing", existing, status)
        case IdempotencyStrategy.FAIL:
            return Resolution("conflict", existing, status)
        case IdempotencyStrategy.FAIL_ON_RUNNING:
            if status.is_terminal:
                return Resolution("start", keyed_workflow_id(name, key, generation + 1))
            return Resolution("conflict", existing, status)
