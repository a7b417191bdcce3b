"""How the MongoDB adapter lays Cairn's records out as documents, and what its parts share.

The store is split by job: `mongo_store` (reads, definitions, task records, claims),
`mongo_commits` (the fenced commit and where a committed document lives), `mongo_timers`, and
`mongo_retention` (purging finished executions). `MongoParts` is the state they share.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from pymongo import ReplaceOne
from pymongo.errors import BulkWriteError, OperationFailure

from shared.adapters.mongo_opaque import OPAQUE_TASK_FIELDS, OPAQUE_WORKFLOW_FIELDS, from_opaque, to_opaque
from shared.adapters.mongo_search import searched_copies
from shared.core.attention import attention_at
from shared.models.definitions import TaskDef, WorkflowDef
from shared.models.documents import WorkflowDocument
from shared.models.runtime import TaskState, WorkflowStatus
from shared.ports.store import HistoryChunk, encode_heads

DUPLICATE_KEY = 11000
FINISHED_STATUSES = tuple(status.value for status in WorkflowStatus if status.is_terminal)


def definition_to_mongo(key: str, definition: WorkflowDef | TaskDef) -> dict[str, Any]:
    data: dict[str, Any] = {
        "_id": key,
        "name": definition.name,
        "body": json.dumps(definition.to_json_dict()),
    }
    if isinstance(definition, WorkflowDef):
        data["version"] = definition.version
    return data


def definition_body(data: dict[str, Any]) -> dict[str, Any]:
    if "body" not in data:  # written before definitions were stored as JSON text
        return {k: v for k, v in data.items() if k != "_id"}
    body: dict[str, Any] = json.loads(data["body"])
    return body


def workflow_to_mongo(document: WorkflowDocument, snapshot_id: str | None) -> dict[str, Any]:
    data = document.model_dump(by_alias=True, mode="json", exclude_none=True, exclude={"definition"})
    # Top-level copies of what queries filter on; the nested state stays the source of truth.
    data["status"] = document.state.status.value
    data["name"] = document.state.workflow_name
    # ... and what searches filter and sort on (mongo_search), left out when unset, which a
    # search's `IS NULL` matches: every byte of a document costs FerretDB on every commit
    data.update(searched_copies(data["state"]))
    to_opaque(data, OPAQUE_WORKFLOW_FIELDS)
    data["_id"] = document.workflow_id
    data["snapshotId"] = snapshot_id
    data["taskIds"] = [task.task_id for task in document.state.tasks.values()]  # multikey index
    # What the api reads to answer workers (load_heads), without the opaque state; JSON text,
    # as FerretDB stores no nested arrays.
    data["taskHeads"] = encode_heads(document.state)
    data["attentionAt"] = attention_at(document.state)  # None: nothing about it can be overdue
    return data


def task_to_mongo(task: TaskState) -> dict[str, Any]:
    data = to_opaque(task.model_dump(by_alias=True, mode="json"), OPAQUE_TASK_FIELDS)
    data["_id"] = task.task_id
    return data


def task_from_mongo(data: dict[str, Any]) -> TaskState:
    return TaskState.model_validate(from_opaque(data, OPAQUE_TASK_FIELDS))


UPDATES_PER_COMMAND = 8
"""At most this many update statements in one command on FerretDB's PostgreSQL backend.

FerretDB 1.24 on PostgreSQL, its default backend, holds a pool connection for each statement of
an update command that matched a document until the command ends, and takes one more to write
(docs/research/ferretdb-backends.md, section 2). A group commit sending the replaces of 50 running
executions as one bulk write took all of FerretDB's default pool of 50 and waited for a 51st
forever, wedging the server for every client. Commands of 8, one at a time per store
(`MongoParts.updates`), hold at most 9 connections, whatever else runs in the process. Only
there: FerretDB's SQLite backend has no pool and MongoDB no such hold, and the extra commands
would only add round trips to every group commit."""


async def ferretdb_on_postgresql(collection: Any) -> bool | None:
    """Whether `collection` is served by FerretDB's PostgreSQL backend: its `explain` answers with
    PostgreSQL's plan tree (a document), where the SQLite backend gives SQLite's plan lines (a list)
    and MongoDB a `winningPlan`. Nothing else FerretDB 1.24 reports names its backend. None: no
    plan to tell by (a collection that does not exist, or a plan of another shape). A server
    that refuses the explain is taken for PostgreSQL: smaller commands are always safe."""
    try:
        explained = await collection.database.command(
            "explain", {"find": collection.name, "filter": {"_id": ""}}, verbosity="queryPlanner"
        )
    except OperationFailure:
        return True
    plan = explained.get("queryPlanner", {}).get("Plan")
    return None if plan is None else isinstance(plan, dict)


async def insert_all(collection: Any, documents: list[dict[str, Any]]) -> list[bool]:
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
        await insert_all(self._collection, list(new.values()))  # duplicates: stored before
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


def fence_id(workflow_id: str, version: int, base_updated_at: int | None) -> str:
    """`W#v` qualified by the updated time of the version it is based on, which every rival for
    `v` shares: an execution removed and created again under its id (fences of removed
    executions expire with their bucket, `mongo_fences`) never meets the old one's fences."""
    if base_updated_at is None:
        return f"{workflow_id}#{version}"
    return f"{workflow_id}#{version}@{base_updated_at}"


def timer_claim_id(timer_id: str, replaces: int) -> str:
    return f"{timer_id}@{replaces}"


def history_to_mongo(chunk: HistoryChunk) -> dict[str, Any]:
    return {
        "_id": chunk.chunk_id,
        "workflowId": chunk.workflow_id,
        "generation": chunk.generation,
        "first": chunk.first,
        "events": list(chunk.events),
    }


def history_from_mongo(data: dict[str, Any]) -> HistoryChunk:
    return HistoryChunk(data["workflowId"], data["generation"], data["first"], data["events"])


def is_finished(data: dict[str, Any]) -> bool:
    """Whether a stored workflow document is in a terminal state (it belongs in `finished`)."""
    return data.get("status") in FINISHED_STATUSES


class MongoParts:
    """The collections and settings the store's parts share; `MongoStore.__init__` sets them.

    Workflow documents live in one of two collections. `workflows` holds the executions that are
    not finished: every decision replaces a document there, and FerretDB runs a replace or a
    delete by `_id` as a scan of the collection (measured on this machine: 1.7 ms with one
    document, 46 ms at 6,000 finished ones beside it; inserts and finds by `_id` stay at ~1 ms).
    `finished` holds the rest, written by insert, so a decision's cost does not grow with history."""

    _workflows: Any
    _finished: Any
    _ids: Any
    _commits: Any
    _outbox_pending: Any
    _tasks: Any
    _history: Any
    _timers: Any
    _timer_claims: Any
    _task_claims: Any
    _snapshots: SnapshotCache
    _atomic_updates: bool
    _updates_per_command: int | None
    _update_commands_sized: bool
    _update_gate: asyncio.Semaphore
    _fence_retention_ms: int
    _fences_pruned_at: int = 0
    _ids_registered: bool = False

    async def write_history(self, chunks: Sequence[dict[str, Any]]) -> None:
        """History chunks (`history_to_mongo`) of commits that won: a chunk id holds the same
        events whoever writes it, so an existing one is left as it is."""
        if chunks:
            await insert_all(self._history, list(chunks))

    async def upsert_tasks(self, tasks: Sequence[TaskState]) -> None:
        """Insert first (cheap everywhere); overwrite only the ids that already existed."""
        documents = [task_to_mongo(task) for task in tasks]
        inserted = await insert_all(self._tasks, documents)
        existing = [document for document, ok in zip(documents, inserted, strict=True) if not ok]
        if existing:
            await self.updates(self._tasks, [ReplaceOne({"_id": d["_id"]}, d, upsert=True) for d in existing])

    async def updates(self, collection: Any, requests: Sequence[Any]) -> int:
        """Every update or replace that may match goes through here: unordered, in commands of
        at most `_updates_per_command` (None: one command), and where that is bounded (FerretDB
        on PostgreSQL, or not known yet) one command at a time in this store, so its process holds
        at most `UPDATES_PER_COMMAND` + 1 of FerretDB's pool connections. Returns how many
        documents they matched.

        On FerretDB the size is found at the first update of a collection (`ferretdb_on_postgresql`
        reads a query plan of it), not at `open`: a plan needs the collection to exist, and
        creating one there is a DDL under FerretDB's global lock, which must not meet a running
        writer (`_ensure_indexes`). A server whose plan tells nothing gets the safe size for good."""
        if requests and not self._update_commands_sized:
            pooled = await ferretdb_on_postgresql(collection)
            self._updates_per_command = None if pooled is False else UPDATES_PER_COMMAND
            self._update_commands_sized = True
        size = self._updates_per_command
        if size is None:
            return (
                (await collection.bulk_write(list(requests), ordered=False)).matched_count if requests else 0
            )
        matched = 0
        for at in range(0, len(requests), size):
            async with self._update_gate:
                result = await collection.bulk_write(list(requests[at : at + size]), ordered=False)
            matched += result.matched_count
        return matched

    async def find_current(
        self,
        workflow_ids: Sequence[str],
        projection: dict[str, Any] | None = None,
        running_only: bool = False,
    ) -> dict[str, dict[str, Any]]:
        """The stored document of each workflow among `workflow_ids` that exists: from
        `workflows`, or else from `finished`. One `{_id}` lookup each, concurrently: the only
        filter FerretDB answers from an index (`$in` included, any other filter scans).

        A document is inserted into `finished` before it leaves `workflows`, so a reader never
        misses it; in between (or after a crash there) `workflows` shows the version before,
        which the next decision's failed fence rolls forward (`mongo_commits`).

        A find by `_id` that finds nothing scans the whole collection on FerretDB 1.24 (measured:
        1 ms for a hit, 48 ms for a miss beside 6,000 documents), so `running_only` callers, who
        mostly ask for ids that do not exist yet (new executions), never look in `finished`."""
        hot = await asyncio.gather(*(self._workflows.find_one({"_id": w}, projection) for w in workflow_ids))
        found = {data["_id"]: data for data in hot if data is not None}
        missing = [w for w in workflow_ids if w not in found]
        if missing and not running_only:
            cold = await asyncio.gather(*(self._finished.find_one({"_id": w}, projection) for w in missing))
            found.update({data["_id"]: data for data in cold if data is not None})
        return found

    async def stored_versions(self, workflow_ids: Sequence[str]) -> dict[str, int]:
        found = await self.find_current(workflow_ids, {"version": 1})
        return {workflow_id: data["version"] for workflow_id, data in found.items()}
