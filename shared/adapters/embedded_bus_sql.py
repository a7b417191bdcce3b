"""The embedded bus's SQLite side: its schema, and every transaction it runs, as synchronous
functions of a connection. They run on the bus's database thread (`embedded_bus._Database`), one
short transaction each; `embedded_bus` holds the asynchronous members and the bus around them."""

from __future__ import annotations

import contextlib
import json
import logging
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from shared.adapters.sqlite_durability import DEFAULT_SYNCHRONOUS, SqliteSynchronous, open_wal
from shared.ports.bus import Outgoing, Received

log = logging.getLogger(__name__)


SCHEMA = """
CREATE TABLE IF NOT EXISTS bus_topics (
    topic TEXT PRIMARY KEY,
    partitions INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS bus_partitions (
    topic TEXT NOT NULL,
    partition INTEGER NOT NULL,
    next_offset INTEGER NOT NULL,
    PRIMARY KEY (topic, partition)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS bus_messages (
    topic TEXT NOT NULL,
    partition INTEGER NOT NULL,
    offset INTEGER NOT NULL,
    key TEXT,
    value BLOB NOT NULL,
    headers TEXT NOT NULL,
    published_at INTEGER NOT NULL,
    PRIMARY KEY (topic, partition, offset)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS bus_groups (
    grp TEXT NOT NULL,
    topic TEXT NOT NULL,
    PRIMARY KEY (grp, topic)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS bus_offsets (
    grp TEXT NOT NULL,
    topic TEXT NOT NULL,
    partition INTEGER NOT NULL,
    committed INTEGER NOT NULL,
    PRIMARY KEY (grp, topic, partition)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS bus_members (
    grp TEXT NOT NULL,
    topic TEXT NOT NULL,
    member TEXT NOT NULL,
    seen_at INTEGER NOT NULL,
    PRIMARY KEY (grp, topic, member)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS bus_group_seen (
    grp TEXT NOT NULL,
    topic TEXT NOT NULL,
    seen_at INTEGER NOT NULL,
    PRIMARY KEY (grp, topic)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS bus_leases (
    grp TEXT NOT NULL,
    topic TEXT NOT NULL,
    partition INTEGER NOT NULL,
    owner TEXT NOT NULL,
    lease_until INTEGER NOT NULL,
    PRIMARY KEY (grp, topic, partition)
) WITHOUT ROWID;
"""

TopicPartition = tuple[str, int]

# How long a transaction waits for another connection's write lock (any process, the store too).
BUSY_TIMEOUT_MS = 10_000

# How soon a member below its fair share looks again for partitions given back by others.
SHORT_RECHECK_S = 0.25


def now_ms() -> int:
    """Wall-clock milliseconds: leases are compared across processes, so no monotonic clock."""
    return int(time.time() * 1000)


# ---------------------------------------------------------------- SQLite, synchronous ----------
# Every function below runs on the bus's database thread and is one short transaction.


def connect(
    path: str, check_same_thread: bool = True, synchronous: SqliteSynchronous = DEFAULT_SYNCHRONOUS
) -> sqlite3.Connection:
    conn = open_wal(
        path, check_same_thread=check_same_thread, busy_timeout_ms=BUSY_TIMEOUT_MS, synchronous=synchronous
    )
    # executescript commits any open transaction first, so the script brings its own.
    conn.executescript("BEGIN IMMEDIATE;" + SCHEMA + "COMMIT;")
    return conn


@contextlib.contextmanager
def write(conn: sqlite3.Connection) -> Iterator[None]:
    """A write transaction that takes the write lock at BEGIN: a deferred transaction that
    upgrades later can fail with SQLITE_BUSY at once instead of waiting for the lock."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


@contextlib.contextmanager
def read(conn: sqlite3.Connection) -> Iterator[None]:
    """A read transaction: several SELECTs see one snapshot."""
    conn.execute("BEGIN")
    try:
        yield
    finally:
        conn.execute("COMMIT")


def ensure_topic(conn: sqlite3.Connection, topic: str, partitions: int) -> int:
    """The topic's partition count, creating the topic first if needed (inside a write)."""
    row = conn.execute("SELECT partitions FROM bus_topics WHERE topic = ?", (topic,)).fetchone()
    if row is not None:
        return int(row[0])
    conn.execute("INSERT INTO bus_topics (topic, partitions) VALUES (?, ?)", (topic, partitions))
    conn.executemany(
        "INSERT INTO bus_partitions (topic, partition, next_offset) VALUES (?, ?, 0)",
        [(topic, p) for p in range(partitions)],
    )
    return partitions


def high_watermarks(conn: sqlite3.Connection) -> dict[TopicPartition, int]:
    """Every partition's next offset: what changed since the last look is what was published."""
    return {
        (topic, partition): offset
        for topic, partition, offset in conn.execute(
            "SELECT topic, partition, next_offset FROM bus_partitions"
        )
    }


def create_topics(conn: sqlite3.Connection, topics: Sequence[str], partitions: int) -> None:
    with write(conn):
        for topic in topics:
            ensure_topic(conn, topic, partitions)


def append_rows(
    conn: sqlite3.Connection,
    messages: Sequence[Outgoing],
    partitions: int,
    choose: Callable[[str | None, int], int],
) -> None:
    """Append the messages inside the caller's write transaction (which may hold other writes to
    the same file: a decision's commit, shared/adapters/sqlite_outbox.py)."""
    now = now_ms()
    counts: dict[str, int] = {}
    next_offsets: dict[TopicPartition, int] = {}
    rows = []
    for message in messages:
        if message.topic not in counts:
            counts[message.topic] = ensure_topic(conn, message.topic, partitions)
        where = (message.topic, choose(message.key, counts[message.topic]))
        if where not in next_offsets:
            next_offsets[where] = conn.execute(
                "SELECT next_offset FROM bus_partitions WHERE topic = ? AND partition = ?", where
            ).fetchone()[0]
        offset = next_offsets[where]
        next_offsets[where] = offset + 1
        headers = json.dumps(message.headers)
        rows.append((*where, offset, message.key, message.value, headers, now))
    conn.executemany(
        "INSERT INTO bus_messages (topic, partition, offset, key, value, headers, published_at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?)",
        rows,
    )
    conn.executemany(
        "UPDATE bus_partitions SET next_offset = ? WHERE topic = ? AND partition = ?",
        [(offset, topic, partition) for (topic, partition), offset in next_offsets.items()],
    )


def range_share(partitions: int, live: Sequence[str], member: str) -> set[int]:
    """The partitions this member should hold: Kafka's range assignment over the live members in
    id order (the first members get one more when it does not divide). It depends only on the
    partition count and the members, so a member gets the same partition numbers of every topic
    of its subscription: all of a workflow's topics (keyed alike) reach one decider."""
    ordered = sorted({*live, member})
    base, extra = divmod(partitions, len(ordered))
    index = ordered.index(member)
    first = index * base + min(index, extra)
    return set(range(first, first + base + (1 if index < extra else 0)))


@dataclass(frozen=True)
class Balance:
    """What a rebalance did: whether it gave partitions back (peers may take them now) and whether
    this member still holds fewer than its share (it should look again soon)."""

    released: bool
    short: bool


def rebalance(
    conn: sqlite3.Connection, group: str, member: str, topics: Sequence[str], partitions: int, session_ms: int
) -> Balance:
    """Heartbeat, then move this member's leases towards its fair share: give back what is above
    it, take free or expired partitions up to it, renew the rest."""
    now = now_ms()
    released = short = False
    with write(conn):
        for topic in topics:
            count = ensure_topic(conn, topic, partitions)
            conn.execute("INSERT OR IGNORE INTO bus_groups (grp, topic) VALUES (?, ?)", (group, topic))
            conn.execute(
                "INSERT INTO bus_members (grp, topic, member, seen_at) VALUES (?, ?, ?, ?)"
                " ON CONFLICT DO UPDATE SET seen_at = excluded.seen_at",
                (group, topic, member, now),
            )
            live = [
                row[0]
                for row in conn.execute(
                    "SELECT member FROM bus_members WHERE grp = ? AND topic = ? AND seen_at > ?",
                    (group, topic, now - session_ms),
                )
            ]
            share = range_share(count, live, member)
            leases = {
                partition: (owner, until)
                for partition, owner, until in conn.execute(
                    "SELECT partition, owner, lease_until FROM bus_leases WHERE grp = ? AND topic = ?",
                    (group, topic),
                )
            }
            held = {p for p, (owner, _) in leases.items() if owner == member}
            for partition in sorted(held - share):
                conn.execute(
                    "DELETE FROM bus_leases WHERE grp = ? AND topic = ? AND partition = ? AND owner = ?",
                    (group, topic, partition, member),
                )
            released = released or bool(held - share)
            mine = sorted(held & share)
            taken = [p for p in sorted(share - held) if p not in leases or leases[p][1] <= now]
            conn.executemany(
                "INSERT INTO bus_leases (grp, topic, partition, owner, lease_until) VALUES (?, ?, ?, ?, ?)"
                " ON CONFLICT DO UPDATE SET owner = excluded.owner, lease_until = excluded.lease_until",
                [(group, topic, p, member, now + session_ms) for p in taken],
            )
            conn.execute(
                "UPDATE bus_leases SET lease_until = ? WHERE grp = ? AND topic = ? AND owner = ?",
                (now + session_ms, group, topic, member),
            )
            short = short or len(mine) + len(taken) < len(share)
    return Balance(released=released, short=short)


def heartbeat(conn: sqlite3.Connection, group: str, member: str, session_ms: int) -> int:
    """Stay live and keep the leases still owned (never takes one). Returns how many are held."""
    now = now_ms()
    with write(conn):
        conn.execute("UPDATE bus_members SET seen_at = ? WHERE grp = ? AND member = ?", (now, group, member))
        return conn.execute(
            "UPDATE bus_leases SET lease_until = ? WHERE grp = ? AND owner = ?",
            (now + session_ms, group, member),
        ).rowcount


def fetch(conn: sqlite3.Connection, group: str, member: str, max_batch: int, rotation: int) -> list[Received]:
    """The next messages after the committed offsets of the partitions this member holds an
    unexpired lease on. Only partitions with messages past their committed offset are read (one
    query finds them: a decider holds 24 partitions, and one query each cost more than the rest of
    a fetch). The starting partition rotates among those, so one busy partition starves no
    other."""
    batch: list[Received] = []
    with read(conn):
        positions = conn.execute(
            "SELECT l.topic, l.partition, COALESCE(o.committed, 0) FROM bus_leases l"
            " JOIN bus_partitions p ON p.topic = l.topic AND p.partition = l.partition"
            " LEFT JOIN bus_offsets o ON o.grp = l.grp AND o.topic = l.topic AND o.partition = l.partition"
            " WHERE l.grp = ? AND l.owner = ? AND l.lease_until > ?"
            " AND p.next_offset > COALESCE(o.committed, 0)"
            " ORDER BY l.topic, l.partition",
            (group, member, now_ms()),
        ).fetchall()
        if not positions:
            return batch
        start = rotation % len(positions)
        for topic, partition, committed in positions[start:] + positions[:start]:
            rows = conn.execute(
                "SELECT offset, key, value, headers FROM bus_messages"
                " WHERE topic = ? AND partition = ? AND offset >= ? ORDER BY offset LIMIT ?",
                (topic, partition, committed, max_batch - len(batch)),
            )
            batch.extend(
                Received(
                    topic=topic,
                    value=bytes(value),
                    key=key,
                    headers=json.loads(headers),
                    partition=partition,
                    offset=offset,
                )
                for offset, key, value, headers in rows
            )
            if len(batch) >= max_batch:
                break
    return batch


def commit(
    conn: sqlite3.Connection, group: str, member: str, positions: dict[TopicPartition, int]
) -> list[TopicPartition]:
    """Commit the next offset to read for each partition this member still owns (checked in the
    same transaction). Returns the partitions whose commit was refused."""
    with write(conn):
        return commit_positions(conn, group, member, positions)


def commit_positions(
    conn: sqlite3.Connection, group: str, member: str, positions: dict[TopicPartition, int]
) -> list[TopicPartition]:
    """`commit` inside the caller's write transaction."""
    refused: list[TopicPartition] = []
    for (topic, partition), committed in positions.items():
        owner = conn.execute(
            "SELECT owner FROM bus_leases WHERE grp = ? AND topic = ? AND partition = ?",
            (group, topic, partition),
        ).fetchone()
        if owner is None or owner[0] != member:
            refused.append((topic, partition))
            continue
        conn.execute(
            "INSERT INTO bus_offsets (grp, topic, partition, committed) VALUES (?, ?, ?, ?)"
            " ON CONFLICT DO UPDATE SET committed = MAX(committed, excluded.committed)",
            (group, topic, partition, committed),
        )
    return refused


def leave(conn: sqlite3.Connection, group: str, member: str) -> None:
    """Give back every lease at once, so the group's other members need not wait for expiry."""
    with write(conn):
        conn.execute("DELETE FROM bus_leases WHERE grp = ? AND owner = ?", (group, member))
        conn.execute("DELETE FROM bus_members WHERE grp = ? AND member = ?", (group, member))


def peek(conn: sqlite3.Connection, topic: str, limit: int) -> list[Received]:
    rows = conn.execute(
        "SELECT partition, offset, key, value, headers FROM bus_messages WHERE topic = ?"
        " ORDER BY published_at DESC, partition, offset DESC LIMIT ?",
        (topic, limit),
    ).fetchall()
    return [
        Received(topic, bytes(value), key, json.loads(headers), partition, offset)
        for partition, offset, key, value, headers in reversed(rows)
    ]


def prune(
    conn: sqlite3.Connection,
    published_before: int,
    seen_before: int,
    kept_longer: dict[str, int],
    group_idle_before: int,
) -> int:
    """Delete messages every known group of their topic has committed past and that were published
    before `published_before` (`kept_longer[topic]` for the topics listed there); forget members
    not seen since `seen_before`, and groups no member consumed for since `group_idle_before`
    (their offsets too, as Kafka's offsets.retention does: a group that comes back later starts
    from the oldest message kept), so a group nobody runs any more stops holding messages back.
    Returns the count."""
    deleted = 0
    now = now_ms()
    with write(conn):
        conn.execute(
            "INSERT INTO bus_group_seen (grp, topic, seen_at)"
            " SELECT grp, topic, MAX(seen_at) FROM bus_members GROUP BY grp, topic"
            " ON CONFLICT DO UPDATE SET seen_at = MAX(seen_at, excluded.seen_at)"
        )
        conn.execute(  # groups known before this table existed: idle from now on
            "INSERT OR IGNORE INTO bus_group_seen (grp, topic, seen_at) SELECT grp, topic, ? FROM bus_groups",
            (now,),
        )
        idle = conn.execute(
            "SELECT grp, topic FROM bus_group_seen WHERE seen_at < ?", (group_idle_before,)
        ).fetchall()
        for table in ("bus_groups", "bus_offsets", "bus_leases", "bus_group_seen"):
            conn.executemany(f"DELETE FROM {table} WHERE grp = ? AND topic = ?", idle)
        if idle:
            log.info("embedded bus forgot %d idle consumer groups: %s", len(idle), idle[:10])
        marks = conn.execute("SELECT topic, partition, next_offset FROM bus_partitions").fetchall()
        for topic, partition, next_offset in marks:
            (lowest,) = conn.execute(
                "SELECT MIN(COALESCE(o.committed, 0)) FROM bus_groups g LEFT JOIN bus_offsets o"
                " ON o.grp = g.grp AND o.topic = g.topic AND o.partition = ? WHERE g.topic = ?",
                (partition, topic),
            ).fetchone()
            bound = next_offset if lowest is None else lowest
            deleted += conn.execute(
                "DELETE FROM bus_messages WHERE topic = ? AND partition = ? AND offset < ?"
                " AND published_at < ?",
                (topic, partition, bound, kept_longer.get(topic, published_before)),
            ).rowcount
        conn.execute("DELETE FROM bus_members WHERE seen_at < ?", (seen_before,))
    return deleted
