"""Workflow search on SQLite: an index table beside `store_workflows`, and queries over it.

`store_workflow_search` holds one row per execution with the fields a search filters and sorts
on (shared/search.py), each indexed where a query would otherwise scan. A commit writes it only
when one of them changed — the start, a pause or resume, the end, a restart — through an upsert
whose WHERE leaves the row alone otherwise, so the steps in between (almost every commit) add
one primary-key probe and no write. `updateTime`, which every commit changes, is read from
`store_workflows` itself (joined), and free text from the document there.
"""

from __future__ import annotations

import re
import sqlite3
from typing import Any

from shared.models.documents import WorkflowDocument
from shared.search import AllOf, AnyOf, Condition, Query, SearchRequest

SEARCH_SCHEMA = """
CREATE TABLE IF NOT EXISTS store_workflow_search (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    status TEXT NOT NULL,
    correlation_id TEXT,
    start_time INTEGER NOT NULL,
    end_time INTEGER,
    workflow_version INTEGER NOT NULL,
    parent_id TEXT,
    idempotency_key TEXT
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS store_search_start ON store_workflow_search (start_time);
CREATE INDEX IF NOT EXISTS store_search_status ON store_workflow_search (status, start_time);
CREATE INDEX IF NOT EXISTS store_search_name ON store_workflow_search (name, start_time);
CREATE INDEX IF NOT EXISTS store_search_correlation ON store_workflow_search (correlation_id);
CREATE INDEX IF NOT EXISTS store_search_end ON store_workflow_search (end_time);
"""
COLUMNS = {
    "workflowType": "s.name",
    "workflowId": "s.id",
    "correlationId": "s.correlation_id",
    "status": "s.status",
    "startTime": "s.start_time",
    "endTime": "s.end_time",
    "updateTime": "w.updated_at",
    "version": "s.workflow_version",
    "parentWorkflowId": "s.parent_id",
    "idempotencyKey": "s.idempotency_key",
}
FIELDS = (
    "id, name, status, correlation_id, start_time, end_time, workflow_version, parent_id, idempotency_key"
)
UPSERT = (
    f"INSERT INTO store_workflow_search ({FIELDS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT (id) DO UPDATE SET name = excluded.name, status = excluded.status,"
    " correlation_id = excluded.correlation_id, start_time = excluded.start_time,"
    " end_time = excluded.end_time, workflow_version = excluded.workflow_version,"
    " parent_id = excluded.parent_id, idempotency_key = excluded.idempotency_key"
    " WHERE (store_workflow_search.name, store_workflow_search.status, store_workflow_search.correlation_id,"
    " store_workflow_search.start_time, store_workflow_search.end_time,"
    " store_workflow_search.workflow_version, store_workflow_search.parent_id,"
    " store_workflow_search.idempotency_key) IS NOT (excluded.name, excluded.status,"
    " excluded.correlation_id, excluded.start_time, excluded.end_time, excluded.workflow_version,"
    " excluded.parent_id, excluded.idempotency_key)"
)
SearchRow = tuple[str, str, str, str | None, int, int | None, int, str | None, str | None]


def search_row(document: WorkflowDocument) -> SearchRow:
    state = document.state
    return (
        document.workflow_id,
        state.workflow_name,
        state.status.value,
        state.correlation_id,
        state.start_time or state.create_time,
        state.end_time or None,
        state.workflow_version,
        state.parent_workflow_id,
        state.idempotency_key,
    )


def create_search_schema(connection: sqlite3.Connection) -> None:
    """The table and its indexes; a state file from before search is indexed once, from the
    documents."""
    existed = connection.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'store_workflow_search'"
    ).fetchone()
    for statement in SEARCH_SCHEMA.split(";"):
        if statement.strip():
            connection.execute(statement)
    if existed:
        return
    connection.execute(
        f"INSERT INTO store_workflow_search ({FIELDS}) SELECT id, name, status,"
        " json_extract(body, '$.state.correlationId'),"
        " COALESCE(NULLIF(json_extract(body, '$.state.startTime'), 0),"
        " json_extract(body, '$.state.createTime'), 0),"
        " NULLIF(json_extract(body, '$.state.endTime'), 0),"
        " COALESCE(json_extract(body, '$.state.workflowVersion'), 0),"
        " json_extract(body, '$.state.parentWorkflowId'), json_extract(body, '$.state.idempotencyKey')"
        " FROM store_workflows WHERE true ON CONFLICT (id) DO NOTHING"
    )


def write_search_row(connection: sqlite3.Connection, row: SearchRow) -> None:
    connection.execute(UPSERT, row)


def _like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


TASK_COLUMNS = {
    "taskId": "t.id",
    "workflowId": "t.workflow_id",
    **{
        name: f"json_extract(t.body, '$.{key}')"
        for name, key in (
            ("taskType", "taskType"),
            ("taskDefName", "taskDefName"),
            ("referenceTaskName", "referenceTaskName"),
            ("status", "status"),
            ("workflowType", "workflowType"),
            ("scheduledTime", "scheduledTime"),
            ("startTime", "startTime"),
            ("updateTime", "updateTime"),
            ("endTime", "endTime"),
        )
    },
}
"""Task records are searched by their JSON: a scan of `store_tasks` (an operator's call)."""


def _condition(condition: Condition, params: list[Any], columns: dict[str, str]) -> str:
    column = columns[condition.field]
    values = condition.values
    match condition.op:
        case "=" if isinstance(values[0], str) and "*" in values[0]:  # Conductor's wildcard
            params.append(_like(values[0]).replace("*", "%"))
            return f"{column} LIKE ? ESCAPE '\\'"
        case "=":
            params.append(values[0])
            return f"{column} = ?"
        case "!=":
            params.append(values[0])
            return f"{column} IS NOT ?"
        case ">" | "<" | ">=" | "<=":
            params.append(values[0])
            return f"{column} {condition.op} ?"
        case "IN":
            if not values:
                return "0"
            params.extend(values)
            return f"{column} IN ({', '.join('?' * len(values))})"
        case "IS NULL":
            return f"{column} IS NULL"
        case "IS NOT NULL":
            return f"{column} IS NOT NULL"
        case "BETWEEN":
            params.extend(values)
            return f"{column} BETWEEN ? AND ?"
        case "STARTS_WITH":
            params.append(_like(str(values[0])) + "%")
            return f"{column} LIKE ? ESCAPE '\\'"
    raise ValueError(f"no SQL for {condition.op}")


def where_clause(
    query: Query | None,
    free_text: str | None,
    params: list[Any],
    columns: dict[str, str] = COLUMNS,
    text_column: str = "w.body",
) -> str:
    def part(node: Query) -> str:
        match node:
            case Condition():
                return _condition(node, params, columns)
            case AllOf():
                return " AND ".join(f"({part(p)})" for p in node.parts) or "1"
            case AnyOf():
                return " OR ".join(f"({part(p)})" for p in node.parts) or "0"

    conditions = [part(query)] if query is not None else []
    if free_text is not None:
        params.append(f"%{_like(free_text)}%")
        conditions.append(f"{text_column} LIKE ? ESCAPE '\\'")
    return f"WHERE {' AND '.join(f'({c})' for c in conditions)}" if conditions else ""


def search(connection: sqlite3.Connection, request: SearchRequest) -> tuple[int, list[Any]]:
    """(the exact number of matches, one page of (body, outbox_since, snapshot_id) rows)."""
    params: list[Any] = []
    where = where_clause(request.query, request.free_text, params)
    joined = "FROM store_workflow_search s JOIN store_workflows w ON w.id = s.id"
    needs_join = re.search(r"\bw\.", where) is not None
    counted = connection.execute(
        f"SELECT COUNT(*) {joined if needs_join else 'FROM store_workflow_search s'} {where}", params
    ).fetchone()[0]
    order = ", ".join(
        f"{COLUMNS[name]} {'DESC' if descending else 'ASC'}" for name, descending in request.sort
    )
    rows = connection.execute(
        f"SELECT w.body, w.outbox_since, w.snapshot_id {joined} {where}"
        f" ORDER BY {order}, s.id LIMIT ? OFFSET ?",
        [*params, request.size, request.start],
    ).fetchall()
    return int(counted), rows


def search_tasks(connection: sqlite3.Connection, request: SearchRequest) -> tuple[int, list[str]]:
    """(the exact number of matching task records, one page of their JSON bodies)."""
    params: list[Any] = []
    where = where_clause(request.query, request.free_text, params, TASK_COLUMNS, "t.body")
    counted = connection.execute(f"SELECT COUNT(*) FROM store_tasks t {where}", params).fetchone()[0]
    order = ", ".join(
        f"{TASK_COLUMNS[name]} {'DESC' if descending else 'ASC'}" for name, descending in request.sort
    )
    rows = connection.execute(
        f"SELECT t.body FROM store_tasks t {where} ORDER BY {order}, t.id LIMIT ? OFFSET ?",
        [*params, request.size, request.start],
    ).fetchall()
    return int(counted), [body for (body,) in rows]
