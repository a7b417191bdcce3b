"""The SQLite store's schema, its rows and the synchronous transactions it runs: functions of a
connection, run on the store's one database thread (`sqlite_store.SqliteStore`)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from shared.adapters.sqlite_durability import DEFAULT_SYNCHRONOUS, SqliteSynchronous, open_wal
from shared.adapters.sqlite_search import SearchRow, create_search_schema, write_search_row
from shared.core.attention import attention_at
from shared.models.documents import WorkflowDocument
from shared.models.runtime import TaskState
from shared.ports.store import encode_heads

T = TypeVar("T")

BUSY_TIMEOUT_MS = 10_000

SCHEMA = """
CREATE TABLE IF NOT EXISTS store_workflows (
    id TEXT PRIMARY KEY,
    version INTEGER NOT NULL,
    name TEXT NOT NULL,
    status TEXT NOT NULL,
    updated_at INTEGER NOT NULL,
    outbox_since INTEGER,
    snapshot_id TEXT,
    body TEXT NOT NULL,
    heads TEXT,
    attention_at INTEGER
);
CREATE INDEX IF NOT EXISTS store_workflows_updated ON store_workflows (updated_at);
CREATE INDEX IF NOT EXISTS store_workflows_status ON store_workflows (status, updated_at);
CREATE INDEX IF NOT EXISTS store_workflows_name ON store_workflows (name, updated_at);
CREATE INDEX IF NOT EXISTS store_workflows_name_status ON store_workflows (name, status, updated_at);
CREATE INDEX IF NOT EXISTS store_workflows_unsent
    ON store_workflows (outbox_since) WHERE outbox_since IS NOT NULL;
CREATE TABLE IF NOT EXISTS store_snapshots (id TEXT PRIMARY KEY, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS store_task_index (
    task_id TEXT PRIMARY KEY,
    workflow_id TEXT NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS store_tasks (
    id TEXT PRIMARY KEY,
    workflow_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS store_tasks_workflow ON store_tasks (workflow_id, seq);
CREATE TABLE IF NOT EXISTS store_task_claims (
    task_id TEXT PRIMARY KEY,
    worker_id TEXT NOT NULL,
    claim_until INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS store_timers (
    id TEXT PRIMARY KEY,
    fire_at INTEGER NOT NULL,
    claim_until INTEGER NOT NULL,
    claimed_by TEXT,
    body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS store_timers_due ON store_timers (fire_at);
CREATE TABLE IF NOT EXISTS store_workflow_defs (
    name TEXT NOT NULL,
    version INTEGER NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (name, version)
);
CREATE TABLE IF NOT EXISTS store_task_defs (name TEXT PRIMARY KEY, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS store_event_handlers (name TEXT PRIMARY KEY, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS store_history (
    id TEXT PRIMARY KEY, workflow_id TEXT NOT NULL, generation INTEGER NOT NULL,
    first INTEGER NOT NULL, body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS store_history_workflow ON store_history (workflow_id, generation, first);
"""

DEFINITIONS_GENERATION = [
    "CREATE TABLE IF NOT EXISTS store_meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL)",
    "INSERT OR IGNORE INTO store_meta (key, value) VALUES ('definitions', 0)",
    *(
        f"CREATE TRIGGER IF NOT EXISTS {table}_{event.lower()}d AFTER {event} ON {table}"
        " BEGIN UPDATE store_meta SET value = value + 1 WHERE key = 'definitions'; END"
        for table in ("store_workflow_defs", "store_task_defs")
        for event in ("INSERT", "UPDATE", "DELETE")
    ),
]
"""A number every change to a workflow or task definition bumps, by trigger (so no writer, in
any process, can forget it): what the decider's snapshot memo is keyed by."""


# ---- rows ----


@dataclass(frozen=True)
class WorkflowRow:
    """What one workflow commit writes: the indexed columns and the document's JSON."""

    id: str
    version: int
    name: str
    status: str
    updated_at: int
    outbox_since: int | None
    snapshot_id: str | None
    body: str
    heads: str
    attention_at: int | None
    task_ids: tuple[str, ...]


@dataclass(frozen=True)
class PreparedCommit:
    row: WorkflowRow
    search: SearchRow | None
    """None: no searched field changed, the search row stands."""
    expected_version: int
    tasks: tuple[tuple[str, str, int, str], ...]
    snapshot: tuple[str, str] | None
    """(id, body) of the document's definition snapshot."""
    history: tuple[tuple[str, str, int, int, str], ...] = ()
    """A code workflow's appended history chunks: (id, workflow_id, generation, first, body)."""


def workflow_row(document: WorkflowDocument, snapshot_id: str | None) -> WorkflowRow:
    state = document.state
    return WorkflowRow(
        id=document.workflow_id,
        version=document.version,
        name=state.workflow_name,
        status=state.status.value,
        updated_at=document.updated_at,
        outbox_since=document.updated_at if document.outbox else None,
        snapshot_id=snapshot_id,
        body=document.model_dump_json(by_alias=True, exclude={"definition"}),
        heads=encode_heads(state),
        attention_at=attention_at(state),
        task_ids=tuple(task.task_id for task in state.tasks.values()),
    )


def task_row(task: TaskState) -> tuple[str, str, int, str]:
    return (task.task_id, task.workflow_instance_id, task.seq, task.model_dump_json(by_alias=True))


def ids_param(ids: Iterable[str]) -> str:
    """A list of ids as one JSON parameter (`IN (SELECT value FROM json_each(?))`), so a long
    list never meets SQLite's limit on bound variables."""
    return json.dumps(list(ids))


def id_filter(ids: Sequence[str], column: str = "id") -> tuple[str, tuple[str]]:
    """A WHERE condition on `column` for these ids and its parameter: `= ?` for one (most reads
    are of one workflow, and a JSON list costs an encode and a table-valued function), else the
    JSON list of ids_param."""
    if len(ids) == 1:
        return f"{column} = ?", (ids[0],)
    return f"{column} IN (SELECT value FROM json_each(?))", (ids_param(ids),)


def sql_limit(limit: int) -> int:
    """MongoDB's convention, which the other adapter follows: a limit of 0 means no limit."""
    return limit if limit > 0 else -1


# ---- connection and transactions (run on the adapter's thread) ----


def connect(
    path: str, check_same_thread: bool = True, synchronous: SqliteSynchronous = DEFAULT_SYNCHRONOUS
) -> sqlite3.Connection:
    connection = open_wal(
        path, check_same_thread=check_same_thread, busy_timeout_ms=BUSY_TIMEOUT_MS, synchronous=synchronous
    )
    connection.execute("PRAGMA foreign_keys = OFF")
    return connection


def in_transaction(connection: sqlite3.Connection, work: Callable[[sqlite3.Connection], T]) -> T:
    """Run `work` inside BEGIN IMMEDIATE ... COMMIT; roll back if anything in it fails."""
    connection.execute("BEGIN IMMEDIATE")
    try:
        result = work(connection)
        connection.execute("COMMIT")
    except BaseException:
        if connection.in_transaction:
            connection.execute("ROLLBACK")
        raise
    return result


def create_schema(connection: sqlite3.Connection) -> None:
    for statement in SCHEMA.split(";"):
        if statement.strip():
            connection.execute(statement)
    create_search_schema(connection)
    for statement in DEFINITIONS_GENERATION:
        connection.execute(statement)
    columns = {row[1] for row in connection.execute("PRAGMA table_info(store_workflows)")}
    if "heads" not in columns:  # a state file from before heads were kept
        connection.execute("ALTER TABLE store_workflows ADD COLUMN heads TEXT")
    if "attention_at" not in columns:  # from before attention times: compute them once
        connection.execute("ALTER TABLE store_workflows ADD COLUMN attention_at INTEGER")
        rows = connection.execute("SELECT id, body FROM store_workflows WHERE status = 'RUNNING'").fetchall()
        connection.executemany(
            "UPDATE store_workflows SET attention_at = ? WHERE id = ?",
            [(attention_at(WorkflowDocument.model_validate_json(body).state), wid) for wid, body in rows],
        )
    connection.execute(  # after the column exists in a state file of any age
        "CREATE INDEX IF NOT EXISTS store_workflows_attention"
        " ON store_workflows (attention_at, id) WHERE attention_at IS NOT NULL"
    )


def apply_commit(connection: sqlite3.Connection, commit: PreparedCommit) -> bool:
    """The commit point of one workflow; its other rows are written only if it won, so a losing
    decision leaves nothing behind (its retry writes them again)."""
    row = commit.row
    if commit.expected_version == 0:
        cursor = connection.execute(
            "INSERT INTO store_workflows"
            " (id, version, name, status, updated_at, outbox_since, snapshot_id, body, heads,"
            " attention_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING",
            (row.id, row.version, row.name, row.status, row.updated_at, row.outbox_since,
             row.snapshot_id, row.body, row.heads, row.attention_at),
        )  # fmt: skip
    else:
        cursor = connection.execute(
            "UPDATE store_workflows SET version = ?, name = ?, status = ?, updated_at = ?,"
            " outbox_since = ?, snapshot_id = ?, body = ?, heads = ?, attention_at = ?"
            " WHERE id = ? AND version = ?",
            (row.version, row.name, row.status, row.updated_at, row.outbox_since, row.snapshot_id,
             row.body, row.heads, row.attention_at, row.id, commit.expected_version),
        )  # fmt: skip
    if cursor.rowcount != 1:
        return False
    if commit.search is not None:
        write_search_row(connection, commit.search)
    if commit.snapshot is not None:
        connection.execute(
            "INSERT INTO store_snapshots (id, body) VALUES (?, ?) ON CONFLICT (id) DO NOTHING",
            commit.snapshot,
        )
    connection.executemany(
        "INSERT INTO store_task_index (task_id, workflow_id) VALUES (?, ?) ON CONFLICT DO NOTHING",
        [(task_id, row.id) for task_id in row.task_ids],
    )
    write_tasks(connection, commit.tasks)
    if commit.history:  # a chunk id is written once; a decision computed again writes the same
        connection.executemany(
            "INSERT INTO store_history (id, workflow_id, generation, first, body) VALUES (?, ?, ?, ?, ?)"
            " ON CONFLICT (id) DO UPDATE SET body = excluded.body",
            commit.history,
        )
    return True


def write_tasks(connection: sqlite3.Connection, rows: Sequence[tuple[str, str, int, str]]) -> None:
    connection.executemany(
        "INSERT INTO store_tasks (id, workflow_id, seq, body) VALUES (?, ?, ?, ?)"
        " ON CONFLICT (id) DO UPDATE SET workflow_id = excluded.workflow_id, seq = excluded.seq,"
        " body = excluded.body",
        rows,
    )


def execute(sql: str, params: Sequence[Any] = ()) -> Callable[[sqlite3.Connection], None]:
    """A unit of work running one statement; it returns nothing, so no cursor leaves the thread."""

    def work(connection: sqlite3.Connection) -> None:
        connection.execute(sql, params)

    return work


def deleted(sql: str, params: Sequence[Any]) -> Callable[[sqlite3.Connection], bool]:
    """A unit of work running one DELETE; True if it removed a row."""

    def work(connection: sqlite3.Connection) -> bool:
        return connection.execute(sql, params).rowcount > 0

    return work


def clear_outboxes(connection: sqlite3.Connection, published: Sequence[tuple[str, int]]) -> None:
    """Clear the unsent mark only where the stored version is still the published one: a newer
    version carries our messages in its own outbox, which is not sent yet."""
    connection.executemany(
        "UPDATE store_workflows SET outbox_since = NULL WHERE id = ? AND version = ?", published
    )


HEADS_SQL = "SELECT id, status, heads FROM store_workflows WHERE "
"""Completed by an id_filter condition."""
LEGACY_HEADS_SQL = (
    "SELECT w.id, w.body ->> '$.state.status', t.key, t.value ->> '$.taskId',"
    " t.value ->> '$.referenceTaskName', t.value ->> '$.taskType', t.value ->> '$.status',"
    " t.value ->> '$.dispatchCount',"
    " t.value ->> '$.retryCount'"
    " FROM store_workflows AS w LEFT JOIN json_each(w.body, '$.state.tasks') AS t ON 1"
    " WHERE w.id IN (SELECT value FROM json_each(?))"
)


def select_workflows(connection: sqlite3.Connection, where: str, params: Sequence[Any]) -> list[Any]:
    return connection.execute(
        f"SELECT body, outbox_since, snapshot_id FROM store_workflows {where}", params
    ).fetchall()


def claim_task(
    connection: sqlite3.Connection, task_id: str, worker_id: str, now: int, until: int, renew: bool = False
) -> bool:
    """Insert the claim, or take over one whose lease ran out (or, renewing, one the same holder
    has); a live claim of another makes the upsert change no row. A renewal never shortens."""
    mine = " OR store_task_claims.worker_id = excluded.worker_id" if renew else ""
    cursor = connection.execute(
        "INSERT INTO store_task_claims (task_id, worker_id, claim_until) VALUES (?, ?, ?)"
        " ON CONFLICT (task_id) DO UPDATE SET worker_id = excluded.worker_id,"
        " claim_until = MAX(excluded.claim_until, store_task_claims.claim_until)"
        f" WHERE store_task_claims.claim_until <= ?{mine}",
        (task_id, worker_id, until, now),
    )
    return cursor.rowcount == 1


def claim_timers(
    connection: sqlite3.Connection, now: int, owner: str, until: int, limit: int
) -> list[tuple[str, str]]:
    """Select and mark due timers under one write lock, so no other claimer sees them free."""
    due = connection.execute(
        "SELECT id, body FROM store_timers WHERE fire_at <= ? AND claim_until <= ? ORDER BY fire_at LIMIT ?",
        (now, now, sql_limit(limit)),
    ).fetchall()
    connection.executemany(
        "UPDATE store_timers SET claim_until = ?, claimed_by = ? WHERE id = ?",
        [(until, owner, timer_id) for timer_id, _ in due],
    )
    return due


# ---- definition snapshots ----
