"""Store port on SQLite: the embedded default (`cairn dev`), standard library only.

One connection per adapter, owned by a single worker thread: every method hands one small
synchronous function to that thread, so a whole transaction is one call and no other coroutine
can interleave statements with it. Several adapters (in one process or in several) may open the
same file; SQLite's file lock serialises their writes, and every write transaction starts with
`BEGIN IMMEDIATE`, which takes the write lock up front (waiting up to `busy_timeout`) instead of
failing halfway when a read transaction would have to be upgraded.

Durability: WAL journal with `synchronous=NORMAL` by default. A committed transaction is in the
WAL file before `COMMIT` returns, so killing the process (SIGKILL included) loses nothing; only an
OS crash or power cut can lose the last transactions (never corrupting the file), a trade the
embedded mode accepts for not syncing on every commit. CAIRN_SQLITE_SYNCHRONOUS=FULL syncs every
commit (shared/adapters/sqlite_durability.py).

The commit point is the one conditional write DESIGN.md asks for: an INSERT for a new workflow
(fails if the id exists), otherwise `UPDATE ... WHERE id = ? AND version = ?`. SQLite executes
that atomically under its write lock, so unlike the MongoDB adapter no fence records are needed.
A group commit is one transaction; each commit's result is its own (a loser rolls nothing back).

Tables are all prefixed `store_`: an embedded bus may keep its own (`bus_`) tables in the same
file. Documents are JSON text; what queries filter or sort on is copied into indexed columns.
The schema, the rows and the transactions themselves are in `sqlite_sql`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sqlite3
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from shared.adapters.sqlite_durability import DEFAULT_SYNCHRONOUS, SqliteSynchronous
from shared.adapters.sqlite_group import GroupCommit
from shared.adapters.sqlite_lane import SqliteLane
from shared.adapters.sqlite_search import search, search_row, search_tasks
from shared.adapters.sqlite_sql import (
    HEADS_SQL,
    LEGACY_HEADS_SQL,
    PreparedCommit,
    apply_commit,
    claim_task,
    claim_timers,
    clear_outboxes,
    connect,
    create_schema,
    deleted,
    execute,
    id_filter,
    ids_param,
    in_transaction,
    select_workflows,
    sql_limit,
    task_row,
    workflow_row,
    write_tasks,
)
from shared.models.definitions import TaskDef, WorkflowDef
from shared.models.documents import TimerRecord, WorkflowDocument
from shared.models.events import EventHandler
from shared.models.runtime import TaskState, TaskStatus, WorkflowStatus
from shared.ports.store import Commit, ExecutionHead, HistoryChunk, WorkflowHeads, chunk_id, decode_heads
from shared.search import SearchRequest

T = TypeVar("T")


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
        # pydantic's own serialiser: a third of the time of json.dumps over to_json_dict() with
        # sorted keys, paid once per start batch. Equal definitions whose maps list their keys
        # in another order get two ids: one more snapshot row, never a wrong one.
        body = definition.model_dump_json(by_alias=True, exclude_none=True)
        snapshot_id = hashlib.sha256(body.encode()).hexdigest()[:32]
        self.remember(snapshot_id, definition, body)
        return snapshot_id, body

    def get(self, snapshot_id: str) -> WorkflowDef | None:
        return self._by_id.get(snapshot_id)


# ---- the adapter ----


class SqliteStore:
    """The Store port on one SQLite file (see the module docstring for the design)."""

    def __init__(self, path: str, synchronous: SqliteSynchronous = DEFAULT_SYNCHRONOUS) -> None:
        self._path = path
        self._lane = SqliteLane(
            lambda same_thread: connect(path, same_thread, synchronous), "cairn-sqlite-store"
        )
        self._grouped = GroupCommit(self._lane, reopen=False)
        self._snapshots = _Snapshots()

    async def _run(self, work: Callable[[sqlite3.Connection], T], *, inline: bool = False) -> T:
        """Run `work` with a connection: `inline` for a short hot-path read or transaction that is
        safe to run again after a rollback (shared/adapters/sqlite_lane.py), else on the thread."""
        if not self._lane.is_open:
            raise RuntimeError("SqliteStore is not open: call open() first")
        return await self._lane.run(work, inline=inline)

    async def _write(self, work: Callable[[sqlite3.Connection], T], *, inline: bool = False) -> T:
        """Run `work` as one write transaction."""
        return await self._run(lambda connection: in_transaction(connection, work), inline=inline)

    async def _write_grouped(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """Run `work` inline in the transaction of the loop turn's other grouped writes
        (shared/adapters/sqlite_group.py): for single-row hot-path writes many requests make."""
        if not self._lane.is_open:
            raise RuntimeError("SqliteStore is not open: call open() first")
        return await self._grouped.write(work)

    async def open(self) -> None:
        """Open the file (created if missing) and its tables; safe on every start, from any
        number of processes at once."""
        await self._lane.open()
        await self._write(create_schema)

    async def close(self) -> None:
        await self._lane.close()

    # ---- definitions ----

    async def put_workflow_def(self, definition: WorkflowDef) -> None:
        params = (definition.name, definition.version, json.dumps(definition.to_json_dict()))
        await self._write(
            execute(
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
            lambda c: c.execute(f"SELECT body FROM store_workflow_defs {sql}", params).fetchone(),
            inline=True,
        )
        return None if row is None else WorkflowDef.model_validate_json(row[0])

    async def has_workflow_def(self, name: str, version: int | None = None) -> bool:
        params: tuple[Any, ...] = (name,) if version is None else (name, version)
        sql = "SELECT 1 FROM store_workflow_defs WHERE name = ?"
        if version is not None:
            sql += " AND version = ?"
        row = await self._run(lambda c: c.execute(sql, params).fetchone(), inline=True)
        return row is not None

    async def definitions_generation(self) -> int | None:
        row = await self._run(
            lambda c: c.execute("SELECT value FROM store_meta WHERE key = 'definitions'").fetchone(),
            inline=True,
        )
        return None if row is None else int(row[0])

    async def list_workflow_defs(self) -> list[WorkflowDef]:
        rows = await self._run(
            lambda c: c.execute("SELECT body FROM store_workflow_defs ORDER BY name, version").fetchall()
        )
        return [WorkflowDef.model_validate_json(body) for (body,) in rows]

    async def delete_workflow_def(self, name: str, version: int) -> bool:
        return await self._write(
            deleted("DELETE FROM store_workflow_defs WHERE name = ? AND version = ?", (name, version))
        )

    async def put_event_handler(self, handler: EventHandler, *, create: bool) -> bool:
        body = handler.model_dump_json(by_alias=True, exclude_none=True)
        if create:
            sql = "INSERT INTO store_event_handlers (name, body) VALUES (?, ?) ON CONFLICT (name) DO NOTHING"
            params: tuple[str, ...] = (handler.name, body)
        else:
            sql, params = "UPDATE store_event_handlers SET body = ? WHERE name = ?", (body, handler.name)
        return await self._write(lambda c: c.execute(sql, params).rowcount == 1)

    async def list_event_handlers(self) -> list[EventHandler]:
        rows = await self._run(
            lambda c: c.execute("SELECT body FROM store_event_handlers ORDER BY name").fetchall()
        )
        return [EventHandler.model_validate_json(body) for (body,) in rows]

    async def delete_event_handler(self, name: str) -> bool:
        return await self._write(deleted("DELETE FROM store_event_handlers WHERE name = ?", (name,)))

    async def delete_task_def(self, name: str) -> bool:
        return await self._write(deleted("DELETE FROM store_task_defs WHERE name = ?", (name,)))

    async def put_task_def(self, task_def: TaskDef) -> None:
        params = (task_def.name, json.dumps(task_def.to_json_dict()))
        await self._write(
            execute(
                "INSERT INTO store_task_defs (name, body) VALUES (?, ?)"
                " ON CONFLICT (name) DO UPDATE SET body = excluded.body",
                params,
            )
        )

    async def list_task_defs(self) -> list[TaskDef]:
        rows = await self._run(
            lambda c: c.execute("SELECT body FROM store_task_defs ORDER BY name").fetchall()
        )
        return [TaskDef.model_validate_json(body) for (body,) in rows]

    async def get_task_defs(self, names: Sequence[str]) -> dict[str, TaskDef]:
        param = ids_param(names)
        rows = await self._run(
            lambda c: c.execute(
                "SELECT body FROM store_task_defs WHERE name IN (SELECT value FROM json_each(?))",
                (param,),
            ).fetchall(),
            inline=True,
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
        param = ids_param(snapshot_ids)
        rows = await self._run(
            lambda c: c.execute(
                "SELECT id, body FROM store_snapshots WHERE id IN (SELECT value FROM json_each(?))",
                (param,),
            ).fetchall(),
            inline=True,
        )
        for snapshot_id, body in rows:
            self._snapshots.remember(snapshot_id, WorkflowDef.model_validate_json(body), body)

    async def load_workflows(
        self, workflow_ids: Sequence[str], running_only: bool = False
    ) -> dict[str, WorkflowDocument]:
        if not workflow_ids:
            return {}
        condition, param = id_filter(workflow_ids)
        rows = await self._run(lambda c: select_workflows(c, f"WHERE {condition}", param), inline=True)
        return {document.workflow_id: document for document in await self._documents(rows)}

    async def load_workflow(self, workflow_id: str) -> WorkflowDocument | None:
        return (await self.load_workflows([workflow_id])).get(workflow_id)

    async def load_heads(
        self, workflow_ids: Sequence[str], running_only: bool = False
    ) -> dict[str, WorkflowHeads]:
        """From the compact heads column written with each commit: no parse of the document.
        Rows written before that column existed are read with SQLite's JSON functions."""
        if not workflow_ids:
            return {}
        condition, param = id_filter(workflow_ids)
        rows = await self._run(lambda c: c.execute(HEADS_SQL + condition, param).fetchall(), inline=True)
        heads = {wid: decode_heads(wid, status, text) for wid, status, text in rows if text is not None}
        without = [wid for wid, _, text in rows if text is None]
        if without:
            older = ids_param(without)
            legacy = await self._run(lambda c: c.execute(LEGACY_HEADS_SQL, (older,)).fetchall(), inline=True)
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
        params.append(sql_limit(limit))
        rows = await self._run(lambda c: select_workflows(c, sql, params))
        return await self._documents(rows)

    async def search_workflows(self, request: SearchRequest) -> tuple[int, list[WorkflowDocument]]:
        total, rows = await self._run(lambda c: search(c, request))
        return total, await self._documents(rows)

    async def search_tasks(self, request: SearchRequest) -> tuple[int, list[TaskState]]:
        total, bodies = await self._run(lambda c: search_tasks(c, request))
        return total, [TaskState.model_validate_json(body) for body in bodies]

    async def find_task_workflow(self, task_id: str) -> str | None:
        """Live executions are in `store_task_index` (written with each commit), history in
        `store_tasks`; both are primary-key lookups."""
        row = await self._run(
            lambda c: c.execute(
                "SELECT workflow_id FROM store_task_index WHERE task_id = ?"
                " UNION ALL SELECT workflow_id FROM store_tasks WHERE id = ? LIMIT 1",
                (task_id, task_id),
            ).fetchone(),
            inline=True,
        )
        return None if row is None else str(row[0])

    @property
    def path(self) -> str:
        """The state file (the embedded bus may share it: shared/adapters/sqlite_outbox.py)."""
        return self._path

    def prepare_commit(self, commit: Commit, *, outbox_published: bool = False) -> PreparedCommit:
        """The rows of one commit, for `apply_commit` in a write transaction. `outbox_published`:
        the document's outbox goes out in the same transaction, so it is not marked unsent."""
        if commit.document.version != commit.expected_version + 1:
            raise ValueError("commit: document.version must be expected_version + 1")
        document = commit.document
        snapshot = None
        if document.definition is not None:
            snapshot = self._snapshots.identify(document.definition)
        row = workflow_row(document, None if snapshot is None else snapshot[0])
        if outbox_published:
            row = dataclasses.replace(row, outbox_since=None)
        if commit.new_task_ids is not None:  # index only what is new (each commit re-wrote all)
            row = dataclasses.replace(row, task_ids=tuple(commit.new_task_ids))
        return PreparedCommit(
            row=row,
            search=search_row(document) if commit.searched_changed or commit.expected_version == 0 else None,
            expected_version=commit.expected_version,
            tasks=tuple(task_row(task) for task in commit.tasks),
            snapshot=snapshot,
            history=tuple(
                (chunk.chunk_id, chunk.workflow_id, chunk.generation, chunk.first, json.dumps(chunk.events))
                for chunk in commit.history
            ),
        )

    async def commit_workflows(self, commits: Sequence[Commit]) -> list[bool]:
        """All commits in one transaction, each conditional on its own version (see module doc).

        Task records are written only for the winners: under one transaction the adapter can
        keep a losing decision's records out, so history never shows a decision that lost."""
        prepared = [self.prepare_commit(commit) for commit in commits]
        if not prepared:
            return []
        return await self._write(lambda c: [apply_commit(c, commit) for commit in prepared], inline=True)

    async def write_transaction(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """Run `work` as one short hot-path write transaction on this file (inline when the lock
        is free): it must be safe to run again after a rollback."""
        return await self._write(work, inline=True)

    async def mark_outboxes_sent(self, published: Sequence[tuple[str, int]]) -> None:
        if published:
            rows = list(published)
            await self._write(lambda c: clear_outboxes(c, rows), inline=True)

    async def find_unpublished(self, older_than: int, limit: int) -> list[str]:
        rows = await self._run(
            lambda c: c.execute(
                "SELECT id FROM store_workflows WHERE outbox_since IS NOT NULL AND outbox_since < ?"
                " ORDER BY outbox_since LIMIT ?",
                (older_than, sql_limit(limit)),
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
                (before, since, since, last_id, sql_limit(limit)),
            ).fetchall()
        )
        return [(at, workflow_id) for at, workflow_id in rows]

    async def remove_workflow(self, workflow_id: str) -> bool:
        def remove(connection: sqlite3.Connection) -> bool:
            for table in ("store_tasks", "store_task_index", "store_history"):
                connection.execute(f"DELETE FROM {table} WHERE workflow_id = ?", (workflow_id,))
            connection.execute("DELETE FROM store_workflow_search WHERE id = ?", (workflow_id,))
            return connection.execute("DELETE FROM store_workflows WHERE id = ?", (workflow_id,)).rowcount > 0

        return await self._write(remove)

    async def purge_finished(self, ended_before: int, limit: int) -> list[str]:
        """One transaction per batch (served by the (status, updated_at) index)."""
        finished = [status.value for status in WorkflowStatus if status.is_terminal]
        marks = ",".join("?" * len(finished))

        def purge(connection: sqlite3.Connection) -> list[str]:
            rows = connection.execute(
                f"SELECT id FROM store_workflows WHERE status IN ({marks}) AND updated_at < ? LIMIT ?",
                (*finished, ended_before, sql_limit(limit)),
            ).fetchall()
            ids = [workflow_id for (workflow_id,) in rows]
            if ids:
                chosen = "SELECT value FROM json_each(?)"
                param = (ids_param(ids),)
                connection.execute(
                    "DELETE FROM store_task_claims WHERE task_id IN"
                    f" (SELECT task_id FROM store_task_index WHERE workflow_id IN ({chosen}))",
                    param,
                )
                connection.execute(
                    f"DELETE FROM store_timers WHERE json_extract(body, '$.workflowId') IN ({chosen})", param
                )
                for table in ("store_tasks", "store_task_index", "store_history"):
                    connection.execute(f"DELETE FROM {table} WHERE workflow_id IN ({chosen})", param)
                connection.execute(f"DELETE FROM store_workflow_search WHERE id IN ({chosen})", param)
                connection.execute(f"DELETE FROM store_workflows WHERE id IN ({chosen})", param)
            return ids

        return await self._write(purge)

    async def housekeeping(self, now: int) -> None:
        """Drop task claims whose lease has run out: an expired claim and no claim mean the same
        to `claim_task`, so this only keeps the table small."""
        await self._write(execute("DELETE FROM store_task_claims WHERE claim_until <= ?", (now,)))

    # ---- code workflows' histories ----

    async def load_history(
        self, workflow_id: str, generation: int, firsts: Sequence[int]
    ) -> list[HistoryChunk]:
        wanted = ids_param(chunk_id(workflow_id, generation, first) for first in firsts)
        rows = await self._run(
            lambda c: c.execute(
                "SELECT first, body FROM store_history WHERE id IN (SELECT value FROM json_each(?))",
                (wanted,),
            ).fetchall()
        )
        return [HistoryChunk(workflow_id, generation, first, json.loads(body)) for first, body in rows]

    # ---- task records ----

    async def upsert_tasks(self, tasks: Sequence[TaskState]) -> None:
        rows = [task_row(task) for task in tasks]
        if rows:
            await self._write(lambda c: write_tasks(c, rows), inline=True)

    async def get_task(self, task_id: str) -> TaskState | None:
        row = await self._run(
            lambda c: c.execute("SELECT body FROM store_tasks WHERE id = ?", (task_id,)).fetchone(),
            inline=True,
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
        whose lease has run out; a live claim makes the upsert change no row. Committed with the
        other claims of the loop's turn (shared/adapters/sqlite_group.py)."""
        if lease_ms <= 0:
            raise ValueError("claim_task: lease_ms must be positive")
        return await self._write_grouped(lambda c: claim_task(c, task_id, worker_id, now, now + lease_ms))

    async def renew_task_claim(self, task_id: str, holder: str, now: int, lease_ms: int) -> bool:
        """The same upsert, which also updates the holder's own row (live or not); a pruned
        expired claim is simply claimed again. Committed with the other renewals of the loop's
        turn (a hand-out's, and other answers'): shared/adapters/sqlite_group.py."""
        if lease_ms <= 0:
            raise ValueError("renew_task_claim: lease_ms must be positive")
        until = now + lease_ms
        return await self._write_grouped(lambda c: claim_task(c, task_id, holder, now, until, renew=True))

    # ---- timers ----

    async def upsert_timer(self, timer: TimerRecord) -> None:
        """Replace the whole record, claim included (as re-arming does on the MongoDB adapter)."""
        params = (timer.timer_id, timer.fire_at, timer.claim_until, timer.claimed_by,
                  timer.model_dump_json(by_alias=True))  # fmt: skip
        await self._write(
            execute(
                "INSERT INTO store_timers (id, fire_at, claim_until, claimed_by, body)"
                " VALUES (?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET fire_at = excluded.fire_at,"
                " claim_until = excluded.claim_until, claimed_by = excluded.claimed_by,"
                " body = excluded.body",
                params,
            ),
            inline=True,
        )

    async def delete_timers(self, timer_ids: Sequence[str]) -> None:
        if timer_ids:
            param = ids_param(timer_ids)
            await self._write(
                execute("DELETE FROM store_timers WHERE id IN (SELECT value FROM json_each(?))", (param,)),
                inline=True,
            )

    async def claim_due_timers(self, now: int, owner: str, lease_ms: int, limit: int) -> list[TimerRecord]:
        """Find and claim in one BEGIN IMMEDIATE transaction: exclusive across processes."""
        until = now + lease_ms
        claimed = await self._write(lambda c: claim_timers(c, now, owner, until, limit), inline=True)
        return [
            TimerRecord.model_validate_json(body).model_copy(
                update={"claim_until": until, "claimed_by": owner}
            )
            for _, body in claimed
        ]
