"""Workflow search on MongoDB (shared/search.py): a query becomes one filter on the top-level
copies every commit keeps of what searches look at (mongo_codec.workflow_to_mongo), run on both
homes of an execution — `workflows` while it runs, `finished` once it ended — and merged.

On MongoDB the fields are indexed (mongo_store's `open`); FerretDB answers any filter but `_id`
with a scan, so on FerretDB a search reads the collections through (an operator's call, not a
decision's). Free text matches the document's state, the JSON text holding its input, output and
executions. The state is stored compressed (mongo_opaque), so no server-side expression can read
it: the documents the rest of the query selects are read here, state included, and matched after
decompression, as the server's regular expression over the text matched them before (a scan
either way; on FerretDB, one that costs the server less)."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from pymongo import ASCENDING, DESCENDING, UpdateOne

from shared.adapters.mongo_opaque import opaque_text
from shared.search import AllOf, AnyOf, Condition, Query, SearchRequest

FIELDS = {
    "workflowType": "name",
    "workflowId": "_id",
    "correlationId": "correlationId",
    "status": "status",
    "startTime": "startTime",
    "endTime": "endTime",
    "updateTime": "updatedAt",
    "version": "workflowVersion",
    "parentWorkflowId": "parentWorkflowId",
    "idempotencyKey": "idempotencyKey",
}
SEARCH_INDEXES = [
    [("startTime", DESCENDING)],
    [("status", ASCENDING), ("startTime", DESCENDING)],
    [("name", ASCENDING), ("startTime", DESCENDING)],
    [("correlationId", ASCENDING)],
]
"""Indexed on MongoDB, where they serve the searches (not on FerretDB, where they only cost)."""


TASK_FIELDS = {
    "taskId": "_id",
    "taskType": "taskType",
    "taskDefName": "taskDefName",
    "referenceTaskName": "referenceTaskName",
    "status": "status",
    "workflowId": "workflowInstanceId",
    "workflowType": "workflowType",
    "scheduledTime": "scheduledTime",
    "startTime": "startTime",
    "updateTime": "updateTime",
    "endTime": "endTime",
}


def _condition(condition: Condition, fields: dict[str, str]) -> dict[str, Any]:
    name = fields[condition.field]
    values = condition.values
    match condition.op:
        case "=" if isinstance(values[0], str) and "*" in values[0]:
            pattern = "^" + ".*".join(re.escape(part) for part in values[0].split("*")) + "$"
            return {name: {"$regex": pattern}}
        case "=":
            return {name: values[0]}
        case "!=":
            return {name: {"$ne": values[0]}}
        case ">":
            return {name: {"$gt": values[0]}}
        case "<":
            return {name: {"$lt": values[0]}}
        case ">=":
            return {name: {"$gte": values[0]}}
        case "<=":
            return {name: {"$lte": values[0]}}
        case "IN":
            return {name: {"$in": list(values)}}
        case "IS NULL":
            return {name: None}
        case "IS NOT NULL":
            return {name: {"$ne": None}}
        case "BETWEEN":
            return {name: {"$gte": values[0], "$lte": values[1]}}
        case "STARTS_WITH":
            return {name: {"$regex": "^" + re.escape(str(values[0]))}}
    raise ValueError(f"no filter for {condition.op}")


def to_filter(
    query: Query | None,
    free_text: str | None,
    fields: dict[str, str] = FIELDS,
    text_fields: tuple[str, ...] = ("state",),
) -> dict[str, Any]:
    def part(node: Query) -> dict[str, Any]:
        match node:
            case Condition():
                return _condition(node, fields)
            case AllOf():
                return {"$and": [part(p) for p in node.parts]} if node.parts else {}
            case AnyOf():
                return {"$or": [part(p) for p in node.parts]} if node.parts else {"_id": {"$in": []}}

    parts = [part(query)] if query is not None else []
    if free_text is not None:
        pattern = {"$regex": re.escape(free_text), "$options": "i"}
        parts.append({"$or": [{name: pattern} for name in text_fields]})
    if not parts:
        return {}
    return parts[0] if len(parts) == 1 else {"$and": parts}


async def search(running: Any, finished: Any, request: SearchRequest) -> tuple[int, list[dict[str, Any]]]:
    """(exact count, one page of stored documents) over both collections."""
    query = to_filter(request.query, None)
    sort = [(FIELDS[name], DESCENDING if descending else ASCENDING) for name, descending in request.sort]
    if all(key != "_id" for key, _ in sort):
        sort.append(("_id", ASCENDING))  # a stable order between equal keys, for paging
    wanted = request.start + request.size
    # The order of the first start+size of each home from their sort keys alone, then the page's
    # documents whole: deep pages cost keys, not documents.
    keys = {FIELDS[name]: 1 for name, _ in request.sort} | {"version": 1}
    if request.free_text is not None:
        text = re.compile(re.escape(request.free_text), re.IGNORECASE)
        counts, pages = zip(
            *await asyncio.gather(*(_text_matches(c, query, keys, text) for c in (running, finished))),
            strict=True,
        )
    elif request.size == 0:  # the count only (a limit of 0 is no limit to MongoDB)
        counts = await asyncio.gather(running.count_documents(query), finished.count_documents(query))
        return sum(counts), []
    else:
        counts, pages = zip(
            *await asyncio.gather(
                *(
                    asyncio.gather(
                        collection.count_documents(query),
                        collection.find(query, keys, sort=sort, limit=wanted).to_list(),
                    )
                    for collection in (running, finished)
                )
            ),
            strict=True,
        )
    newest: dict[str, dict[str, Any]] = {}
    for data in (d for page in pages for d in page):  # a document caught mid-move: the newer copy
        if data["_id"] not in newest or newest[data["_id"]]["version"] < data["version"]:
            newest[data["_id"]] = data
    moving = sum(len(page) for page in pages) - len(newest)
    if request.size == 0:
        return sum(counts) - moving, []
    ordered = sorted(newest.values(), key=lambda d: d["_id"])
    for name, descending in reversed(request.sort):  # stable sorts, last key first
        ordered.sort(key=_sort_key(FIELDS[name]), reverse=descending)
    chosen = [d["_id"] for d in ordered[request.start : wanted]]
    whole = await asyncio.gather(
        *(collection.find({"_id": {"$in": chosen}}).to_list() for collection in (running, finished))
    )
    by_id: dict[str, dict[str, Any]] = {}
    for data in (d for found in whole for d in found):
        if data["_id"] not in by_id or by_id[data["_id"]]["version"] < data["version"]:
            by_id[data["_id"]] = data
    return sum(counts) - moving, [by_id[i] for i in chosen if i in by_id]


async def _text_matches(
    collection: Any, query: dict[str, Any], keys: dict[str, int], text: re.Pattern[str]
) -> tuple[int, list[dict[str, Any]]]:
    """(how many, the sort keys of every document) of `collection` that `query` selects and whose
    state's JSON text `text` matches; the state is read and dropped one batch at a time."""
    matched: list[dict[str, Any]] = []
    async for data in collection.find(query, keys | {"state": 1}):
        state = data.pop("state", None)
        if isinstance(state, str | bytes) and text.search(opaque_text(state)):
            matched.append(data)
    return len(matched), matched


def _sort_key(name: str) -> Callable[[dict[str, Any]], tuple[int, Any]]:
    """Missing values after present ones (ascending), never compared with them."""

    def key(data: dict[str, Any]) -> tuple[int, Any]:
        value = data.get(name)
        return (1, 0) if value is None else (0, value)

    return key


async def search_tasks(tasks: Any, request: SearchRequest) -> tuple[int, list[dict[str, Any]]]:
    """Task records (one collection): exact count and one page, in the request's order."""
    query = to_filter(request.query, request.free_text, TASK_FIELDS, ("inputData", "outputData"))
    sort = [(TASK_FIELDS[name], DESCENDING if descending else ASCENDING) for name, descending in request.sort]
    if all(key != "_id" for key, _ in sort):
        sort.append(("_id", ASCENDING))
    total = await tasks.count_documents(query)
    if request.size == 0:  # a limit of 0 is no limit to MongoDB
        return int(total), []
    page = await tasks.find(query, sort=sort, skip=request.start, limit=request.size).to_list()
    return int(total), page


def searched_copies(state: dict[str, Any]) -> dict[str, Any]:
    """The top-level copies a document of `state` (its JSON, camelCase) carries for searches,
    as mongo_codec.workflow_to_mongo writes them."""
    copies: dict[str, Any] = {
        "startTime": state.get("startTime") or state.get("createTime") or 0,
        "workflowVersion": state.get("workflowVersion") or 0,
    }
    for name in ("correlationId", "endTime", "parentWorkflowId", "idempotencyKey"):
        if state.get(name):
            copies[name] = state[name]
    return copies


def _parsed(data: dict[str, Any]) -> dict[str, Any]:
    """A stored document's state, parsed: compressed, plain JSON text, or (older) a document."""
    state = data.get("state")
    parsed: dict[str, Any] = json.loads(opaque_text(state)) if isinstance(state, str | bytes) else state or {}
    return parsed


async def backfill(
    collections: tuple[Any, ...],
    limit: int,
    update: Callable[[Any, Sequence[UpdateOne]], Awaitable[int]],
) -> int:
    """Documents stored before searches had their fields (no `startTime`) get them, up to
    `limit` per collection; how many were written. Each `$set` is conditional on the version read,
    so a commit in between wins (and writes the fields itself). `update` sends a collection's
    updates (the store's `updates`)."""
    written = 0
    for collection in collections:
        stale = await collection.find(
            {"startTime": {"$exists": False}}, {"state": 1, "version": 1}, limit=limit
        ).to_list()
        await update(
            collection,
            [
                UpdateOne(
                    {"_id": data["_id"], "version": data["version"]}, {"$set": searched_copies(_parsed(data))}
                )
                for data in stale
            ],
        )
        written += len(stale)
    return written
