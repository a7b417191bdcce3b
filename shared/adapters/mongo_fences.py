"""Where the MongoDB adapter keeps its fences, and how they go away without a scan per commit.

A fence `W#v+1` (docs/architecture.md, "Fenced commits") must be inserted into the collection
every rival for version v+1 inserts into, or the insert fences nothing. Fences live in buckets,
`workflow_commits_<start s>_<width s>`, chosen by the updated time of the version the commit
is based on: every rival read that same version, so all of them pick the same bucket. A bucket
is dropped whole once it can get no more commits — a drop costs nothing on any server, while
FerretDB 1.24 runs a filtered find or delete as a scan of the whole collection, and a fence
carries its whole document: pruning one collection of fences by a filter took past the 30 s
operation timeout at ~70,000 fences (ten minutes of the soak).

The rules, with R the fence retention and [start, end) the bucket's range of base times:

- A commit made before `end + R/2` (by its own clock) goes to its base's bucket. Its version
  is read at the commit point only if its base was read long ago (`MongoCommits._read_long_ago`).
- A commit made later — a workflow resumed after a long idle, or a commit with no known base —
  goes to the small `workflow_commits` collection (`late`), and its stored version is always read
  at the commit point, so a rival whose fence went with its bucket still cannot be overtaken.
  `late` is pruned by a filter, as all fences were before buckets.
- Housekeeping drops a bucket once `end + R` has passed (R/2 after the last commit that could
  go there, for clock skew), after one pass over it that rolls forward every fence newer than
  its running document (a commit whose read-model write was lost): the newest commit of a
  running workflow is never lost with its bucket (`_pass_and_drop` says what that leaves out).

What this leaves open, written down in docs/architecture.md: a winner stopped for more than R/2
between its fence insert and its read-model write, overtaken meanwhile by a late commit on the
same base. Fences of removed and purged executions go with their bucket (at most R/2 + 2R after
their last commit), not at once: a fence whose execution is gone cannot be rolled forward.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Any

from shared.adapters.mongo_codec import MongoParts, fence_id
from shared.ports.store import Commit

log = logging.getLogger(__name__)

BUCKET_PREFIX = "workflow_commits_"
BUCKET_NAME = re.compile(rf"^{BUCKET_PREFIX}(\d+)_(\d+)$")
MIN_BUCKET_WIDTH_MS = 10_000
"""A bucket spans at least this long: a test's two-second retention must not create and drop a
collection every two seconds (each a DDL under FerretDB's global metadata lock)."""
PASS_IDS_AT_ONCE = 1_000
"""Candidate fences asked for in one `$in` during a bucket's pass (one scan each on FerretDB)."""
PASS_LOOKUPS_AT_ONCE = 20
"""Stored-version lookups in flight at once while pruning `late`: thousands at once starved the
decider of connections (seen in the soak with the old prune)."""


class MongoFences(MongoParts):
    _db: Any

    def _wall_clock_ms(self) -> float:
        """The commit point's clock (a seam for tests of the bucket rules)."""
        return time.time() * 1000

    def _bucket_width_ms(self) -> int:
        return max(self._fence_retention_ms, MIN_BUCKET_WIDTH_MS)

    def fence_home(self, commit: Commit) -> tuple[Any, bool]:
        """The collection a commit's fence goes to, and whether it is a late one (its stored
        version must be read at the commit point whatever its read time)."""
        base = commit.base_updated_at
        if base is None:
            return self._commits, True
        width = self._bucket_width_ms()
        start = base - base % width
        if self._wall_clock_ms() >= start + width + self._fence_retention_ms / 2:
            return self._commits, True
        return self._db[f"{BUCKET_PREFIX}{start // 1000}_{width // 1000}"], False

    async def _buckets(self) -> list[tuple[int, int, Any]]:
        """Every bucket collection there is, with the start and end of its range (epoch ms),
        oldest first."""
        names = await self._db.list_collection_names(filter={"name": {"$regex": f"^{BUCKET_PREFIX}"}})
        found = []
        for name in names:
            match = BUCKET_NAME.match(name)
            if match:
                start_s, width_s = int(match.group(1)), int(match.group(2))
                found.append((start_s * 1000, (start_s + width_s) * 1000, self._db[name]))
        return sorted(found, key=lambda item: item[1])

    async def _roll_forward(self, collection: Any, fence: str) -> None:
        """Materialise the commit whose fence is `fence`, in `collection` (`MongoCommits`)."""
        raise NotImplementedError

    async def _prune_fences(self, now: int) -> None:
        """Drop the buckets no commit can reach any more, and prune `late`."""
        for start, end, bucket in await self._buckets():
            if end + self._fence_retention_ms > now:
                break
            await self._pass_and_drop(bucket, start, end)
        await self._prune_late_fences(now)

    async def _pass_and_drop(self, bucket: Any, start_ms: int, end_ms: int) -> None:
        """Roll forward every fence in `bucket` that is ahead of its running document, then drop
        the bucket.

        A fence ahead of its document is a commit whose read-model write was lost (a crash in
        between). Its document is then still in `workflows` — the commit that ended an execution
        is retired by that very write — at the version the commit was based on, so the fence is
        `W#<version + 1>@<the document's updatedAt>`, in this bucket if that time falls in it. So
        the pass reads `workflows` (small) once, and this bucket only for those candidates, with
        one `$in` (a scan on FerretDB) — and not at all when there are none, as under steady
        load, where every workflow in `workflows` was written moments ago. (Reading every fence
        of a 35,000-fence bucket cost 14 s of FerretDB's time and one slow window in ten in the
        soak; looking each workflow up by id, the first version, stalled FerretDB for minutes.)

        Left to chance: a commit made after an execution had finished (a late event) whose
        write was lost; it is repaired only if another event meets its fence while the bucket
        lives, or through its outbox marker."""
        began = time.perf_counter()
        ids = [
            fence_id(data["_id"], data["version"] + 1, data["updatedAt"])
            async for data in self._workflows.find({}, {"version": 1, "updatedAt": 1})
            if start_ms <= data.get("updatedAt", -1) < end_ms
        ]
        looked = time.perf_counter()
        ahead: list[str] = []
        for at in range(0, len(ids), PASS_IDS_AT_ONCE):
            chunk = ids[at : at + PASS_IDS_AT_ONCE]
            ahead += [found["_id"] async for found in bucket.find({"_id": {"$in": chunk}}, {"_id": 1})]
        read = time.perf_counter()
        for fence in ahead:
            await self._roll_forward(bucket, fence)
        if ahead:
            log.warning("rolled forward %d commits before dropping %s", len(ahead), bucket.name)
        rolled = time.perf_counter()
        await bucket.drop()
        log.info(
            "dropped fence bucket %s (%d candidates): versions %.1f s, read %.1f s, "
            "roll-forward %.1f s, drop %.1f s",
            bucket.name,
            len(ids),
            looked - began,
            read - looked,
            rolled - read,
            time.perf_counter() - rolled,
        )

    async def _prune_late_fences(self, now: int) -> None:
        """`late` fences older than the retention, but only those below their document's version:
        the newest fence of a workflow whose materialisation was lost stays for the roll-forward.
        (A decider frozen longer than the retention no longer relies on fences: its commit is
        refused by the version read at the commit point.)"""
        if now - self._fences_pruned_at < self._fence_retention_ms / 2:
            return  # a fence becomes prunable only after the retention: no need to look more often
        self._fences_pruned_at = now
        old = await self._commits.find(
            {"updatedAt": {"$lt": now - self._fence_retention_ms}},
            {"workflowId": 1, "version": 1},
            limit=10_000,
        ).to_list()
        if not old:
            return
        versions: dict[str, int] = {}
        ids = sorted({record["workflowId"] for record in old})
        for at in range(0, len(ids), PASS_LOOKUPS_AT_ONCE):
            versions.update(await self.stored_versions(ids[at : at + PASS_LOOKUPS_AT_ONCE]))
        doomed = [r["_id"] for r in old if r["version"] < versions.get(r["workflowId"], r["version"] + 1)]
        if doomed:
            await self._commits.delete_many({"_id": {"$in": doomed}})
