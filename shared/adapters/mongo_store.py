"""Store port on MongoDB (and MongoDB-protocol servers such as FerretDB) with PyMongo's async API.

Needs no transactions and no change streams — and does not trust conditional updates to be
atomic either: FerretDB 1.24 evaluates `update {_id, version: v}` as a read followed by a write,
so two concurrent writers can both "win" (measured: 28 of 30 trials with 8 writers). The one
operation every MongoDB-protocol server makes atomic is an insert into a unique `_id`, so that is
the commit point (docs/architecture.md, "Fenced commits"):

1. commit = insert `{_id: "<workflowId>#<version>"}` into `workflow_commits`, carrying the whole
   new document. Exactly one writer can commit a given version; a stale writer gets a duplicate
   key error, so the version check fails as the design requires. Commit records are kept for
   `COMMIT_RECORD_RETENTION_MS` (pruned by `housekeeping`) so a fence outlives any stale reader.
2. the read model is materialised from it, never over a newer version: the `workflows` document
   while the execution runs, the `finished` one once it has ended (so the collection every
   decision updates holds running executions only); whoever next meets the duplicate key rolls
   it forward if the committer died in between.
3. an unsent outbox is marked by a row in `outbox_pending` (unique per commit attempt, so a
   losing attempt can remove its own row without touching the winner's), inserted before the
   commit point and deleted once published: inserts and deletes, because updates are what
   MongoDB-protocol servers without a storage engine of their own make slow (FerretDB: ~5 ms
   per update, ~0.3 ms per inserted document in a batch).

Definition snapshots are stored once each, content-addressed, in `workflow_snapshots`; workflow
documents refer to theirs by id, which keeps every document and commit record small.

Task records are history: one per execution, written when it reaches a terminal state (live
executions are in the workflow document, whose top-level `taskIds` lists them for
`find_task_workflow`). Timers are upserts; timer claims and task claims are fenced by insert.

The parts: `mongo_codec` (document layout, shared state), `mongo_commits`, `mongo_timers`,
`mongo_retention`; this module holds reads, definitions, task records and task claims.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from pymongo import ASCENDING, DESCENDING, AsyncMongoClient, IndexModel, ReplaceOne
from pymongo.errors import DuplicateKeyError

from shared.adapters import mongo_search
from shared.adapters.mongo_codec import (
    SnapshotCache,
    definition_body,
    definition_to_mongo,
    history_from_mongo,
    insert_all,
    task_from_mongo,
)
from shared.adapters.mongo_commits import MongoCommits
from shared.adapters.mongo_opaque import OPAQUE_WORKFLOW_FIELDS, from_opaque
from shared.adapters.mongo_retention import MongoRetention
from shared.adapters.mongo_timers import MongoTimers
from shared.models.definitions import TaskDef, WorkflowDef
from shared.models.documents import WorkflowDocument
from shared.models.events import EventHandler
from shared.models.runtime import TaskState, WorkflowStatus
from shared.ports.store import HistoryChunk, WorkflowHeads, chunk_id, decode_heads, heads_of
from shared.search import SearchRequest

COMMIT_RECORD_RETENTION_MS = 10 * 60 * 1000
RENEW_ATTEMPTS = 5
"""A renewal racing another renewal by the same holder follows the chain at most this often."""


class MongoStore(MongoCommits, MongoTimers, MongoRetention):
    def __init__(
        self,
        url: str,
        database: str = "cairn",
        timeout_ms: int = 30_000,
        fence_retention_ms: int = COMMIT_RECORD_RETENTION_MS,
        **client_options: Any,
    ) -> None:
        # A bound on every operation: a request the server never answers fails (and the batch is
        # retried) instead of wedging a consumer forever. `client_options` go to PyMongo as they
        # are (event listeners in tests, TLS settings not expressible in the URL).
        self._client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(
            url, tz_aware=True, timeoutMS=timeout_ms, **client_options
        )
        db = self._db = self._client[database]
        self._workflows = db["workflows"]
        self._finished = db["workflows_finished"]
        self._ids = db["workflow_ids"]
        self._commits = db["workflow_commits"]
        self._outbox_pending = db["outbox_pending"]
        self._tasks = db["tasks"]
        self._history = db["workflow_history"]
        self._timers = db["timers"]
        self._timer_claims = db["timer_claims"]
        self._task_claims = db["task_claims"]
        self._workflow_defs = db["workflow_defs"]
        self._task_defs = db["task_defs"]
        self._event_handlers = db["event_handlers"]
        self._searched_fields_complete = False
        self._snapshots = SnapshotCache(db["workflow_snapshots"])
        self._atomic_updates = True
        self._lookups_by_id_indexed = True
        """Whether a find by `_id` that finds nothing is an index lookup (MongoDB) rather than a
        scan of the collection (FerretDB 1.24: `find_current`)."""
        self._updates_per_command: int | None = None
        self._update_commands_sized = False
        self._update_gate = asyncio.Semaphore(1)
        self._fence_retention_ms = fence_retention_ms

    async def open(self) -> None:
        info = await self._client.admin.command("buildInfo")
        # FerretDB 1.x runs conditional updates as read-then-write: neither atomic nor indexed.
        self._atomic_updates = self._lookups_by_id_indexed = "ferretdbVersion" not in info
        self._update_commands_sized = self._atomic_updates  # FerretDB's backend: `updates`
        await self._ensure_indexes()

    async def _ensure_indexes(self) -> None:
        """Create the indexes that are missing, and only those.

        Why not just create_index every time (it is idempotent): FerretDB 1.x's SQLite backend
        takes a global lock for createIndexes even when the index exists, then waits for the
        database's write lock — while a writer of that database holding the write lock waits for
        the global lock. A service restarted while others write deadlocked the whole server
        (seen in the failure-matrix tests; goroutine dump in docs/semantics.md). Reading the
        index list takes neither."""
        # Equality filters first, then updatedAt: list_workflows (newest first) and the sweeper.
        wanted: dict[Any, list[list[tuple[str, int]]]] = {
            self._workflows: [
                [("updatedAt", DESCENDING)],
                [("status", ASCENDING), ("updatedAt", ASCENDING)],
                [("name", ASCENDING), ("updatedAt", DESCENDING)],
                [("name", ASCENDING), ("status", ASCENDING), ("updatedAt", DESCENDING)],
                [("taskIds", ASCENDING)],
            ],
            self._commits: [[("workflowId", ASCENDING), ("version", DESCENDING)], [("updatedAt", ASCENDING)]],
            self._outbox_pending: [[("since", ASCENDING)]],
            self._tasks: [[("workflowInstanceId", ASCENDING), ("seq", ASCENDING)]],
            self._history: [[("workflowId", ASCENDING), ("generation", ASCENDING), ("first", ASCENDING)]],
            self._timers: [[("fireAt", ASCENDING)]],
            self._timer_claims: [[("timerId", ASCENDING)]],
            self._workflow_defs: [[("name", ASCENDING), ("version", DESCENDING)]],
        }
        if self._atomic_updates:  # FerretDB scans for any filter but _id: an index only costs writes
            wanted[self._workflows].append([("attentionAt", ASCENDING), ("_id", ASCENDING)])
            wanted[self._finished] = wanted[self._workflows][:4]  # search, and retention by updatedAt
            wanted[self._workflows] += mongo_search.SEARCH_INDEXES
            wanted[self._finished] += mongo_search.SEARCH_INDEXES
            wanted[self._task_claims] = [[("taskId", ASCENDING)]]
            wanted[self._timers].append([("workflowId", ASCENDING)])
        for collection, key_lists in wanted.items():
            existing = set(await collection.index_information())
            missing = [IndexModel(keys) for keys in key_lists]
            missing = [model for model in missing if model.document["name"] not in existing]
            if missing:
                await collection.create_indexes(missing)

    async def close(self) -> None:
        await self._client.close()

    # ---- definitions ----

    async def put_workflow_def(self, definition: WorkflowDef) -> None:
        data = definition_to_mongo(f"{definition.name}:{definition.version}", definition)
        await self.updates(self._workflow_defs, [ReplaceOne({"_id": data["_id"]}, data, upsert=True)])

    async def get_workflow_def(self, name: str, version: int | None = None) -> WorkflowDef | None:
        query: dict[str, Any] = {"name": name}
        if version is not None:
            query["version"] = version
        data = await self._workflow_defs.find_one(query, sort=[("version", DESCENDING)])
        return None if data is None else WorkflowDef.model_validate(definition_body(data))

    async def has_workflow_def(self, name: str, version: int | None = None) -> bool:
        query: dict[str, Any] = {"name": name}
        if version is not None:
            query["version"] = version
        return await self._workflow_defs.find_one(query, projection={"_id": 1}) is not None

    async def list_workflow_defs(self) -> list[WorkflowDef]:
        found = []
        async for data in self._workflow_defs.find({}, sort=[("name", ASCENDING), ("version", ASCENDING)]):
            found.append(WorkflowDef.model_validate(definition_body(data)))
        return found

    async def delete_workflow_def(self, name: str, version: int) -> bool:
        result = await self._workflow_defs.delete_one({"_id": f"{name}:{version}"})
        return result.deleted_count > 0

    async def put_event_handler(self, handler: EventHandler, *, create: bool) -> bool:
        data = {"_id": handler.name, "body": handler.model_dump_json(by_alias=True, exclude_none=True)}
        if create:
            [inserted] = await insert_all(self._event_handlers, [data])
            return inserted
        return await self.updates(self._event_handlers, [ReplaceOne({"_id": handler.name}, data)]) == 1

    async def list_event_handlers(self) -> list[EventHandler]:
        found = [
            EventHandler.model_validate_json(data["body"]) async for data in self._event_handlers.find({})
        ]
        return sorted(found, key=lambda handler: handler.name)

    async def delete_event_handler(self, name: str) -> bool:
        result = await self._event_handlers.delete_one({"_id": name})
        return result.deleted_count > 0

    async def delete_task_def(self, name: str) -> bool:
        result = await self._task_defs.delete_one({"_id": name})
        return result.deleted_count > 0

    async def definitions_generation(self) -> int | None:
        return None  # no such counter here: every start resolves its snapshot afresh

    async def put_task_def(self, task_def: TaskDef) -> None:
        data = definition_to_mongo(task_def.name, task_def)
        await self.updates(self._task_defs, [ReplaceOne({"_id": task_def.name}, data, upsert=True)])

    async def list_task_defs(self) -> list[TaskDef]:
        found = [TaskDef.model_validate(definition_body(data)) async for data in self._task_defs.find({})]
        return sorted(found, key=lambda task_def: task_def.name)

    async def get_task_defs(self, names: Sequence[str]) -> dict[str, TaskDef]:
        found = {}
        async for data in self._task_defs.find({"_id": {"$in": list(names)}}):
            task_def = TaskDef.model_validate(definition_body(data))
            found[task_def.name] = task_def
        return found

    # ---- workflows ----

    async def load_workflows(
        self, workflow_ids: Sequence[str], running_only: bool = False
    ) -> dict[str, WorkflowDocument]:
        if not workflow_ids:  # a batch with no starts (or only starts): no `$in []` query (a scan)
            return {}
        documents, unsent = await asyncio.gather(
            self.find_current(workflow_ids, running_only=running_only), self._unsent_outboxes(workflow_ids)
        )
        return {workflow_id: await self._from_mongo(data, unsent) for workflow_id, data in documents.items()}

    async def load_heads(
        self, workflow_ids: Sequence[str], running_only: bool = False
    ) -> dict[str, WorkflowHeads]:
        # `running_only` spares a scan of `finished` for ids not stored yet (an api's start
        # waiting for its execution). Where that look is an index lookup it is made anyway, so
        # an execution that finished in its first decision is found at once, not at the wait's end.
        skip_finished = running_only and not self._lookups_by_id_indexed
        found = await self.find_current(workflow_ids, {"status": 1, "taskHeads": 1}, skip_finished)
        heads: dict[str, WorkflowHeads] = {}
        older: list[str] = []
        for data in found.values():
            if "taskHeads" not in data:  # written before heads were stored: read it whole
                older.append(data["_id"])
                continue
            heads[data["_id"]] = decode_heads(data["_id"], data["status"], data["taskHeads"])
        if older:
            heads.update({wid: heads_of(d) for wid, d in (await self.load_workflows(older)).items()})
        return heads

    async def _unsent_outboxes(self, workflow_ids: Sequence[str]) -> set[tuple[str, int]]:
        """(workflow id, version) of each committed outbox among `workflow_ids` not yet sent."""
        markers = await self._outbox_pending.find({"workflowId": {"$in": list(workflow_ids)}}).to_list()
        return {(m["workflowId"], m["version"]) for m in markers}

    async def list_workflows(
        self, *, status: WorkflowStatus | None = None, name: str | None = None, limit: int = 100
    ) -> list[WorkflowDocument]:
        """Newest `updatedAt` first, served by the (name?, status?, updatedAt) indexes: running
        executions from `workflows`, finished ones from `finished`, merged when both may match."""
        query: dict[str, Any] = {}
        if status is not None:
            query["status"] = status.value
        if name is not None:
            query["name"] = name
        collections = [
            collection
            for collection, holds in ((self._workflows, False), (self._finished, True))
            if status is None or status.is_terminal == holds
        ]
        pages = await asyncio.gather(
            *(c.find(query, sort=[("updatedAt", DESCENDING)], limit=limit).to_list() for c in collections)
        )
        newest: dict[str, dict[str, Any]] = {}
        for data in (d for page in pages for d in page):  # a copy caught mid-move: the newer one
            if data["_id"] not in newest or newest[data["_id"]]["version"] < data["version"]:
                newest[data["_id"]] = data
        found = sorted(newest.values(), key=lambda d: d["updatedAt"], reverse=True)[:limit]
        unsent = await self._unsent_outboxes([data["_id"] for data in found])
        return [await self._from_mongo(data, unsent) for data in found]

    async def search_workflows(self, request: SearchRequest) -> tuple[int, list[WorkflowDocument]]:
        total, found = await mongo_search.search(self._workflows, self._finished, request)
        unsent = await self._unsent_outboxes([data["_id"] for data in found])
        return total, [await self._from_mongo(data, unsent) for data in found]

    async def search_tasks(self, request: SearchRequest) -> tuple[int, list[TaskState]]:
        total, found = await mongo_search.search_tasks(self._tasks, request)
        return total, [task_from_mongo(data) for data in found]

    async def find_task_workflow(self, task_id: str) -> str | None:
        """History first (a lookup by `_id`), then live executions through the `taskIds`
        multikey index (on FerretDB that filter scans the collection; fine for an API read).
        `finished` is not searched: every execution of a finished workflow is in history (its
        record is written when it reaches a terminal state, before the workflow can end)."""
        record = await self._tasks.find_one({"_id": task_id}, {"workflowInstanceId": 1})
        if record is not None:
            return str(record["workflowInstanceId"])
        holder = await self._workflows.find_one({"taskIds": task_id}, {"_id": 1})
        return None if holder is None else str(holder["_id"])

    async def _from_mongo(self, data: dict[str, Any], unsent: set[tuple[str, int]]) -> WorkflowDocument:
        if (data["_id"], data["version"]) not in unsent:
            data["outbox"] = []  # published already
        document = WorkflowDocument.model_validate(from_opaque(data, OPAQUE_WORKFLOW_FIELDS))
        if data.get("snapshotId"):
            document.definition = await self._snapshots.get(data["snapshotId"])
        return document

    async def load_workflow(self, workflow_id: str) -> WorkflowDocument | None:
        return (await self.load_workflows([workflow_id])).get(workflow_id)

    async def mark_outboxes_sent(self, published: Sequence[tuple[str, int]]) -> None:
        if published:
            await self._outbox_pending.delete_many(
                {
                    "$or": [
                        {"workflowId": workflow_id, "version": version} for workflow_id, version in published
                    ]
                }
            )

    async def find_unpublished(self, older_than: int, limit: int) -> list[str]:
        ids: list[str] = []
        async for marker in self._outbox_pending.find({"since": {"$lt": older_than}}, limit=limit):
            if marker["workflowId"] not in ids:
                ids.append(marker["workflowId"])
        return ids

    async def find_needing_attention(
        self, before: int, after: tuple[int, str] | None, limit: int
    ) -> list[tuple[int, str]]:
        since, last_id = after if after is not None else (-1, "")
        query = {
            "attentionAt": {"$ne": None, "$lt": before, "$gte": since},
            "$or": [{"attentionAt": {"$gt": since}}, {"_id": {"$gt": last_id}}],
        }
        cursor = self._workflows.find(
            query, {"attentionAt": 1}, sort=[("attentionAt", ASCENDING), ("_id", ASCENDING)], limit=limit
        )
        found = [(data["attentionAt"], data["_id"]) async for data in cursor]
        if after is None and len(found) < limit:  # written before attention times were kept
            legacy = self._workflows.find(
                {
                    "status": WorkflowStatus.RUNNING.value,
                    "attentionAt": {"$exists": False},
                    "updatedAt": {"$lt": before},
                },
                {"updatedAt": 1},
                limit=limit - len(found),
            )
            found += [(data["updatedAt"], data["_id"]) async for data in legacy]
        return found

    async def housekeeping(self, now: int) -> None:
        """Prune old commit records (never one the document has not caught up with), and the
        timer claim records `delete_timers` left behind; move finished executions that
        `workflows` still holds (written before `finished` existed) to `finished`."""
        await asyncio.gather(
            self._prune_fences(now),
            self._prune_timer_claims(now),
            self._retire_stragglers(),
            self._backfill_searched_fields(),
        )

    async def _backfill_searched_fields(self, limit: int = 1_000) -> None:
        """Upkeep for documents stored before searches had their top-level fields: a batch per
        housekeeping until none is left, then never again in this process (one scan each on
        FerretDB)."""
        if self._searched_fields_complete:
            return
        written = await mongo_search.backfill((self._workflows, self._finished), limit, self.updates)
        self._searched_fields_complete = written == 0

    # ---- code workflows' histories ----

    async def load_history(
        self, workflow_id: str, generation: int, firsts: Sequence[int]
    ) -> list[HistoryChunk]:
        """By `_id` only: FerretDB scans the collection for any other filter."""
        if not firsts:
            return []
        wanted = [chunk_id(workflow_id, generation, first) for first in firsts]
        # One lookup per chunk, concurrently: measured on FerretDB 1.24, `{_id: {$in: [...]}}`
        # scans the collection, so it slowed with every history written.
        found = await asyncio.gather(*(self._history.find_one({"_id": one}) for one in wanted))
        return [history_from_mongo(data) for data in found if data is not None]

    # ---- task records ----

    async def get_task(self, task_id: str) -> TaskState | None:
        data = await self._tasks.find_one({"_id": task_id})
        return None if data is None else task_from_mongo(data)

    async def list_tasks(self, workflow_id: str) -> list[TaskState]:
        cursor = self._tasks.find({"workflowInstanceId": workflow_id}, sort=[("seq", ASCENDING)])
        return [task_from_mongo(data) async for data in cursor]

    async def claim_task(self, task_id: str, worker_id: str, now: int, lease_ms: int) -> bool:
        """A claim is the insert of `<taskId>@<claimUntil of the claim it replaces>` (`@0` for
        the first): unique per lease generation, so of several claimers that saw the same
        expired (or no) claim exactly one inserts it. Conditional updates would not do: FerretDB
        does not run them atomically (docs/architecture.md).

        The claims of one execution form a chain (each record's `claimUntil` names the next
        one's `_id`), followed here by `_id` lookups only, which stay cheap however large the
        collection grows. A claimer that dies after inserting leaves no half-done state: its
        record is the claim. Records are not pruned: one per HTTP-polled execution, like task
        records, and pruning a chain's head could let a stale claimer in beside a live claim."""
        if lease_ms <= 0:
            raise ValueError("claim_task: lease_ms must be positive")
        replaces, last = await self._last_task_claim(task_id)
        if last is not None and last["claimUntil"] > now:
            return False  # a live claim, whoever holds it
        return await self._insert_task_claim(task_id, replaces, worker_id, now + lease_ms, now)

    async def renew_task_claim(self, task_id: str, holder: str, now: int, lease_ms: int) -> bool:
        """Insert-only too: the holder inserts the chain's next link (`<taskId>@<claimUntil of
        its own record>`), so a rival claiming the run-out claim at the same moment competes for
        the same `_id` and exactly one of them wins. A link the holder lost to itself (two
        renewals at once) is followed and extended again."""
        if lease_ms <= 0:
            raise ValueError("renew_task_claim: lease_ms must be positive")
        for _ in range(RENEW_ATTEMPTS):
            replaces, last = await self._last_task_claim(task_id)
            if last is not None and last["workerId"] != holder and last["claimUntil"] > now:
                return False  # a rival's live claim
            # Each link ends later than the one it replaces: its claimUntil names the next link.
            until = max(now + lease_ms, replaces + 1)
            if await self._insert_task_claim(task_id, replaces, holder, until, now):
                return True
        return False

    async def _last_task_claim(self, task_id: str) -> tuple[int, dict[str, Any] | None]:
        """The end of the execution's claim chain: (the `@` suffix its next link gets, its last
        record). Each link ends later than the one before, so only the last can be live."""
        replaces, last = 0, None
        while (current := await self._task_claims.find_one({"_id": f"{task_id}@{replaces}"})) is not None:
            last, replaces = current, current["claimUntil"]
        return replaces, last

    async def _insert_task_claim(
        self, task_id: str, replaces: int, holder: str, until: int, now: int
    ) -> bool:
        try:
            await self._task_claims.insert_one(
                {
                    "_id": f"{task_id}@{replaces}",
                    "taskId": task_id,
                    "workerId": holder,
                    "claimUntil": until,
                    "at": now,
                }
            )
        except DuplicateKeyError:
            return False  # another claimer took this generation first
        return True
