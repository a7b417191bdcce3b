"""Start events with an idempotencyKey, as any Kafka client may send them (shared/idempotency.py).

Before a batch is decided, each keyed start is placed: it runs under the id its key derives
(forwarded there, keyed by that id, when the sender chose another — so the one decider that owns
that id decides it), or it is refused because an execution holds the key (FAIL, or
FAIL_ON_RUNNING while it runs), or it is the holder's own start delivered again. The store's
uniqueness of a new execution does the rest: starts of one key racing on one id start one."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from shared import idempotency, telemetry
from shared.messaging import outgoing
from shared.models.messages import IdempotencyStrategy, StartWorkflow
from shared.ports.bus import Outgoing
from shared.ports.store import Store
from shared.topics import Topics

log = logging.getLogger(__name__)
meter = telemetry.meter("cairn.decider")
refused_starts = meter.create_counter(
    "cairn.decider.keyed_starts_refused", description="Starts refused because an execution holds their key"
)


@dataclass
class Placement:
    keep: bool
    forward: list[Outgoing] = field(default_factory=list)


async def place(store: Store, topics: Topics, start: StartWorkflow) -> Placement:
    """Whether the batch decides this start itself, and what to forward instead."""
    key = start.idempotency_key
    if key is None:
        return Placement(keep=True)
    strategy = start.idempotency_strategy or IdempotencyStrategy.FAIL
    newest = await idempotency.current_holder(store, start.name, key)
    if newest is not None:  # the newest holder's own start, delivered again (even after it ended)
        holder = await store.load_workflow(idempotency.keyed_workflow_id(start.name, key, newest[0]))
        if holder is not None and holder.state.started_by == start.id:
            return Placement(keep=False)
    resolution = await idempotency.resolve(store, start.name, key, strategy)
    if resolution.workflow_id == start.workflow_id:
        return Placement(keep=True)  # to be created here, or the holder's own start again: ignored
    if resolution.action == "start":
        moved = start.model_copy(update={"workflow_id": resolution.workflow_id})
        return Placement(keep=False, forward=[outgoing(topics.workflow_start, moved, moved.workflow_id, {})])
    log.warning("start %s refused: %s", start.id, resolution.conflict_message(key))
    refused_starts.add(1, {"strategy": strategy.value})
    return Placement(keep=False)
