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
2. the `workflows` document (the read model) is materialised from it, never over a newer version;
   whoever next meets the duplicate key rolls it forward if the committer died in between.
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
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

from pymongo import ASCENDING, DESCENDING, AsyncMongoClient, IndexModel, ReplaceOne, UpdateOne
from pymongo.errors import BulkWriteError, DuplicateKeyError

from shared.core.attention import attention_at
from shared.models.definitions import TaskDef, WorkflowDef
from shared.models.documents import TimerRecord, WorkflowDocument
from shared.models.runtime import TaskState, WorkflowStatus
from shared.ports.store import Commit, WorkflowHeads, decode_heads, encode_heads, heads_of

log = logging.getLogger(__name__)

DUPLICATE_KEY = 11000
COMMIT_RECORD_RETENTION_MS = 10 * 60 * 1000
FENCE_PRUNE_BATCH = 10_000
# Timer claim records of a timer that is gone are pruned once its newest is this old (far beyond
# any lease), at most this many per housekeeping run.
TIMER_CLAIM_RETENTION_MS = 10 * 60 * 1000
TIMER_CLAIM_PRUNE_BATCH = 10_000


# Fields holding user data (inputs, outputs, definitions' parameters) are stored as JSON text.
# User keys may contain "." or start with "$", which MongoDB restricts and FerretDB 1.x refuses
# outright: a worker returning {"a.b": 1} made every commit of its workflow fail, redelivering
# the decider's batch forever. Nothing filters inside these fields; queries use top-level copies.
_OPAQUE_WORKFLOW_FIELDS = ("state", "outbox")
_OPAQUE_TASK_FIELDS = ("inputData", "outputData")


def _to_opaque(data: dict[str, Any], fields: Sequence[str]) -> dict[str, Any]:
    for name in fields:
        if name in data:
            data[name] = json.dumps(data[name], separators=(",", ":"))
    return data


def _from_opaque(data: dict[str, Any], fields: Sequence[str]) -> dict[str, Any]:
    for name in fields:
        if isinstance(data.get(name), str):
            data[name] = json.loads(data[name])
    return data


def _definition_to_mongo(key: str, definition: WorkflowDef | TaskDef) -> dict[str, Any]:
    data: dict[str, Any] = {
        "_id": key,
        "name": definition.name,
        "body": json.dumps(definition.to_json_dict()),
    }
    if isinstance(definition, WorkflowDef):
        data["version"] = definition.version
    return data


def _definition_body(data: dict[str, Any]) -> dict[str, Any]:
    if "body" not in data:  # written before definitions were stored as JSON text
        return {k: v for k, v in data.items() if k != "_id"}
    body: dict[str, Any] = json.loads(data["body"])
    return body


def _workflow_to_mongo(document: WorkflowDocument, snapshot_id: str | None) -> dict[str, Any]:
    data = document.model_dump(by_alias=True, mode="json", exclude_none=True, exclude={"definition"})
    _to_opaque(data, _OPAQUE_WORKFLOW_FIELDS)
    data["_id"] = document.workflow_id
    data["snapshotId"] = snapshot_id
    # Top-level copies of what queries filter on; the nested state stays the source of truth.
    data["status"] = document.state.status.value
    data["name"] = document.state.workflow_name
    data["taskIds"] = [task.task_id for task in document.state.tasks.values()]  # multikey index
    # What the api reads to answer workers (load_heads), without the opaque state; JSON text,
    # as FerretDB stores no nested arrays.
    data["taskHeads"] = encode_heads(document.state)
    data["attentionAt"] = attention_at(document.state)  # None: nothing about it can be overdue
    return data


def _task_to_mongo(task: TaskState) -> dict[str, Any]:
    data = _to_opaque(task.model_dump(by_alias=True, mode="json"), _OPAQUE_TASK_FIELDS)
    data["_id"] = task.task_id
    return data


def _task_from_mongo(data: dict[str, Any]) -> TaskState:
    return TaskState.model_validate(_from_opaque(data, _OPAQUE_TASK_FIELDS))


async def _insert_all(collection: Any, documents: list[dict[str, Any]]) -> list[bool]:
    """Insert each document; result i is False when document i's _id already existed."""
    if not documents:
        return []
    try:
        await collection.insert_many(documents, ordered=False)
    except BulkWriteError as error:
        errors = error.details.get("writeErrors", [])
        if any(item.get("code") != DUPLICATE_KEY for item in errors):
            raise
        failed = {item["index"] for item in errors}
        return [i not in failed for i in range(len(documents))]
    return [True] * len(documents)


class SnapshotCache:
    """Definition snapshots by content hash: written once, read from memory after the first use."""

    def __init__(self, collection: Any, capacity: int = 1024) -> None:
        self._collection = collection
        self._capacity = capacity
        self._by_id: OrderedDict[str, WorkflowDef] = OrderedDict()
        self._id_of: OrderedDict[int, tuple[WorkflowDef, str]] = OrderedDict()

    def _remember(self, snapshot_id: str, definition: WorkflowDef) -> None:
        self._by_id[snapshot_id] = definition
        self._id_of[id(definition)] = (definition, snapshot_id)  # holding it keeps id() unique
        for table in (self._by_id, self._id_of):
            while len(table) > self._capacity:
                table.popitem(last=False)

    async def store(self, definitions: Sequence[WorkflowDef | None]) -> list[str | None]:
        ids: list[str | None] = []
        new: dict[str, dict[str, Any]] = {}
        seen: list[tuple[str, WorkflowDef]] = []
        for definition in definitions:
            if definition is None:
                ids.append(None)
                continue
            known = self._id_of.get(id(definition))
            if known is not None and known[0] is definition:
                ids.append(known[1])
                continue
            body = definition.to_json_dict()
            snapshot_id = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:32]
            if snapshot_id not in self._by_id:
                new[snapshot_id] = {"_id": snapshot_id, "definition": json.dumps(body)}
            seen.append((snapshot_id, definition))
            ids.append(snapshot_id)
        await _insert_all(self._collection, list(new.values()))  # duplicates: stored before
        # Remembered only once stored: after a failed insert, the retried commit inserts again.
        for snapshot_id, definition in seen:
            self._remember(snapshot_id, definition)
        return ids

    async def get(self, snapshot_id: str) -> WorkflowDef:
        definition = self._by_id.get(snapshot_id)
        if definition is None:
            data = await self._collection.find_one({"_id": snapshot_id})
            if data is None:
                raise LookupError(f"definition snapshot {snapshot_id} is missing from the store")
            stored = data["definition"]  # JSON text; a sub-document when written by older versions
            definition = (
                WorkflowDef.model_validate_json(stored)
                if isinstance(stored, str)
                else WorkflowDef.model_validate(stored)
            )
            self._remember(snapshot_id, definition)
        self._by_id.move_to_end(snapshot_id)
        return definition


def _marker_id(workflow_id: str, version: int) -> str:
    return f"{workflow_id}#{version}"


def _timer_claim_id(timer_id: str, replaces: int) -> str:
    return f"{timer_id}@{replaces}"


class MongoStore:
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
        db = self._client[database]
        self._workflows = db["workflows"]
        self._commits = db["workflow_commits"]
        self._outbox_pending = db["outbox_pending"]
        self._tasks = db["tasks"]
        self._timers = db["timers"]
        self._timer_claims = db["timer_claims"]
        self._task_claims = db["task_claims"]
        self._workflow_defs = db["workflow_defs"]
        self._task_defs = db["task_defs"]
        self._snapshots = SnapshotCache(db["workflow_snapshots"])
        self._atomic_updates = True
        self._fence_retention_ms = fence_retention_ms

    async def open(self) -> None:
        info = await self._client.admin.command("buildInfo")
        # FerretDB 1.x runs conditional updates as read-then-write: neither atomic nor indexed.
        self._atomic_updates = "ferretdbVersion" not in info
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
            self._timers: [[("fireAt", ASCENDING)]],
            self._timer_claims: [[("timerId", ASCENDING)]],
            self._workflow_defs: [[("name", ASCENDING), ("version", DESCENDING)]],
        }
        if self._atomic_updates:  # FerretDB scans for any filter but _id: an index only costs writes
            wanted[self._workflows].append([("attentionAt", ASCENDING), ("_id", ASCENDING)])
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
        data = _definition_to_mongo(f"{definition.name}:{definition.version}", definition)
        await self._workflow_defs.replace_one({"_id": data["_id"]}, data, upsert=True)

    async def get_workflow_def(self, name: str, version: int | None = None) -> WorkflowDef | None:
        query: dict[str, Any] = {"name": name}
        if version is not None:
            query["version"] = version
        data = await self._workflow_defs.find_one(query, sort=[("version", DESCENDING)])
        return None if data is None else WorkflowDef.model_validate(_definition_body(data))

    async def list_workflow_defs(self) -> list[WorkflowDef]:
        found = []
        async for data in self._workflow_defs.find({}, sort=[("name", ASCENDING), ("version", ASCENDING)]):
            found.append(WorkflowDef.model_validate(_definition_body(data)))
        return found

    async def delete_workflow_def(self, name: str, version: int) -> bool:
        result = await self._workflow_defs.delete_one({"_id": f"{name}:{version}"})
        return result.deleted_count > 0

    async def delete_task_def(self, name: str) -> bool:
        result = await self._task_defs.delete_one({"_id": name})
        return result.deleted_count > 0

    async def put_task_def(self, task_def: TaskDef) -> None:
        data = _definition_to_mongo(task_def.name, task_def)
        await self._task_defs.replace_one({"_id": task_def.name}, data, upsert=True)

    async def get_task_defs(self, names: Sequence[str]) -> dict[str, TaskDef]:
        found = {}
        async for data in self._task_defs.find({"_id": {"$in": list(names)}}):
            task_def = TaskDef.model_validate(_definition_body(data))
            found[task_def.name] = task_def
        return found

    # ---- workflows ----

    async def load_workflows(self, workflow_ids: Sequence[str]) -> dict[str, WorkflowDocument]:
        # One `{_id: x}` lookup each, concurrently: the only filter FerretDB answers from an index
        # (any other filter, `$in` included, scans the collection — fine for the small marker set).
        documents, unsent = await asyncio.gather(
            asyncio.gather(*(self._workflows.find_one({"_id": wid}) for wid in workflow_ids)),
            self._unsent_outboxes(workflow_ids),
        )
        found: dict[str, WorkflowDocument] = {}
        for data in documents:
            if data is not None:
                found[data["_id"]] = await self._from_mongo(data, unsent)
        return found

    async def load_heads(self, workflow_ids: Sequence[str]) -> dict[str, WorkflowHeads]:
        projection = {"status": 1, "taskHeads": 1}
        found = await asyncio.gather(
            *(self._workflows.find_one({"_id": wid}, projection) for wid in workflow_ids)
        )
        heads: dict[str, WorkflowHeads] = {}
        older: list[str] = []
        for data in found:
            if data is None:
                continue
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
        """Newest `updatedAt` first, served by the (name?, status?, updatedAt) indexes."""
        query: dict[str, Any] = {}
        if status is not None:
            query["status"] = status.value
        if name is not None:
            query["name"] = name
        found = await self._workflows.find(query, sort=[("updatedAt", DESCENDING)], limit=limit).to_list()
        unsent = await self._unsent_outboxes([data["_id"] for data in found])
        return [await self._from_mongo(data, unsent) for data in found]

    async def find_task_workflow(self, task_id: str) -> str | None:
        """History first (a lookup by `_id`), then live executions through the `taskIds`
        multikey index (on FerretDB that filter scans the collection; fine for an API read)."""
        record = await self._tasks.find_one({"_id": task_id}, {"workflowInstanceId": 1})
        if record is not None:
            return str(record["workflowInstanceId"])
        holder = await self._workflows.find_one({"taskIds": task_id}, {"_id": 1})
        return None if holder is None else str(holder["_id"])

    async def _from_mongo(self, data: dict[str, Any], unsent: set[tuple[str, int]]) -> WorkflowDocument:
        if (data["_id"], data["version"]) not in unsent:
            data["outbox"] = []  # published already
        document = WorkflowDocument.model_validate(_from_opaque(data, _OPAQUE_WORKFLOW_FIELDS))
        if data.get("snapshotId"):
            document.definition = await self._snapshots.get(data["snapshotId"])
        return document

    async def load_workflow(self, workflow_id: str) -> WorkflowDocument | None:
        return (await self.load_workflows([workflow_id])).get(workflow_id)

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
        than the document (see `housekeeping`)."""
        for commit in commits:
            if commit.document.version != commit.expected_version + 1:
                raise ValueError("commit: document.version must be expected_version + 1")
        snapshot_ids = await self._snapshots.store([commit.document.definition for commit in commits])
        data = [_workflow_to_mongo(c.document, sid) for c, sid in zip(commits, snapshot_ids, strict=True)]
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
            _insert_all(self._outbox_pending, [m for m in markers if m is not None]),
        )
        # 2. the commit point: create new documents, insert fences (with the records) for updated
        # ones, and read the stored versions (by _id, the one lookup FerretDB indexes).
        fences = [
            {
                **data[i],
                "_id": _marker_id(data[i]["_id"], data[i]["version"]),
                "records": [_task_to_mongo(task) for task in commits[i].tasks],
            }
            for i in updates
        ]
        late = [i for i in updates if self._read_long_ago(commits[i])]
        created, fenced, stored = await asyncio.gather(
            _insert_all(self._workflows, [data[i] for i in creates]),
            _insert_all(self._commits, fences),
            asyncio.gather(
                *(self._workflows.find_one({"_id": data[i]["_id"]}, {"version": 1}) for i in late)
            ),
        )
        versions = {i: (d["version"] if d is not None else None) for i, d in zip(late, stored, strict=True)}
        won = [False] * len(commits)
        for i, ok in zip(creates, created, strict=True):
            won[i] = ok
        winners: list[int] = []
        stale: list[int] = []
        for i, ok in zip(updates, fenced, strict=True):
            if not ok:
                continue
            if i not in versions or versions[i] in (commits[i].expected_version, data[i]["version"]):
                winners.append(i)
            else:  # the document moved on (or is gone) behind this decider's back
                stale.append(i)
        # 3. materialise: the winners' task records, then the read model.
        await self.upsert_tasks([task for i in winners for task in commits[i].tasks])
        if winners:
            result = await self._workflows.bulk_write(
                [ReplaceOne(self._materialise_filter(data[i]), data[i]) for i in winners], ordered=False
            )
            if result.matched_count < len(winners):
                winners = await self._keep_materialised(winners, data)
            for i in winners:
                won[i] = True
        if stale:
            log.warning(
                "stale commits refused: %s", [f"{data[i]['_id']}#{data[i]['version']}" for i in stale]
            )
            await self._commits.delete_many(
                {"_id": {"$in": [_marker_id(data[i]["_id"], data[i]["version"]) for i in stale]}}
            )
        for i, ok in zip(updates, fenced, strict=True):
            if not ok:
                await self._roll_forward(data[i]["_id"])
        lost_markers = [m["_id"] for m, ok in zip(markers, won, strict=True) if m is not None and not ok]
        if lost_markers:
            await self._outbox_pending.delete_many({"_id": {"$in": lost_markers}})
        return won

    def _read_long_ago(self, commit: Commit) -> bool:
        """Whether a commit's base was read so long ago that the fence of its next version may
        have been pruned since: a fence is kept at least `fence_retention` after it was written,
        so a commit within half of it (the other half absorbs clock skew between the decider and
        the sweeper's housekeeping) is fenced by the insert alone and needs no version read."""
        if commit.read_at is None:
            return True
        return time.time() * 1000 - commit.read_at > self._fence_retention_ms / 2

    def _materialise_filter(self, data: dict[str, Any]) -> dict[str, Any]:
        """Never replace a newer version — where the server can check that cheaply and atomically.

        On FerretDB a filter beyond `{_id}` costs more and is not atomic anyway; the version read
        at the commit point stands in for it there. What it cannot see is a rival building on this
        very commit in the few milliseconds before the replace, which briefly shows the older
        version until the next decision's failed fence insert rolls it forward."""
        if self._atomic_updates:
            return {"_id": data["_id"], "version": {"$lt": data["version"]}}
        return {"_id": data["_id"]}

    async def _keep_materialised(self, winners: list[int], data: list[dict[str, Any]]) -> list[int]:
        """The winners whose replace matched nothing: a document that is gone committed onto
        nothing (its fence is undone); one at this very version was rolled forward by a rival
        (a win); one past it was built on by a rival that rolled this commit forward — reported
        lost, which is safe: the reload finds these events applied and the outbox carried."""
        ids = [data[i]["_id"] for i in winners]
        found = await asyncio.gather(*(self._workflows.find_one({"_id": wid}, {"version": 1}) for wid in ids))
        versions = {d["_id"]: d["version"] for d in found if d is not None}
        kept = []
        for i in winners:
            version = versions.get(data[i]["_id"])
            if version is None:
                await self._commits.delete_one({"_id": _marker_id(data[i]["_id"], data[i]["version"])})
            elif version == data[i]["version"]:
                kept.append(i)
        return kept

    async def _roll_forward(self, workflow_id: str) -> None:
        """Someone committed a version the document does not show yet: write its task records,
        then materialise it."""
        newest = await self._commits.find_one({"workflowId": workflow_id}, sort=[("version", DESCENDING)])
        if newest is not None:
            records = newest.pop("records", [])
            newest["_id"] = workflow_id
            current = await self._workflows.find_one({"_id": workflow_id}, {"version": 1})
            if current is not None and current["version"] < newest["version"]:
                if records:
                    await self.upsert_tasks([_task_from_mongo(record) for record in records])
                await self._workflows.replace_one(self._materialise_filter(newest), newest)

    async def remove_workflow(self, workflow_id: str) -> bool:
        """The read model goes last: while it exists, a concurrent reader still sees a whole
        execution; fences go too, so a roll-forward cannot bring the execution back."""
        await self._tasks.delete_many({"workflowInstanceId": workflow_id})
        await self._outbox_pending.delete_many({"workflowId": workflow_id})
        await self._commits.delete_many({"workflowId": workflow_id})
        result = await self._workflows.delete_one({"_id": workflow_id})
        return bool(result.deleted_count)

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
        timer claim records `delete_timers` left behind."""
        await asyncio.gather(self._prune_fences(now), self._prune_timer_claims(now))

    async def _prune_fences(self, now: int) -> None:
        """Fences older than the retention, but only those below their document's version: the
        newest fence of a workflow whose materialisation was lost must stay for the roll-forward.
        (A decider frozen longer than the retention no longer relies on fences: its commit is
        refused by the version read at the commit point.)"""
        old = await self._commits.find(
            {"updatedAt": {"$lt": now - self._fence_retention_ms}},
            {"workflowId": 1, "version": 1},
            limit=FENCE_PRUNE_BATCH,
        ).to_list()
        if not old:
            return
        ids = sorted({record["workflowId"] for record in old})
        found = await asyncio.gather(*(self._workflows.find_one({"_id": wid}, {"version": 1}) for wid in ids))
        versions = {d["_id"]: d["version"] for d in found if d is not None}
        doomed = [r["_id"] for r in old if r["version"] < versions.get(r["workflowId"], r["version"] + 1)]
        if doomed:
            await self._commits.delete_many({"_id": {"$in": doomed}})

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

    # ---- task records ----

    async def upsert_tasks(self, tasks: Sequence[TaskState]) -> None:
        """Insert first (cheap everywhere); overwrite only the ids that already existed."""
        documents = [_task_to_mongo(task) for task in tasks]
        inserted = await _insert_all(self._tasks, documents)
        existing = [document for document, ok in zip(documents, inserted, strict=True) if not ok]
        if existing:
            await self._tasks.bulk_write(
                [ReplaceOne({"_id": d["_id"]}, d, upsert=True) for d in existing], ordered=False
            )

    async def get_task(self, task_id: str) -> TaskState | None:
        data = await self._tasks.find_one({"_id": task_id})
        return None if data is None else _task_from_mongo(data)

    async def list_tasks(self, workflow_id: str) -> list[TaskState]:
        cursor = self._tasks.find({"workflowInstanceId": workflow_id}, sort=[("seq", ASCENDING)])
        return [_task_from_mongo(data) async for data in cursor]

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
        replaces = 0
        while (current := await self._task_claims.find_one({"_id": f"{task_id}@{replaces}"})) is not None:
            if current["claimUntil"] > now:
                return False  # a live claim, whoever holds it
            replaces = current["claimUntil"]
        try:
            await self._task_claims.insert_one(
                {
                    "_id": f"{task_id}@{replaces}",
                    "taskId": task_id,
                    "workerId": worker_id,
                    "claimUntil": now + lease_ms,
                    "at": now,
                }
            )
        except DuplicateKeyError:
            return False  # another claimer took this generation first
        return True

    # ---- timers ----

    async def upsert_timer(self, timer: TimerRecord) -> None:
        data = timer.model_dump(by_alias=True, mode="json")
        data["_id"] = timer.timer_id
        await self._timers.replace_one({"_id": timer.timer_id}, data, upsert=True)

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

        Round trips for a batch of any size: the query, one insert_many, one bulk_write; a
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
                "_id": _timer_claim_id(timer_id, replaces),
                "timerId": timer_id,
                "owner": owner,
                "at": now,
                "claimUntil": until,
            }

        inserted = await _insert_all(
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
            await self._timers.bulk_write(
                [
                    UpdateOne({"_id": d["_id"]}, {"$set": {"claimUntil": until, "claimedBy": owner}})
                    for d in won
                ],
                ordered=False,
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
            current = await self._timer_claims.find_one({"_id": _timer_claim_id(timer_id, replaces)})
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
