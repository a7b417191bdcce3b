"""The sweeper: the safety net. It never executes work; it asks the decider to look again.

A workflow is swept when its outbox has held unsent messages longer than a grace period (the
decider crashed between commit and publish) or when it is RUNNING and nothing was committed for a
configurable time. Either way the sweeper publishes a decide-request; the decider republishes the
outbox and re-evaluates, both idempotent. The stale scan runs on its own, longer interval because
on some MongoDB-protocol servers it reads the whole collection.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from services.runtime import sleep_unless_stopped
from shared.messaging import outgoing
from shared.models.messages import DecideRequest
from shared.ports.bus import Bus
from shared.ports.store import Store
from shared.topics import Topics

log = logging.getLogger(__name__)
HOUSEKEEPING_INTERVAL_MS = 60_000


class Sweeper:
    def __init__(
        self,
        store: Store,
        bus: Bus,
        topics: Topics,
        clock: Callable[[], int],
        outbox_grace_ms: int,
        stale_after_ms: int,
        stale_interval_ms: int,
        limit: int = 1000,
    ) -> None:
        self.store = store
        self.bus = bus
        self.topics = topics
        self.clock = clock
        self.outbox_grace_ms = outbox_grace_ms
        self.stale_after_ms = stale_after_ms
        self.stale_interval_ms = stale_interval_ms
        self.limit = limit
        self._last_stale_scan = 0
        self._last_housekeeping = 0

    async def sweep_once(self) -> list[str]:
        now = self.clock()
        ids = await self.store.find_unpublished(now - self.outbox_grace_ms, self.limit)
        if now - self._last_stale_scan >= self.stale_interval_ms:
            self._last_stale_scan = now
            stale = await self.store.find_stale_running(now - self.stale_after_ms, self.limit)
            ids += [workflow_id for workflow_id in stale if workflow_id not in ids]
        await self.bus.publish(
            [
                outgoing(
                    self.topics.decide_request,
                    DecideRequest(id=f"sweep:{workflow_id}:{now}", workflow_id=workflow_id, reason="sweep"),
                    workflow_id,
                )
                for workflow_id in ids
            ]
        )
        if ids:
            log.info("swept %d workflows", len(ids))
        if now - self._last_housekeeping >= HOUSEKEEPING_INTERVAL_MS:
            self._last_housekeeping = now
            await self.store.housekeeping(now)
        return ids

    async def run(self, stop: asyncio.Event, interval_s: float) -> None:
        while not stop.is_set():
            try:
                await self.sweep_once()
            except Exception:
                log.exception("sweep failed; retrying next interval")
            await sleep_unless_stopped(stop, interval_s)
