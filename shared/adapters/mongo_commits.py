"""The MongoDB adapter's commit point, and where a committed workflow document lives.

Fences (docs/architecture.md, "Fenced commits"): a commit of version v+1 is the insert of
`{_id: "<workflowId>#<v+1>"}` into the fence collection of its base version (`mongo_fences`),
carrying the whole new document and its task records; exactly one writer can insert it. The
document is then materialised as the read model: into `workflows` while the execution runs,
into `finished` once it has ended (inserted there first, then deleted from `workflows`: see
`MongoParts`). A document that comes back to life from `finished` (a later issue's restart)
moves back the same way round.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Sequence
from typing import Any

from pymongo import ReplaceOne

from shared.adapters.mongo_codec import (
    FINISHED_STATUSES,
    fence_id,
    history_to_mongo,
    insert_all,
    is_finished,
    task_from_mongo,
    task_to_mongo,
    workflow_to_mongo,
)
from shared.adapters.mongo_fences import MongoFences
from shared.ports.store import Commit

log = logging.getLogger(__name__)


class MongoCommits(MongoFences):
    async def commit_workflows(self, commits: Sequence[Commit]) -> list[bool]:
        """Group commit: four round-trip levels for the whole batch, whatever its size.

        A commit of version v+1 wins only if (a) its fence `W#v+1` is inserted and (b) the stored
        document is still at v (or at v+1: ours, rolled forward by another decider meanwhile). (b)
        is what keeps a decider frozen past the fences' retention from committing over newer state:
        its fence insert would succeed (the old `W#v+1` was pruned), its version check does not.
        (b) costs a read, so it is made only for a commit whose base was read long ago
        (`_read_long_ago`); for any other, a pruned `W#v+1` is impossible and (a) decides alone
        (measured: the read on every commit cost 10-15% of W1 on FerretDB).
        Task records travel inside the fence and are written only once the commit has won, so a
        losing decision never overwrites the winner's records; a crash before they are written is
        repaired by the roll-forward from the fence, which never has been pruned while it is newer
        than the document (see `_prune_fences`).

        A create (expected version 0) is the insert of its id into `workflow_ids` (a record per
        execution, finished or not, kept until it is purged), then into `workflows`: an id that
        finished long ago loses, as one still running does, without a look into `finished` (a
        look for an id that is not there scans it on FerretDB). An id left in `workflow_ids` by a
        create that died before its document was written is found so, and taken."""
        for commit in commits:
            if commit.document.version != commit.expected_version + 1:
                raise ValueError("commit: document.version must be expected_version + 1")
        snapshot_ids = await self._snapshots.store([commit.document.definition for commit in commits])
        data = [workflow_to_mongo(c.document, sid) for c, sid in zip(commits, snapshot_ids, strict=True)]
        for one in data:  # which commit made the stored version: rivals' share version and times
            one["commitId"] = uuid.uuid4().hex
        markers = [
            {
                "_id": f"{c.document.workflow_id}#{c.document.version}#{uuid.uuid4().hex}",
                "workflowId": c.document.workflow_id,
                "version": c.document.version,
                "since": c.document.updated_at,
            }
            if c.document.outbox
            else None
            for c in commits
        ]
        creates = [i for i, commit in enumerate(commits) if commit.expected_version == 0]
        updates = [i for i, commit in enumerate(commits) if commit.expected_version > 0]
        # 1. before the commit point: unsent-outbox markers, and a new execution's records (a
        # create has no fence to carry them; rivals creating one execution decide alike).
        await asyncio.gather(
            self.upsert_tasks([task for i in creates for task in commits[i].tasks]),
            self.write_history([history_to_mongo(c) for i in creates for c in commits[i].history]),
            insert_all(self._outbox_pending, [m for m in markers if m is not None]),
        )
        # 2. the commit point: create new documents, insert fences (with the records) for updated
        # ones, and read the stored versions (by _id, the one lookup FerretDB indexes).
        homes: dict[int, Any] = {}
        fences = {i: self._fence_of(commits[i]) for i in updates}
        late: list[int] = []
        for i in updates:
            homes[i], always_read = self.fence_home(commits[i])
            if always_read or self._read_long_ago(commits[i]):
                late.append(i)
        creates_allowed = await self._claim_ids(creates, data)
        created, fenced, stored = await asyncio.gather(
            insert_all(self._workflows, [data[i] for i in creates_allowed]),
            self._insert_fences(updates, homes, fences, commits, data),
            self.find_current([data[i]["_id"] for i in late], {"version": 1, "commitId": 1}),
        )
        won = [False] * len(commits)
        for i, ok in zip(creates_allowed, created, strict=True):
            won[i] = ok
        winners: list[int] = []
        stale: list[int] = []
        for i, ok in zip(updates, fenced, strict=True):
            if not ok:
                continue
            if i not in late or self._still_ours(stored.get(data[i]["_id"]), commits[i], data[i]):
                winners.append(i)
            else:  # the document moved on (or is gone) behind this decider's back
                stale.append(i)
        # 3. materialise: the winners' task records and history, then the read model.
        await asyncio.gather(
            self.upsert_tasks([task for i in winners for task in commits[i].tasks]),
            self.write_history([history_to_mongo(c) for i in winners for c in commits[i].history]),
        )
        for i in await self._materialise(winners, data, (homes, fences)):
            won[i] = True
        born_finished = [data[i] for i in creates_allowed if won[i] and is_finished(data[i])]
        if born_finished:
            await self._retire(born_finished)
        if stale:
            log.warning(
                "stale commits refused: %s", [f"{data[i]['_id']}#{data[i]['version']}" for i in stale]
            )
            await asyncio.gather(*(homes[i].delete_one({"_id": fences[i]}) for i in stale))
        for i, ok in zip(updates, fenced, strict=True):
            if not ok:
                await self._roll_forward(homes[i], fences[i])
        lost_markers = [m["_id"] for m, ok in zip(markers, won, strict=True) if m is not None and not ok]
        if lost_markers:
            await self._outbox_pending.delete_many({"_id": {"$in": lost_markers}})
        return won

    async def _insert_fences(
        self,
        updates: list[int],
        homes: dict[int, Any],
        fences: dict[int, str],
        commits: Sequence[Commit],
        data: list[dict[str, Any]],
    ) -> list[bool]:
        """Insert the updates' fences, one insert per fence collection; result i: update i's."""
        by_home: dict[str, list[int]] = {}
        for i in updates:
            by_home.setdefault(homes[i].name, []).append(i)
        results = await asyncio.gather(
            *(
                insert_all(
                    homes[members[0]],
                    [
                        {
                            **data[i],
                            "_id": fences[i],
                            "records": [task_to_mongo(task) for task in commits[i].tasks],
                            "history": [history_to_mongo(chunk) for chunk in commits[i].history],
                        }
                        for i in members
                    ],
                )
                for members in by_home.values()
            )
        )
        won = {
            i: ok
            for members, oks in zip(by_home.values(), results, strict=True)
            for i, ok in zip(members, oks, strict=True)
        }
        return [won[i] for i in updates]

    async def _claim_ids(self, creates: list[int], data: list[dict[str, Any]]) -> list[int]:
        """The creates whose id is new: inserted into `workflow_ids`, or found there with no
        execution under it (a create that died in between; rare, and the look costs a scan)."""
        inserted = await insert_all(self._ids, [{"_id": data[i]["_id"]} for i in creates])
        taken = [i for i, ok in zip(creates, inserted, strict=True) if not ok]
        existing = await self.find_current([data[i]["_id"] for i in taken], {"_id": 1}) if taken else {}
        return [i for i, ok in zip(creates, inserted, strict=True) if ok or data[i]["_id"] not in existing]

    @staticmethod
    def _still_ours(stored: dict[str, Any] | None, commit: Commit, data: dict[str, Any]) -> bool:
        """A checked commit stands if the stored document is still at its base version, or is
        this very commit (rolled forward by a rival between the fence insert and the read) —
        not merely at its version: that one may be a rival's whose fence went with its bucket."""
        if stored is None:
            return False
        if stored["version"] == commit.expected_version:
            return True
        return stored["version"] == data["version"] and stored.get("commitId") == data["commitId"]

    def _read_long_ago(self, commit: Commit) -> bool:
        """Whether a commit's base was read so long ago that the fence of its next version may
        have been pruned since: a fence is kept at least `fence_retention` after it was written,
        so a commit within half of it (the other half absorbs clock skew between the decider and
        the sweeper's housekeeping) is fenced by the insert alone and needs no version read."""
        if commit.read_at is None:
            return True
        return self._wall_clock_ms() - commit.read_at > self._fence_retention_ms / 2

    def _materialise_filter(self, data: dict[str, Any]) -> dict[str, Any]:
        """Never replace a newer version — where the server can check that cheaply and atomically.

        On FerretDB a filter beyond `{_id}` costs more and is not atomic anyway; the version read
        at the commit point stands in for it there. What it cannot see is a rival building on this
        very commit in the few milliseconds before the replace, which briefly shows the older
        version until the next decision's failed fence insert rolls it forward."""
        if self._atomic_updates:
            return {"_id": data["_id"], "version": {"$lt": data["version"]}}
        return {"_id": data["_id"]}

    async def _materialise(
        self, winners: list[int], data: list[dict[str, Any]], fenced: tuple[dict[int, Any], dict[int, str]]
    ) -> list[int]:
        """Make each winner's document the read model; returns the winners that stand."""
        running = [i for i in winners if not is_finished(data[i])]
        ending = [i for i in winners if is_finished(data[i])]
        kept: list[int] = []
        if running:
            matched = await self.updates(
                self._workflows, [ReplaceOne(self._materialise_filter(data[i]), data[i]) for i in running]
            )
            kept += running if matched == len(running) else await self._keep(running, data, fenced)
        if ending:
            placed = await self._retire([data[i] for i in ending])
            kept += [i for i, ok in zip(ending, placed, strict=True) if ok]
        return kept

    async def _retire(self, documents: list[dict[str, Any]]) -> list[bool]:
        """Move finished documents to `finished`: insert there (replace, never by an older version,
        when it finished before: a late event, a roll-forward), then delete from `workflows`.
        Result i: document i is the read model now (False: a newer version is)."""
        inserted = await insert_all(self._finished, documents)
        placed = list(inserted)
        again = [i for i, ok in enumerate(inserted) if not ok]
        if again:  # rare: a finished execution committed again (FerretDB scans `finished` here)
            # One after another: each replace that matches holds two of FerretDB-on-PostgreSQL's
            # pool connections while it runs (`UPDATES_PER_COMMAND`).
            matched = [
                await self.updates(
                    self._finished, [ReplaceOne(self._materialise_filter(documents[i]), documents[i])]
                )
                for i in again
            ]
            unmatched = [i for i, n in zip(again, matched, strict=True) if n == 0]
            versions = await asyncio.gather(
                *(self._finished.find_one({"_id": documents[i]["_id"]}, {"version": 1}) for i in unmatched)
            )
            for i, n in zip(again, matched, strict=True):
                placed[i] = n > 0
            for i, found in zip(unmatched, versions, strict=True):
                placed[i] = found is not None and found["version"] == documents[i]["version"]
        # One delete for the batch (one scan of the small collection on FerretDB, not one each),
        # never of a newer version there (a run that started again).
        await self._workflows.delete_many(
            {"$or": [{"_id": d["_id"], "version": {"$lte": d["version"]}} for d in documents]}
        )
        return placed

    async def _retire_stragglers(self, limit: int = 1_000) -> None:
        """Upkeep for documents stored before `finished` and `workflow_ids` existed: once per
        process, register the ids of the executions in `workflows` (a create claims its id, so
        only those can lack one; without it, their id could be created again once they finished);
        then move finished documents still in `workflows` to `finished`, a batch at a time (one
        scan of `workflows` on FerretDB, which is small once they are gone)."""
        if not self._ids_registered:
            running = [data["_id"] async for data in self._workflows.find({}, {"_id": 1})]
            for at in range(0, len(running), 1_000):
                await insert_all(self._ids, [{"_id": w} for w in running[at : at + 1_000]])
            self._ids_registered = True
        found = await self._workflows.find(
            {"status": {"$in": list(FINISHED_STATUSES)}}, limit=limit
        ).to_list()
        if found:
            await self._retire(found)
            log.info("moved %d finished executions to the finished collection", len(found))

    async def _revive(self, document: dict[str, Any]) -> bool:
        """A finished execution running again: into `workflows` first, then out of `finished`."""
        [inserted] = await insert_all(self._workflows, [document])
        if inserted:
            await self._finished.delete_one({"_id": document["_id"], "version": {"$lt": document["version"]}})
        return inserted

    async def _keep(
        self, running: list[int], data: list[dict[str, Any]], fenced: tuple[dict[int, Any], dict[int, str]]
    ) -> list[int]:
        """The running winners whose replace matched nothing: one at this very version was rolled
        forward by a rival (a win); one past it was built on by a rival that rolled this commit
        forward — reported lost, which is safe: the reload finds these events applied and the
        outbox carried; one found only in `finished`, below this version, runs again (revived);
        a document that is gone committed onto nothing (its fence is undone)."""
        hot = await asyncio.gather(
            *(self._workflows.find_one({"_id": data[i]["_id"]}, {"version": 1}) for i in running)
        )
        hot_versions = {d["_id"]: d["version"] for d in hot if d is not None}
        cold_versions = await self.stored_versions(
            [data[i]["_id"] for i in running if data[i]["_id"] not in hot_versions]
        )
        kept = []
        for i in running:
            workflow_id, version = data[i]["_id"], data[i]["version"]
            if workflow_id in hot_versions:
                if hot_versions[workflow_id] == version:
                    kept.append(i)
            elif workflow_id in cold_versions and cold_versions[workflow_id] < version:
                if await self._revive(data[i]):
                    kept.append(i)
            elif workflow_id not in cold_versions:
                homes, fences = fenced
                await homes[i].delete_one({"_id": fences[i]})
        return kept

    @staticmethod
    def _fence_of(commit: Commit) -> str:
        document = commit.document
        return fence_id(document.workflow_id, document.version, commit.base_updated_at)

    async def _roll_forward(self, collection: Any, fence: str) -> None:
        """Someone committed the version of `fence` (in `collection`: an insert collided with
        it, or a bucket's pass found it) and the document does not show it yet: write its task
        records, then materialise it where it belongs. Found by `_id`, the lookup FerretDB
        indexes; a newer unmaterialised commit is met by the next attempt's fence."""
        newest = await collection.find_one({"_id": fence})
        if newest is None:
            return
        records = newest.pop("records", [])
        history = newest.pop("history", [])
        workflow_id = newest["_id"] = newest["workflowId"]
        current = (await self.stored_versions([workflow_id])).get(workflow_id)
        if current is None or current >= newest["version"]:
            return
        if records or history:
            await asyncio.gather(
                self.upsert_tasks([task_from_mongo(record) for record in records]),
                self.write_history(history),
            )
        if is_finished(newest):
            await self._retire([newest])
            return
        if not await self.updates(self._workflows, [ReplaceOne(self._materialise_filter(newest), newest)]):
            await self._revive(newest)

    async def remove_workflow(self, workflow_id: str) -> bool:
        """The read model goes last: while it exists, a concurrent reader still sees a whole
        execution. Its fences in buckets go with their bucket: a roll-forward finds no document
        to bring back, and a commit onto a removed execution is undone (`_keep`)."""
        await self._tasks.delete_many({"workflowInstanceId": workflow_id})
        await self._history.delete_many({"workflowId": workflow_id})
        await self._outbox_pending.delete_many({"workflowId": workflow_id})
        await self._commits.delete_many({"workflowId": workflow_id})  # `late`; buckets expire
        finished, running, _ = await asyncio.gather(
            self._finished.delete_one({"_id": workflow_id}),
            self._workflows.delete_one({"_id": workflow_id}),
            self._ids.delete_one({"_id": workflow_id}),
        )
        return bool(finished.deleted_count or running.deleted_count)
