"""`cairn dev`'s outbox: a decision's commit, its messages and the batch's acknowledgement in one
SQLite transaction (the store and the embedded bus share the state file).

Why: each of these was a write transaction of its own — the store's commit, the bus's append,
the store's "outbox sent" mark and the consumer's offset commit — and in WAL mode a write
transaction costs a lock, a WAL append and a commit however little it writes. Written together
they are also atomic: a SIGKILL leaves either the decision with its messages and the consumed
offsets, or none of them (then the batch is delivered again and decided again, as before).

The transaction runs on the store's connections (inline when the write lock is free,
shared/adapters/sqlite_lane.py), so it is safe to run again after a rollback: nothing in it is
done outside SQLite until it committed; then the bus's consumers in this process are woken.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from collections.abc import Sequence

from shared.adapters.embedded_bus import CURRENT_DELIVERY, EmbeddedBus
from shared.adapters.embedded_bus_sql import append_rows, commit_positions
from shared.adapters.sqlite_sql import apply_commit
from shared.adapters.sqlite_store import SqliteStore
from shared.ports.bus import Outgoing, Received
from shared.ports.store import Commit

log = logging.getLogger(__name__)


class SqliteOutbox:
    """The AtomicOutbox port on a SqliteStore and an EmbeddedBus of the same file."""

    def __init__(self, store: SqliteStore, bus: EmbeddedBus) -> None:
        if not shares_file(store, bus):
            raise ValueError(f"the store ({store.path}) and the bus ({bus.path}) are different files")
        self.store = store
        self.bus = bus
        self._bus_schema = False

    async def commit_and_publish(
        self,
        commits: Sequence[Commit],
        messages: Sequence[Sequence[Outgoing] | None],
        *,
        acknowledge: Sequence[Received] | None = None,
    ) -> list[bool]:
        if len(commits) != len(messages):
            raise ValueError("commit_and_publish: one entry of messages per commit")
        if not commits:
            return []  # nothing to commit: the member acknowledges the batch itself
        if not self._bus_schema:  # the bus creates its tables when it first opens the file
            await self.bus.ensure_topics([])
            self._bus_schema = True
        prepared = [
            self.store.prepare_commit(commit, outbox_published=out is not None)
            for commit, out in zip(commits, messages, strict=True)
        ]
        delivery = CURRENT_DELIVERY.get()
        if delivery is not None and (
            acknowledge is None or delivery.batch is not acknowledge or delivery.path != self.bus.path
        ):
            delivery = None
        partitions, choose = self.bus.partitions, self.bus.partition_for

        def work(connection: sqlite3.Connection) -> tuple[list[bool], list[tuple[str, int]] | None]:
            won = [apply_commit(connection, commit) for commit in prepared]
            out = [m for ok, batch in zip(won, messages, strict=True) if ok and batch for m in batch]
            if out:
                append_rows(connection, out, partitions, choose)
            refused = None
            if delivery is not None and all(won):
                refused = commit_positions(connection, delivery.group, delivery.member, delivery.positions)
            return won, refused

        won, refused = await self.store.write_transaction(work)
        if delivery is not None and refused is not None:
            delivery.acknowledged, delivery.refused = True, refused
        topics = {m.topic for ok, batch in zip(won, messages, strict=True) if ok and batch for m in batch}
        if topics:
            self.bus.wake_consumers(topics)
        return won


def shares_file(store: SqliteStore, bus: EmbeddedBus) -> bool:
    """Whether the store and the bus are one SQLite file (what `cairn dev` runs on)."""
    return os.path.realpath(store.path) == bus.path


def atomic_outbox(store: object, bus: object) -> SqliteOutbox | None:
    """The outbox for a decider on `store` and `bus` (the bus possibly behind the poison guard,
    which keeps it as `inner`): a SqliteOutbox when both are one SQLite file, else None."""
    inner = getattr(bus, "inner", bus)
    if isinstance(store, SqliteStore) and isinstance(inner, EmbeddedBus) and shares_file(store, inner):
        return SqliteOutbox(store, inner)
    return None
