"""The sweeper: the safety net. It never executes work; it asks the decider to look again.

A workflow is swept when its outbox has held unsent messages longer than a grace period (the
decider crashed between commit and publish) or when something about it was due a configurable time
ago and it has not moved (its attention time, shared/core/attention.py: a timer that should have
fired, a dispatch that may be lost). Healthy idle workflows, such as a WAIT for a person, are never
scanned, and the scan pages with a cursor, so no stuck workflow waits behind others. Either way
the sweeper publishes a decide-request; the decider republishes the
outbox and re-evaluates, both idempotent. For an idle workflow the request also says since when
it has been idle, and the decider makes good a dispatch or timer firing that was lost; the
sweeper checks every idle workflow against the state invariants first. The stale scan runs on
its own, longer interval because on some MongoDB-protocol servers it reads the whole collection.

Retention is the sweeper's too: with housekeeping, finished executions older than the retention
are purged with everything they own (Store.purge_finished), a bounded number per pass.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from services.runtime import sleep_unless_stopped
from shared import telemetry
from shared.core.invariants import invariant_violations
from shared.messaging import outgoing
from shared.models.messages import DecideRequest
from shared.ports.bus import Bus, Outgoing
from shared.ports.store import Store
from shared.topics import Topics

log = logging.getLogger(__name__)
invariant_violated = telemetry.meter("cairn.sweeper").create_counter(
    "cairn.sweeper.invariant_violations",
    description="Idle workflows found breaking an invariant (shared/core/invariants.py)",
)
purged_total = telemetry.meter("cairn.sweeper").create_counter(
    "cairn.sweeper.purged", description="Finished executions purged past the retention"
)
HOUSEKEEPING_INTERVAL_MS = 60_000
PURGE_BATCH = 500
PURGE_BATCHES_PER_PASS = 20  # at most 10,000 executions a pass: the rest waits for the next one
PURGE_INTERVAL_MS = 3_600_000


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
        retention_ms: int = 0,
        housekeeping_interval_ms: int = HOUSEKEEPING_INTERVAL_MS,
    ) -> None:
        self.store = store
        self.bus = bus
        self.topics = topics
        self.clock = clock
        self.outbox_grace_ms = outbox_grace_ms
        self.stale_after_ms = stale_after_ms
        self.stale_interval_ms = stale_interval_ms
        self.limit = limit
        self.retention_ms = retention_ms
        """Finished executions last written longer ago than this are purged; 0 keeps them."""
        self.housekeeping_interval_ms = housekeeping_interval_ms
        self._last_stale_scan = 0
        self._last_housekeeping = 0
        self._last_purge = 0
        self._purge_backlog = False
        self._cursor: tuple[int, str] | None = None
        """Where the last scan of overdue workflows stopped: the next one goes on from there, so
        past `limit` of them every one is still reached (the cursor wraps at the end)."""

    async def sweep_once(self) -> list[str]:
        now = self.clock()
        unsent = await self.store.find_unpublished(now - self.outbox_grace_ms, self.limit)
        stale: list[str] = []
        if now - self._last_stale_scan >= self.stale_interval_ms:
            self._last_stale_scan = now
            stale = await self._overdue(now - self.stale_after_ms)
            await self._check_invariants(stale)
        requests = [self._request(workflow_id, now, stale_before=None) for workflow_id in unsent]
        requests += [
            self._request(workflow_id, now, stale_before=now - self.stale_after_ms)
            for workflow_id in stale
            if workflow_id not in unsent
        ]
        ids = [*unsent, *(workflow_id for workflow_id in stale if workflow_id not in unsent)]
        await self.bus.publish(requests)
        if ids:
            log.info("swept %d workflows", len(ids))
        if now - self._last_housekeeping >= self.housekeeping_interval_ms:
            self._last_housekeeping = now
            await self.store.housekeeping(now)
            await self.purge(now)
        return ids

    async def purge(self, now: int) -> int:
        """Purge finished executions past the retention, up to a bound per pass; the count.

        The search for them scans `finished` on FerretDB, so it runs at most every tenth of the
        retention (hourly at the default 30 days) — unless the last pass stopped at its bound."""
        if self.retention_ms <= 0:
            return 0
        if not self._purge_backlog and now - self._last_purge < min(
            PURGE_INTERVAL_MS, self.retention_ms // 10
        ):
            return 0
        self._last_purge = now
        purged = 0
        self._purge_backlog = True
        for _ in range(PURGE_BATCHES_PER_PASS):
            batch = await self.store.purge_finished(now - self.retention_ms, PURGE_BATCH)
            purged += len(batch)
            if len(batch) < PURGE_BATCH:
                self._purge_backlog = False
                break
        if purged:
            purged_total.add(purged)
            log.info("purged %d finished executions past the retention", purged)
        return purged

    async def _overdue(self, before: int) -> list[str]:
        """The next page of workflows whose attention time is before `before`."""
        page = await self.store.find_needing_attention(before, self._cursor, self.limit)
        self._cursor = page[-1] if len(page) >= self.limit else None
        return [workflow_id for _, workflow_id in page]

    def _request(self, workflow_id: str, now: int, stale_before: int | None) -> Outgoing:
        """A decide-request; for an idle workflow it carries the idle cutoff, so the decider also
        makes good a dispatch or timer firing that was lost (DecideRequest.stale_before)."""
        reason = "stale" if stale_before is not None else "unsent outbox"
        request = DecideRequest(
            id=f"sweep:{workflow_id}:{now}", workflow_id=workflow_id, reason=reason, stale_before=stale_before
        )
        return outgoing(self.topics.decide_request, request, workflow_id)

    async def _check_invariants(self, workflow_ids: list[str]) -> None:
        """Idle workflows are where a broken invariant would hide: check each one and say so
        loudly (log + metric). The decide-request that follows is what moves them on."""
        if not workflow_ids:
            return
        documents = await self.store.load_workflows(workflow_ids)
        for document in documents.values():
            for problem in invariant_violations(document.state):
                invariant_violated.add(1)
                log.error("invariant violated: %s", problem)

    async def run(self, stop: asyncio.Event, interval_s: float) -> None:
        while not stop.is_set():
            try:
                await self.sweep_once()
            except Exception:
                log.exception("sweep failed; retrying next interval")
            await sleep_unless_stopped(stop, interval_s)
