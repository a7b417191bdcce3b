"""Store port on SQLite: the embedded default (`cairn dev`), standard library only.

One connection per adapter, owned by a single worker thread: every method hands one small
synchronous function to that thread, so a whole transaction is one call and no other coroutine
can interleave statements with it. Several adapters (in one process or in several) may open the
same file; SQLite's file lock serialises their writes, and every write transaction starts with
`BEGIN IMMEDIATE`, which takes the write lock up front (waiting up to `busy_timeout`) instead of
failing halfway when a read transaction would have to be upgraded.

Durability: WAL journal with `synchronous=NORMAL`. A committed transaction is in the WAL file
before `COMMIT` returns, so killing the process (SIGKILL included) loses nothing; only an OS
crash or power cut can lose the last transactions (never corrupting the file), a trade the
embedded mode accepts for not syncing on every commit.

The commit point is the one conditional write DESIGN.md asks for: an INSERT for a new workflow
(fails if the id exists), otherwise `UPDATE ... WHERE id = ? AND version = ?`. SQLite executes
that atomically under its write lock, so unlike the MongoDB adapter no fence records are needed.
A group commit is one transaction; each commit's result is its own (a loser rolls nothing back).

Tables are all prefixed `store_`: an embedded bus may keep its own (`bus_`) tables in the same
file. Documents are JSON text; what queries filter or sort on is copied into indexed columns.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sqlite3
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from shared.core.attention import attention_at
from shared.models.definitions import TaskDef, WorkflowDef
from shared.models.documents import TimerRecord, WorkflowDocument
from shared.models.runtime import TaskState, TaskStatus, WorkflowStatus
from shared.ports.store import Commit, ExecutionHead, WorkflowHeads, decode_heads, encode_heads

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
"""


# ---- rows ----


@dataclass(frozen=True)
class _WorkflowRow:
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
class _PreparedCommit:
    row: _WorkflowRow
    expected_version: int
    tasks: tuple[tuple[str, str, int, str], ...]
    snapshot: tuple[str, str] | None
    """(id, body) of the document's definition snapshot."""


def _workflow_row(document: WorkflowDocument, snapshot_id: str | None) -> _WorkflowRow:
    state = document.state
    return _WorkflowRow(
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


def _task_row(task: TaskState) -> tuple[str, str, int, str]:
    return (task.task_id, task.workflow_instance_id, task.seq, task.model_dump_json(by_alias=True))


def _ids_param(ids: Iterable[str]) -> str:
    """A list of ids as one JSON parameter (`IN (SELECT value FROM json_each(?))`), so a long
    list never meets SQLite's limit on bound variables."""
    return json.dumps(list(ids))


def _sql_limit(limit: int) -> int:
    """MongoDB's convention, which the other adapter follows: a limit of 0 means no limit."""
    return limit if limit > 0 else -1


# ---- connection and transactions (run on the adapter's thread) ----


def _connect(path: str) -> sqlite3.Connection:
    connection = sqlite3.connect(path, isolation_level=None, timeout=BUSY_TIMEOUT_MS / 1000)
    connection.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    connection.execute("PRAGMA journal_mode = WAL")
    connection.execute("PRAGMA synchronous = NORMAL")
    connection.execute("PRAGMA foreign_keys = OFF")
    return connection


def _in_transaction(connection: sqlite3.Connection, work: Callable[[sqlite3.Connection], T]) -> T:
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


def _create_schema(connection: sqlite3.Connection) -> None:
    for statement in SCHEMA.split(";"):
        if statement.strip():
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


def _apply_commit(connection: sqlite3.Connection, commit: _PreparedCommit) -> bool:
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
    if commit.snapshot is not None:
        connection.execute(
            "INSERT INTO store_snapshots (id, body) VALUES (?, ?) ON CONFLICT (id) DO NOTHING",
            commit.snapshot,
        )
    connection.executemany(
        "INSERT INTO store_task_index (task_id, workflow_id) VALUES (?, ?) ON CONFLICT DO NOTHING",
        [(task_id, row.id) for task_id in row.task_ids],
    )
    _write_tasks(connection, commit.tasks)
    return True


def _write_tasks(connection: sqlite3.Connection, rows: Sequence[tuple[str, str, int, str]]) -> None:
    connection.executemany(
        "INSERT INTO store_tasks (id, workflow_id, seq, body) VALUES (?, ?, ?, ?)"
        " ON CONFLICT (id) DO UPDATE SET workflow_id = excluded.workflow_id, seq = excluded.seq,"
        " body = excluded.body",
        rows,
    )


def _execute(sql: str, params: Sequence[Any] = ()) -> Callable[[sqlite3.Connection], None]:
    """A unit of work running one statement; it returns nothing, so no cursor leaves the thread."""

    def work(connection: sqlite3.Connection) -> None:
        connection.execute(sql, params)

    return work


def _deleted(sql: str, params: Sequence[Any]) -> Callable[[sqlite3.Connection], bool]:
    """A unit of work running one DELETE; True if it removed a row."""

    def work(connection: sqlite3.Connection) -> bool:
        return connection.execute(sql, params).rowcount > 0

    return work


def _clear_outboxes(connection: sqlite3.Connection, published: Sequence[tuple[str, int]]) -> None:
    """Clear the unsent mark only where the stored version is still the published one: a newer
    version carries our messages in its own outbox, which is not sent yet."""
    connection.executemany(
        "UPDATE store_workflows SET outbox_since = NULL WHERE id = ? AND version = ?", published
    )


_HEADS_SQL = "SELECT id, status, heads FROM store_workflows WHERE id IN (SELECT value FROM json_each(?))"
_LEGACY_HEADS_SQL = (
    "SELECT w.id, w.body ->> '$.state.status', t.key, t.value ->> '$.taskId',"
    " t.value ->> '$.referenceTaskName', t.value ->> '$.taskType', t.value ->> '$.status',"
    " t.value ->> '$.dispatchCount',"
    " t.value ->> '$.retryCount'"
    " FROM store_workflows AS w LEFT JOIN json_each(w.body, '$.state.tasks') AS t ON 1"
    " WHERE w.id IN (SELECT value FROM json_each(?))"
)


def _select_workflows(connection: sqlite3.Connection, where: str, params: Sequence[Any]) -> list[Any]:
    return connection.execute(
        f"SELECT body, outbox_since, snapshot_id FROM store_workflows {where}", params
    ).fetchall()


def _claim_task(
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


def _claim_timers(
    connection: sqlite3.Connection, now: int, owner: str, until: int, limit: int
) -> list[tuple[str, str]]:
    """Select and mark due timers under one write lock, so no other claimer sees them free."""
    due = connection.execute(
        "SELECT id, body FROM store_timers WHERE fire_at <= ? AND claim_until <= ? ORDER BY fire_at LIMIT ?",
        (now, now, _sql_limit(limit)),
    ).fetchall()
    connection.executemany(
        "UPDATE store_timers SET claim_until = ?, claimed_by = ? WHERE id = ?",
        [(until, owner, timer_id) for timer_id, _ in due],
    )
    return due


# ---- definition snapshots ----


class _Snapshots:
    """Definition snapshots by content hash, remembered in memory (used on the loop's thread).

    Stored once per distinct definition, not in every workflow row, so a commit rewrites only
    the small document. Every winning commit inserts its snapshot (a no-op when the row exists):
    cheaper than tracking what is stored, and never wrong after a lost or rolled-back commit."""

    def __init__(self, capacity: int = 1024) -> None:
        self._capacity = capacity
        self._by_id: OrderedDict[str, WorkflowDef] = OrderedDict()
        self._id_of: OrderedDict[int, tuple[WorkflowDef, str, str]] = OrderedDict()

    def remember(self, snapshot_id: str, definition: WorkflowDef, body: str) -> None:
        self._by_id[snapshot_id] = definition
        # Holding the definition keeps its id() from being reused while the entry lives.
        self._id_of[id(definition)] = (definition, snapshot_id, body)
        for table in (self._by_id, self._id_of):
            while len(table) > self._capacity:
                table.popitem(last=False)

    def identify(self, definition: WorkflowDef) -> tuple[str, str]:
        """The snapshot id and body of `definition`, serialised once per definition object."""
        known = self._id_of.get(id(definition))
        if known is not None and known[0] is definition:
            return known[1], known[2]
        body = json.dumps(definition.to_json_dict(), sort_keys=True)
        snapshot_id = hashlib.sha256(body.encode()).hexdigest()[:32]
        self.remember(snapshot_id, definition, body)
        return snapshot_id, body

    def get(self, snapshot_id: str) -> WorkflowDef | None:
        return self._by_id.get(snapshot_id)


# ---- the adapter ----


class SqliteStore:
    """The Store port on one SQLite file (see the module docstring for the design)."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cairn-sqlite-store")
        self._connection: sqlite3.Connection | None = None
        self._snapshots = _Snapshots()

    async def _run(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """Run `work` on the adapter's thread, with its connection."""
        connection = self._connection
        if connection is None:
            raise RuntimeError("SqliteStore is not open: call open() first")
        return await asyncio.get_running_loop().run_in_executor(self._executor, work, connection)

    async def _write(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """Run `work` as one write transaction on the adapter's thread."""
        return await self._run(lambda connection: _in_transaction(connection, work))

    async def open(self) -> None:
        """Open the file (created if missing) and its tables; safe on every start, from any
        number of processes at once."""
        if self._connection is None:
            loop = asyncio.get_running_loop()
            self._connection = await loop.run_in_executor(self._executor, _connect, self._path)
        await self._write(_create_schema)

    async def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            await asyncio.get_running_loop().run_in_executor(self._executor, connection.close)
        self._executor.shutdown(wait=True)

    # ---- definitions ----

    async def put_workflow_def(self, definition: WorkflowDef) -> None:
        params = (definition.name, definition.version, json.dumps(definition.to_json_dict()))
        await self._write(
            _execute(
                "INSERT INTO store_workflow_defs (name, version, body) VALUES (?, ?, ?)"
                " ON CONFLICT (name, version) DO UPDATE SET body = excluded.body",
                params,
            )
        )

    async def get_workflow_def(self, name: str, version: int | None = None) -> WorkflowDef | None:
        params: tuple[Any, ...]
        if version is None:
            sql, params = "WHERE name = ? ORDER BY version DESC LIMIT 1", (name,)
        else:
            sql, params = "WHERE name = ? AND version = ?", (name, version)
        row = await self._run(
            lambda c: c.execute(f"SELECT body FROM store_workflow_defs {sql}", params).fetchone()
        )
        return None if row is None else WorkflowDef.model_validate_json(row[0])

    async def list_workflow_defs(self) -> list[WorkflowDef]:
        rows = await self._run(
            lambda c: c.execute("SELECT body FROM store_workflow_defs ORDER BY name, version").fetchall()
        )
        return [WorkflowDef.model_validate_json(body) for (body,) in rows]

    async def delete_workflow_def(self, name: str, version: int) -> bool:
        return await self._write(
            _deleted("DELETE FROM store_workflow_defs WHERE name = ? AND version = ?", (name, version))
        )

    async def delete_task_def(self, name: str) -> bool:
        return await self._write(_deleted("DELETE FROM store_task_defs WHERE name = ?", (name,)))

    async def put_task_def(self, task_def: TaskDef) -> None:
        params = (task_def.name, json.dumps(task_def.to_json_dict()))
        await self._write(
            _execute(
                "INSERT INTO store_task_defs (name, body) VALUES (?, ?)"
                " ON CONFLICT (name) DO UPDATE SET body = excluded.body",
                params,
            )
        )

    async def get_task_defs(self, names: Sequence[str]) -> dict[str, TaskDef]:
        param = _ids_param(names)
        rows = await self._run(
            lambda c: c.execute(
                "SELECT body FROM store_task_defs WHERE name IN (SELECT value FROM json_each(?))",
                (param,),
            ).fetchall()
        )
        found = [TaskDef.model_validate_json(body) for (body,) in rows]
        return {task_def.name: task_def for task_def in found}

    # ---- workflows ----

    async def _documents(self, rows: Sequence[Any]) -> list[WorkflowDocument]:
        """Documents from (body, outbox_since, snapshot_id) rows: an outbox marked sent is
        dropped, and each definition snapshot is attached (read once, then from memory)."""
        missing = {sid for _, _, sid in rows if sid is not None and self._snapshots.get(sid) is None}
        if missing:
            await self._load_snapshots(missing)
        documents = []
        for body, outbox_since, snapshot_id in rows:
            document = WorkflowDocument.model_validate_json(body)
            if outbox_since is None:
                document.outbox = []  # published already
            if snapshot_id is not None:
                document.definition = self._snapshots.get(snapshot_id)
                if document.definition is None:
                    raise LookupError(f"definition snapshot {snapshot_id} is missing from the store")
            documents.append(document)
        return documents

    async def _load_snapshots(self, snapshot_ids: set[str]) -> None:
        param = _ids_param(snapshot_ids)
        rows = await self._run(
            lambda c: c.execute(
                "SELECT id, body FROM store_snapshots WHERE id IN (SELECT value FROM json_each(?))",
                (param,),
            ).fetchall()
        )
        for snapshot_id, body in rows:
            self._snapshots.remember(snapshot_id, WorkflowDef.model_validate_json(body), body)

    async def load_workflows(self, workflow_ids: Sequence[str]) -> dict[str, WorkflowDocument]:
        param = _ids_param(workflow_ids)
        rows = await self._run(
            lambda c: _select_workflows(c, "WHERE id IN (SELECT value FROM json_each(?))", (param,))
        )
        return {document.workflow_id: document for document in await self._documents(rows)}

    async def load_workflow(self, workflow_id: str) -> WorkflowDocument | None:
        return (await self.load_workflows([workflow_id])).get(workflow_id)

    async def load_heads(self, workflow_ids: Sequence[str]) -> dict[str, WorkflowHeads]:
        """From the compact heads column written with each commit: no parse of the document.
        Rows written before that column existed are read with SQLite's JSON functions."""
        param = _ids_param(workflow_ids)
        rows = await self._run(lambda c: c.execute(_HEADS_SQL, (param,)).fetchall())
        heads = {wid: decode_heads(wid, status, text) for wid, status, text in rows if text is not None}
        older = _ids_param([wid for wid, _, text in rows if text is None])
        if older != "[]":
            legacy = await self._run(lambda c: c.execute(_LEGACY_HEADS_SQL, (older,)).fetchall())
            for wid, status, ref, task_id, reference, task_type, task_status, dispatches, retries in legacy:
                found = heads.setdefault(wid, WorkflowHeads(wid, WorkflowStatus(status), {}))
                if ref is not None:
                    found.executions[ref] = ExecutionHead(
                        task_id, reference, task_type, TaskStatus(task_status), dispatches or 0, retries or 0
                    )
        return heads

    async def list_workflows(
        self, *, status: WorkflowStatus | None = None, name: str | None = None, limit: int = 100
    ) -> list[WorkflowDocument]:
        """Newest `updated_at` first; each filter is an equality on an indexed column."""
        conditions: list[str] = []
        params: list[Any] = []
        if status is not None:
            conditions.append("status = ?")
            params.append(status.value)
        if name is not None:
            conditions.append("name = ?")
            params.append(name)
        where = f"WHERE {' AND '.join(conditions)}" if conditions else ""
        sql = f"{where} ORDER BY updated_at DESC LIMIT ?"
        params.append(_sql_limit(limit))
        rows = await self._run(lambda c: _select_workflows(c, sql, params))
        return await self._documents(rows)

    async def find_task_workflow(self, task_id: str) -> str | None:
        """Live executions are in `store_task_index` (written with each commit), history in
        `store_tasks`; both are primary-key lookups."""
        row = await self._run(
            lambda c: c.execute(
                "SELECT workflow_id FROM store_task_index WHERE task_id = ?"
                " UNION ALL SELECT workflow_id FROM store_tasks WHERE id = ? LIMIT 1",
                (task_id, task_id),
            ).fetchone()
        )
        return None if row is None else str(row[0])

    def _prepare(self, commit: Commit) -> _PreparedCommit:
        document = commit.document
        snapshot = None
        if document.definition is not None:
            snapshot = self._snapshots.identify(document.definition)
        return _PreparedCommit(
            row=_workflow_row(document, None if snapshot is None else snapshot[0]),
            expected_version=commit.expected_version,
            tasks=tuple(_task_row(task) for task in commit.tasks),
            snapshot=snapshot,
        )

    async def commit_workflows(self, commits: Sequence[Commit]) -> list[bool]:
        """All commits in one transaction, each conditional on its own version (see module doc).

        Task records are written only for the winners: under one transaction the adapter can
        keep a losing decision's records out, so history never shows a decision that lost."""
        for commit in commits:
            if commit.document.version != commit.expected_version + 1:
                raise ValueError("commit: document.version must be expected_version + 1")
        if not commits:
            return []
        prepared = [self._prepare(commit) for commit in commits]
        return await self._write(lambda c: [_apply_commit(c, commit) for commit in prepared])

    async def mark_outboxes_sent(self, published: Sequence[tuple[str, int]]) -> None:
        if published:
            rows = list(published)
            await self._write(lambda c: _clear_outboxes(c, rows))

    async def find_unpublished(self, older_than: int, limit: int) -> list[str]:
        rows = await self._run(
            lambda c: c.execute(
                "SELECT id FROM store_workflows WHERE outbox_since IS NOT NULL AND outbox_since < ?"
                " ORDER BY outbox_since LIMIT ?",
                (older_than, _sql_limit(limit)),
            ).fetchall()
        )
        return [workflow_id for (workflow_id,) in rows]

    async def find_needing_attention(
        self, before: int, after: tuple[int, str] | None, limit: int
    ) -> list[tuple[int, str]]:
        since, last_id = after if after is not None else (-1, "")
        rows = await self._run(
            lambda c: c.execute(
                "SELECT attention_at, id FROM store_workflows WHERE attention_at IS NOT NULL"
                " AND attention_at < ? AND (attention_at > ? OR (attention_at = ? AND id > ?))"
                " ORDER BY attention_at, id LIMIT ?",
                (before, since, since, last_id, _sql_limit(limit)),
            ).fetchall()
        )
        return [(at, workflow_id) for at, workflow_id in rows]

    async def remove_workflow(self, workflow_id: str) -> bool:
        def remove(connection: sqlite3.Connection) -> bool:
            for table in ("store_tasks", "store_task_index"):
                connection.execute(f"DELETE FROM {table} WHERE workflow_id = ?", (workflow_id,))
            return connection.execute("DELETE FROM store_workflows WHERE id = ?", (workflow_id,)).rowcount > 0

        return await self._write(remove)

    async def purge_finished(self, ended_before: int, limit: int) -> list[str]:
        """One transaction per batch (served by the (status, updated_at) index)."""
        finished = [status.value for status in WorkflowStatus if status.is_terminal]
        marks = ",".join("?" * len(finished))

        def purge(connection: sqlite3.Connection) -> list[str]:
            rows = connection.execute(
                f"SELECT id FROM store_workflows WHERE status IN ({marks}) AND updated_at < ? LIMIT ?",
                (*finished, ended_before, _sql_limit(limit)),
            ).fetchall()
            ids = [workflow_id for (workflow_id,) in rows]
            if ids:
                chosen = "SELECT value FROM json_each(?)"
                param = (_ids_param(ids),)
                connection.execute(
                    "DELETE FROM store_task_claims WHERE task_id IN"
                    f" (SELECT task_id FROM store_task_index WHERE workflow_id IN ({chosen}))",
                    param,
                )
                connection.execute(
                    f"DELETE FROM store_timers WHERE json_extract(body, '$.workflowId') IN ({chosen})", param
                )
                for table in ("store_tasks", "store_task_index"):
                    connection.execute(f"DELETE FROM {table} WHERE workflow_id IN ({chosen})", param)
                connection.execute(f"DELETE FROM store_workflows WHERE id IN ({chosen})", param)
            return ids

        return await self._write(purge)

    async def housekeeping(self, now: int) -> None:
        """Drop task claims whose lease has run out: an expired claim and no claim mean the same
        to `claim_task`, so this only keeps the table small."""
        await self._write(_execute("DELETE FROM store_task_claims WHERE claim_until <= ?", (now,)))

    # ---- task records ----

    async def upsert_tasks(self, tasks: Sequence[TaskState]) -> None:
        rows = [_task_row(task) for task in tasks]
        if rows:
            await self._write(lambda c: _write_tasks(c, rows))

    async def get_task(self, task_id: str) -> TaskState | None:
        row = await self._run(
            lambda c: c.execute("SELECT body FROM store_tasks WHERE id = ?", (task_id,)).fetchone()
        )
        return None if row is None else TaskState.model_validate_json(row[0])

    async def list_tasks(self, workflow_id: str) -> list[TaskState]:
        rows = await self._run(
            lambda c: c.execute(
                "SELECT body FROM store_tasks WHERE workflow_id = ? ORDER BY seq", (workflow_id,)
            ).fetchall()
        )
        return [TaskState.model_validate_json(body) for (body,) in rows]

    async def claim_task(self, task_id: str, worker_id: str, now: int, lease_ms: int) -> bool:
        """One statement, atomic under SQLite's write lock: insert the claim, or take over one
        whose lease has run out; a live claim makes the upsert change no row."""
        if lease_ms <= 0:
            raise ValueError("claim_task: lease_ms must be positive")
        return await self._write(lambda c: _claim_task(c, task_id, worker_id, now, now + lease_ms))

    async def renew_task_claim(self, task_id: str, holder: str, now: int, lease_ms: int) -> bool:
        """The same upsert, which also updates the holder's own row (live or not); a pruned
        expired claim is simply claimed again."""
        if lease_ms <= 0:
            raise ValueError("renew_task_claim: lease_ms must be positive")
        return await self._write(lambda c: _claim_task(c, task_id, holder, now, now + lease_ms, renew=True))

    # ---- timers ----

    async def upsert_timer(self, timer: TimerRecord) -> None:
        """Replace the whole record, claim included (as re-arming does on the MongoDB adapter)."""
        params = (timer.timer_id, timer.fire_at, timer.claim_until, timer.claimed_by,
                  timer.model_dump_json(by_alias=True))  # fmt: skip
        await self._write(
            _execute(
                "INSERT INTO store_timers (id, fire_at, claim_until, claimed_by, body)"
                " VALUES (?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET fire_at = excluded.fire_at,"
                " claim_until = excluded.claim_until, claimed_by = excluded.claimed_by,"
                " body = excluded.body",
                params,
            )
        )

    async def delete_timers(self, timer_ids: Sequence[str]) -> None:
        if timer_ids:
            param = _ids_param(timer_ids)
            await self._write(
                _execute("DELETE FROM store_timers WHERE id IN (SELECT value FROM json_each(?))", (param,))
            )

    async def claim_due_timers(self, now: int, owner: str, lease_ms: int, limit: int) -> list[TimerRecord]:
        """Find and claim in one BEGIN IMMEDIATE transaction: exclusive across processes."""
        until = now + lease_ms
        claimed = await self._write(lambda c: _claim_timers(c, now, owner, until, limit))
        return [
            TimerRecord.model_validate_json(body).model_copy(
                update={"claim_until": until, "claimed_by": owner}
            )
            for _, body in claimed
        ]
