"""Retention on MongoDB: finished executions past their time go, with everything they own."""

from __future__ import annotations

import asyncio
from typing import Any

from shared.adapters.mongo_codec import FINISHED_STATUSES, MongoParts

# `$in` lists are sent in chunks of this many ids (one scan each on FerretDB).
ID_CHUNK = 1_000


def _chunks(ids: list[str]) -> list[list[str]]:
    return [ids[start : start + ID_CHUNK] for start in range(0, len(ids), ID_CHUNK)]


class MongoRetention(MongoParts):
    async def purge_finished(self, ended_before: int, limit: int) -> list[str]:
        """Delete up to `limit` finished executions last written before `ended_before` (epoch
        ms): their task records and claims, timers and timer claims, fences, outbox markers, and
        last the document itself, so a purge cut short is found and finished by the next one.

        Only `finished` is searched, so nothing running is ever touched. On MongoDB the
        `updatedAt` index serves the search; FerretDB scans `finished` once per call."""
        found = await self._finished.find(
            {"updatedAt": {"$lt": ended_before}}, {"_id": 1}, limit=limit
        ).to_list()
        ids = [data["_id"] for data in found]
        if not ids:
            return []
        task_ids: list[str] = []
        timer_ids: list[str] = []
        for chunk in _chunks(ids):
            task_ids += [
                t["_id"] async for t in self._tasks.find({"workflowInstanceId": {"$in": chunk}}, {"_id": 1})
            ]
            timer_ids += [
                t["_id"] async for t in self._timers.find({"workflowId": {"$in": chunk}}, {"_id": 1})
            ]
        deletes: list[Any] = []
        for chunk in _chunks(task_ids):
            deletes.append(self._task_claims.delete_many({"taskId": {"$in": chunk}}))
        for chunk in _chunks(timer_ids):
            deletes.append(self._timers.delete_many({"_id": {"$in": chunk}}))
            deletes.append(self._timer_claims.delete_many({"timerId": {"$in": chunk}}))
        for chunk in _chunks(ids):
            deletes.append(self._commits.delete_many({"workflowId": {"$in": chunk}}))
            deletes.append(self._outbox_pending.delete_many({"workflowId": {"$in": chunk}}))
            deletes.append(self._history.delete_many({"workflowId": {"$in": chunk}}))
        await asyncio.gather(*deletes)
        for chunk in _chunks(ids):
            await self._tasks.delete_many({"workflowInstanceId": {"$in": chunk}})
            # A copy left in `workflows` by a crash mid-move (a running one is the sweeper's).
            await self._workflows.delete_many(
                {"_id": {"$in": chunk}, "status": {"$in": list(FINISHED_STATUSES)}}
            )
            await self._finished.delete_many({"_id": {"$in": chunk}})
            await self._ids.delete_many({"_id": {"$in": chunk}})
        return ids
