"""The timer service: durable timers in the store, fired as `timer.fired` events.

Arm/cancel requests are applied to the store idempotently. A firing loop claims due timers with a
lease (a conditional update), publishes their events, then deletes them. Two replicas never both
claim one timer; a replica that dies holding a claim loses it when the lease runs out, so the
timer fires late but fires. A duplicate firing is harmless: the decider ignores timers it no
longer has pending.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

from pydantic import TypeAdapter

from services.runtime import sleep_unless_stopped
from shared import telemetry
from shared.messaging import PoisonMessageError, dead_letter, outgoing, parse
from shared.models.documents import TimerRecord
from shared.models.messages import TimerFired, TimerRequest
from shared.ports.bus import Bus, Outgoing, Received
from shared.ports.store import Store
from shared.topics import Topics

log = logging.getLogger(__name__)
tracer = telemetry.tracer("cairn.timer")
TIMER_REQUEST: TypeAdapter[TimerRequest] = TypeAdapter(TimerRequest)


class TimerHandler:
    def __init__(
        self, store: Store, bus: Bus, topics: Topics, clock: Callable[[], int], owner: str, lease_ms: int
    ) -> None:
        self.store = store
        self.bus = bus
        self.topics = topics
        self.clock = clock
        self.owner = owner
        self.lease_ms = lease_ms

    async def handle_requests(self, batch: Sequence[Received]) -> None:
        """Apply a batch's arms and cancels in the order they were published: for each timer id
        the last request wins (a cancel then a re-arm of one id leaves the timer armed)."""
        dead: list[Outgoing] = []
        last: dict[str, TimerRequest] = {}
        for received in batch:
            try:
                request = parse(received, TIMER_REQUEST)
            except PoisonMessageError as error:
                dead.append(dead_letter(received, str(error), self.topics.dead_letter))
                continue
            last.pop(request.timer_id, None)
            last[request.timer_id] = request
        for request in last.values():
            if request.action == "arm":
                await self.store.upsert_timer(
                    TimerRecord(
                        timer_id=request.timer_id, workflow_id=request.workflow_id, fire_at=request.fire_at
                    )
                )
        await self.store.delete_timers([r.timer_id for r in last.values() if r.action == "cancel"])
        await self.bus.publish(dead)

    async def fire_due(self, limit: int = 500) -> int:
        """Claim, fire and delete due timers once; returns how many fired."""
        claimed = await self.store.claim_due_timers(self.clock(), self.owner, self.lease_ms, limit)
        if not claimed:
            return 0
        with tracer.start_as_current_span("cairn.timer.fire", attributes={"cairn.timers": len(claimed)}):
            headers = telemetry.inject()
            await self.bus.publish(
                [
                    outgoing(
                        self.topics.timer_fired,
                        TimerFired(
                            id=f"{timer.timer_id}:fired",
                            workflow_id=timer.workflow_id,
                            timer_id=timer.timer_id,
                        ),
                        timer.workflow_id,
                        headers,
                    )
                    for timer in claimed
                ]
            )
        await self.store.delete_timers([timer.timer_id for timer in claimed])
        return len(claimed)

    async def run_firing_loop(self, stop: asyncio.Event, interval_s: float) -> None:
        while not stop.is_set():
            try:
                fired = await self.fire_due()
            except Exception:
                log.exception("firing due timers failed; retrying")
                fired = 0
            if fired == 0:
                await sleep_unless_stopped(stop, interval_s)
