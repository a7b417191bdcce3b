"""Store port on MongoDB (and MongoDB-protocol servers such as FerretDB) with PyMongo's async API.

Needs no transactions and no change streams — and does not trust conditional updates to be
atomic either: FerretDB 1.24 evaluates `update {_id, version: v}` as a read followed by a write,
so two concurrent writers can both "win" (measured: 28 of 30 trials with 8 writers). The one
operation every MongoDB-protocol server makes atomic is an insert into a unique `_id`, so that is
the commit point (docs/architecture.md, "Fenced commits"):

1. commit = insert `{_id: "<workflowId>#<version>"}` into `workflow_commits`, carrying the whole
   new document. Exactly one writer can commit a given version; a stale writer gets a duplicate
   key error and the version check fails, as the design requires.
2. the `workflows` document is then materialised from it (and re-materialised by whoever next
   meets the duplicate), and the previous commit record is pruned.

Task records and timers are upserts under deterministic ids; timer claims are fenced the same way.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from pymongo import ASCENDING, DESCENDING, AsyncMongoClient, ReplaceOne
from pymongo.errors import DuplicateKeyError

from shared.models.definitions import TaskDef, WorkflowDef
from shared.models.documents import TimerRecord, WorkflowDocument
from shared.models.runtime import TaskState, WorkflowStatus


def _workflow_to_mongo(document: WorkflowDocument) -> dict[str, Any]:
    data = document.model_dump(by_alias=True, mode="json", exclude_none=True)
    data["_id"] = document.workflow_id
    # Top-level copies of what queries filter on; the nested state stays the source of truth.
    data["status"] = document.state.status.value
    data["name"] = document.state.workflow_name
    data["outboxPending"] = bool(document.outbox)
    return data


def _workflow_from_mongo(data: dict[str, Any]) -> WorkflowDocument:
    return WorkflowDocument.model_validate(data)


class MongoStore:
    def __init__(self, url: str, database: str = "cairn") -> None:
        self._client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(url, tz_aware=True)
        db = self._client[database]
        self._workflows = db["workflows"]
        self._commits = db["workflow_commits"]
        self._timer_claims = db["timer_claims"]
        self._tasks = db["tasks"]
        self._timers = db["timers"]
        self._workflow_defs = db["workflow_defs"]
        self._task_defs = db["task_defs"]

    async def open(self) -> None:
        await self._workflows.create_index([("status", ASCENDING), ("updatedAt", ASCENDING)])
        await self._workflows.create_index([("outboxPending", ASCENDING), ("outboxSince", ASCENDING)])
        await self._workflows.create_index([("name", ASCENDING), ("status", ASCENDING)])
        await self._commits.create_index([("workflowId", ASCENDING), ("version", DESCENDING)])
        await self._tasks.create_index([("workflowInstanceId", ASCENDING), ("seq", ASCENDING)])
        await self._timers.create_index([("fireAt", ASCENDING)])
        await self._workflow_defs.create_index([("name", ASCENDING), ("version", DESCENDING)])

    async def close(self) -> None:
        await self._client.close()

    async def ping(self) -> None:
        await self._client.admin.command("ping")

    # ---- definitions ----

    async def put_workflow_def(self, definition: WorkflowDef) -> None:
        data = definition.to_json_dict()
        data["_id"] = f"{definition.name}:{definition.version}"
        await self._workflow_defs.replace_one({"_id": data["_id"]}, data, upsert=True)

    async def get_workflow_def(self, name: str, version: int | None = None) -> WorkflowDef | None:
        query: dict[str, Any] = {"name": name}
        if version is not None:
            query["version"] = version
        data = await self._workflow_defs.find_one(query, sort=[("version", DESCENDING)])
        if data is None:
            return None
        data.pop("_id", None)
        return WorkflowDef.model_validate(data)

    async def list_workflow_defs(self) -> list[WorkflowDef]:
        found = []
        async for data in self._workflow_defs.find({}, sort=[("name", ASCENDING), ("version", ASCENDING)]):
            data.pop("_id", None)
            found.append(WorkflowDef.model_validate(data))
        return found

    async def put_task_def(self, task_def: TaskDef) -> None:
        data = task_def.to_json_dict()
        data["_id"] = task_def.name
        await self._task_defs.replace_one({"_id": task_def.name}, data, upsert=True)

    async def get_task_defs(self, names: Sequence[str]) -> dict[str, TaskDef]:
        found = {}
        async for data in self._task_defs.find({"_id": {"$in": list(names)}}):
            data.pop("_id", None)
            task_def = TaskDef.model_validate(data)
            found[task_def.name] = task_def
        return found

    # ---- workflows ----

    async def create_workflow(self, document: WorkflowDocument) -> bool:
        try:
            await self._workflows.insert_one(_workflow_to_mongo(document))
        except DuplicateKeyError:
            return False
        return True

    async def load_workflow(self, workflow_id: str) -> WorkflowDocument | None:
        data = await self._workflows.find_one({"_id": workflow_id})
        return None if data is None else _workflow_from_mongo(data)

    async def commit_workflow(self, document: WorkflowDocument, expected_version: int) -> bool:
        if document.version != expected_version + 1:
            raise ValueError("commit_workflow: document.version must be expected_version + 1")
        data = _workflow_to_mongo(document)
        record = {**data, "_id": f"{document.workflow_id}#{document.version}"}
        try:
            await self._commits.insert_one(record)
        except DuplicateKeyError:
            await self._roll_forward(document.workflow_id)
            return False
        if not await self._materialise(data) and await self._workflows.find_one({"_id": data["_id"]}, {"_id": 1}) is None:
            await self._commits.delete_one({"_id": record["_id"]})  # there was nothing to commit onto
            return False
        await self._commits.delete_one({"_id": f"{document.workflow_id}#{expected_version}"})
        return True

    async def _materialise(self, data: dict[str, Any]) -> bool:
        """Make the workflows document show a committed version, never replacing a newer one."""
        result = await self._workflows.replace_one(
            {"_id": data["_id"], "version": {"$lt": data["version"]}}, data
        )
        return result.matched_count == 1

    async def _roll_forward(self, workflow_id: str) -> None:
        """Someone committed a version the document does not show yet: materialise the newest."""
        newest = await self._commits.find_one({"workflowId": workflow_id}, sort=[("version", DESCENDING)])
        if newest is not None:
            newest["_id"] = workflow_id
            await self._materialise(newest)

    async def mark_outbox_sent(self, workflow_id: str, version: int) -> None:
        # Only the version whose outbox was published; a newer version publishes its own outbox.
        await self._workflows.update_one(
            {"_id": workflow_id, "version": version},
            {"$set": {"outbox": [], "outboxPending": False}, "$unset": {"outboxSince": ""}},
        )

    async def list_workflows(
        self, status: str | None = None, name: str | None = None, limit: int = 100
    ) -> list[WorkflowDocument]:
        query: dict[str, Any] = {}
        if status:
            query["status"] = status
        if name:
            query["name"] = name
        cursor = self._workflows.find(query, sort=[("updatedAt", DESCENDING)], limit=limit)
        return [_workflow_from_mongo(data) async for data in cursor]

    async def find_workflows_to_sweep(
        self, outbox_older_than: int, running_stale_before: int, limit: int
    ) -> list[str]:
        ids: list[str] = []
        async for data in self._workflows.find(
            {"outboxPending": True, "outboxSince": {"$lt": outbox_older_than}}, {"_id": 1}, limit=limit
        ):
            ids.append(data["_id"])
        async for data in self._workflows.find(
            {"status": WorkflowStatus.RUNNING.value, "updatedAt": {"$lt": running_stale_before}},
            {"_id": 1},
            limit=limit,
        ):
            if data["_id"] not in ids:
                ids.append(data["_id"])
        return ids[:limit]

    # ---- task records ----

    async def upsert_tasks(self, tasks: Sequence[TaskState]) -> None:
        if not tasks:
            return
        operations = []
        for task in tasks:
            data = task.model_dump(by_alias=True, mode="json")
            data["_id"] = task.task_id
            operations.append(ReplaceOne({"_id": task.task_id}, data, upsert=True))
        await self._tasks.bulk_write(operations, ordered=False)

    async def get_task(self, task_id: str) -> TaskState | None:
        data = await self._tasks.find_one({"_id": task_id})
        return None if data is None else TaskState.model_validate(data)

    async def list_tasks(self, workflow_id: str) -> list[TaskState]:
        cursor = self._tasks.find({"workflowInstanceId": workflow_id}, sort=[("seq", ASCENDING)])
        return [TaskState.model_validate(data) async for data in cursor]

    # ---- timers ----

    async def upsert_timer(self, timer: TimerRecord) -> None:
        data = timer.model_dump(by_alias=True, mode="json")
        data["_id"] = timer.timer_id
        await self._timers.replace_one({"_id": timer.timer_id}, data, upsert=True)

    async def delete_timers(self, timer_ids: Sequence[str]) -> None:
        if timer_ids:
            await self._timers.delete_many({"_id": {"$in": list(timer_ids)}})
            for timer_id in timer_ids:
                await self._timer_claims.delete_many({"_id": {"$regex": f"^{re.escape(timer_id)}@"}})

    async def claim_due_timers(self, now: int, owner: str, lease_ms: int, limit: int) -> list[TimerRecord]:
        """A claim is the insert of `<timerId>@<claimUntil it replaces>`: unique per lease
        generation, so of several replicas seeing the same due timer exactly one claims it."""
        claimed: list[TimerRecord] = []
        cursor = self._timers.find(
            {"fireAt": {"$lte": now}, "claimUntil": {"$lte": now}}, sort=[("fireAt", ASCENDING)], limit=limit
        )
        async for data in cursor:
            try:
                await self._timer_claims.insert_one(
                    {"_id": f"{data['_id']}@{data['claimUntil']}", "owner": owner, "at": now}
                )
            except DuplicateKeyError:
                continue
            await self._timers.update_one(
                {"_id": data["_id"]}, {"$set": {"claimUntil": now + lease_ms, "claimedBy": owner}}
            )
            data.update(claimUntil=now + lease_ms, claimedBy=owner)
            claimed.append(TimerRecord.model_validate(data))
        return claimed
