"""The MongoDB adapter's timers: upserts, and claims fenced by insert (see `claim_due_timers`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from pymongo import ASCENDING, ReplaceOne, UpdateOne
from pymongo.errors import DuplicateKeyError

from shared.adapters.mongo_codec import MongoParts, insert_all, timer_claim_id
from shared.models.documents import TimerRecord

# Timer claim records of a timer that is gone are pruned once its newest is this old (far beyond
# any lease), at most this many per housekeeping run.
TIMER_CLAIM_RETENTION_MS = 10 * 60 * 1000
TIMER_CLAIM_PRUNE_BATCH = 10_000


class MongoTimers(MongoParts):
    async def upsert_timer(self, timer: TimerRecord) -> None:
        data = timer.model_dump(by_alias=True, mode="json")
        data["_id"] = timer.timer_id
        await self.updates(self._timers, [ReplaceOne({"_id": timer.timer_id}, data, upsert=True)])

    async def delete_timers(self, timer_ids: Sequence[str]) -> None:
        """The timers, then their claim records (one filter for all: on FerretDB one scan of the
        small claims collection, not one per timer). Records a crash in between leaves, and those
        of the previous adapter version (no `timerId`), are pruned by `housekeeping`."""
        if timer_ids:
            await self._timers.delete_many({"_id": {"$in": list(timer_ids)}})
            await self._timer_claims.delete_many({"timerId": {"$in": list(timer_ids)}})

    async def claim_due_timers(self, now: int, owner: str, lease_ms: int, limit: int) -> list[TimerRecord]:
        """A claim is the insert of `<timerId>@<claimUntil of the claim it replaces>` (`@0` for the
        first), carrying its own `claimUntil`: unique per lease generation, so of several replicas
        that saw the same expired (or no) claim exactly one inserts it. As in `claim_task`, the
        claims of a timer form a chain (each record's `claimUntil` names the next one's `_id`) and
        the record *is* the claim; the timer document's `claimUntil` is only a hint, written after
        the insert so the due-timer query skips claimed timers, and the chain is entered there.

        A claimant that dies between its insert and that write leaves the hint one generation
        behind: the next claimer's insert collides, it reads the record it collided with, and
        inserts the following generation once that claim has run out (before: the same id
        collided forever and the timer never fired). The same walk handles a re-arm, which resets
        the hint to 0, and a late hint write that sets it back. No conditional update anywhere:
        FerretDB does not run them atomically (docs/architecture.md).

        Round trips for a batch: the query, one insert_many, one bulk_write (`updates`); a
        collision adds a read, and after a dead claimant an insert (all collisions concurrently)."""
        if lease_ms <= 0:
            raise ValueError("claim_due_timers: lease_ms must be positive")
        until = now + lease_ms
        due = await self._timers.find(
            {"fireAt": {"$lte": now}, "claimUntil": {"$lte": now}}, sort=[("fireAt", ASCENDING)], limit=limit
        ).to_list()
        if not due:
            return []

        def claim(timer_id: str, replaces: int) -> dict[str, Any]:
            return {
                "_id": timer_claim_id(timer_id, replaces),
                "timerId": timer_id,
                "owner": owner,
                "at": now,
                "claimUntil": until,
            }

        inserted = await insert_all(
            self._timer_claims, [claim(d["_id"], d.get("claimUntil", 0)) for d in due]
        )
        collided = [d for d, ok in zip(due, inserted, strict=True) if not ok]
        behind = await asyncio.gather(
            *(
                self._claim_timer_behind(d["_id"], d.get("claimUntil", 0), now, lease_ms, claim)
                for d in collided
            )
        )
        taken = {d["_id"] for d, ok in zip(collided, behind, strict=True) if ok}
        won = [d for d, ok in zip(due, inserted, strict=True) if ok or d["_id"] in taken]
        if won:
            await self.updates(
                self._timers,
                [
                    UpdateOne({"_id": d["_id"]}, {"$set": {"claimUntil": until, "claimedBy": owner}})
                    for d in won
                ],
            )
        return [TimerRecord.model_validate({**d, "claimUntil": until, "claimedBy": owner}) for d in won]

    async def _claim_timer_behind(
        self,
        timer_id: str,
        replaces: int,
        now: int,
        lease_ms: int,
        claim: Callable[[str, int], dict[str, Any]],
    ) -> bool:
        """Follow the chain from the taken record `<timerId>@<replaces>` by `_id` lookups to its
        end; claim the next generation iff the last claim has run out."""
        while True:
            current = await self._timer_claims.find_one({"_id": timer_claim_id(timer_id, replaces)})
            if current is None:  # the end of the chain (or deleted with its timer meanwhile)
                try:
                    await self._timer_claims.insert_one(claim(timer_id, replaces))
                except DuplicateKeyError:
                    continue  # another claimer took it first: read it
                return True
            # The previous version's records have no claimUntil: their lease ran from `at`.
            claim_until = current.get("claimUntil", current.get("at", 0) + lease_ms)
            if not replaces < claim_until <= now:
                return False  # a live claim, whoever holds it (or a record naming no later one)
            replaces = claim_until

    async def _prune_timer_claims(self, now: int) -> None:
        """Drop the claim records of timers that are gone, all of a timer's records at once, once
        its newest is older than `TIMER_CLAIM_RETENTION_MS`.

        `delete_timers` removes a timer's records with it; what is left here is what a process
        left that died between the two deletes, a claimant that had read the timer just before its
        deletion and inserted after it, and records of the previous adapter version (no `timerId`).
        Safe because exclusivity needs the chain only while its timer exists: the chain of an
        existing timer is never touched, so every claimer following it, from whatever stale
        starting point, meets the same single next id. Pruning whole chains only, and long after
        their last claim, means no remnant of an old chain can branch off one that a redelivered
        arm request (the same timer id again) starts later."""
        horizon = now - TIMER_CLAIM_RETENTION_MS
        old = await self._timer_claims.find(
            {"at": {"$lt": horizon}}, {"timerId": 1}, limit=TIMER_CLAIM_PRUNE_BATCH
        ).to_list()
        by_timer: dict[str, list[str]] = {}
        for record in old:
            timer_id = record.get("timerId") or str(record["_id"]).rpartition("@")[0]
            by_timer.setdefault(timer_id, []).append(record["_id"])
        if not by_timer:
            return
        timer_ids = list(by_timer)
        existing, young = await asyncio.gather(
            asyncio.gather(*(self._timers.find_one({"_id": t}, {"_id": 1}) for t in timer_ids)),
            self._timer_claims.find(
                {"timerId": {"$in": timer_ids}, "at": {"$gte": horizon}}, {"timerId": 1}
            ).to_list(),
        )
        keep = {data["_id"] for data in existing if data is not None} | {r["timerId"] for r in young}
        doomed = [record_id for t, ids in by_timer.items() if t not in keep for record_id in ids]
        if doomed:
            await self._timer_claims.delete_many({"_id": {"$in": doomed}})
