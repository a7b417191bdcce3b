"""Bus port for `cairn dev`: an append-only log in SQLite, with Kafka's delivery contract.

Decision: messages are persisted in SQLite, in the same file as the SQLite store (whose tables are
prefixed `store_`; every table here is prefixed `bus_`). One file holds the whole state of an
embedded Cairn, so a copy of that file is a complete backup, and `publish` returns only after its
transaction committed: what was published, and every offset committed after a handler returned,
survives a SIGKILL of the process (WAL with synchronous=NORMAL loses nothing on a process crash,
only possibly the last transactions on a power failure). Work that was fetched but not
acknowledged is delivered again after a restart.

Model (Kafka's, so the services cannot tell the two apart):
- A topic has a fixed number of partitions; a message goes to partition crc32(key) mod partitions
  (round robin without a key) and gets the next offset of that partition. Same key, same
  partition, so per-key order is the order of offsets.
- A consumer group has one committed offset per partition (`bus_offsets`); a group nobody has
  seen before starts from the earliest retained message.
- Members of a group share the partitions through leases (`bus_leases`). Every member announces
  itself with a heartbeat (`bus_members`) and renews its leases with it. Between batches a member
  computes its fair share among the group's live members, gives back partitions above it and
  takes free or expired ones up to it. A member only reads partitions it holds an unexpired lease
  on, and its offset commit is refused for a partition it no longer owns, so a partition is never
  read by two members at once; the one overlap left is Kafka's too: a member whose heartbeats
  stall for a whole session loses its partitions while its in-flight batch runs, and that batch
  is delivered again to the new owner.
- Publishing wakes this process's consumers of the topic at once; other processes see new
  messages within `poll_interval_s`: one watcher per started bus reads every partition's high
  watermark each interval and wakes the members whose topics grew. An idle member does not
  poll by itself (each poll would be a query on the bus's one database thread, in the queue of
  every publish and commit: a process of a dozen idle members spent most of that thread on it).
- Retention: a message is deleted once every group known to its topic has committed past it and
  it is older than `retention_s` (the bus prunes every `prune_interval_s` while started). A group
  no member consumed for `group_retention_s` is forgotten, offsets and all, as Kafka forgets one.

The schema and the transactions are in `embedded_bus_sql`; this module holds the database
thread, the members and the bus.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import itertools
import logging
import os
import sqlite3
import threading
import uuid
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Concatenate, ParamSpec, TypeVar

from shared.adapters.embedded_bus_sql import (
    SHORT_RECHECK_S,
    append_rows,
    commit,
    connect,
    create_topics,
    fetch,
    heartbeat,
    high_watermarks,
    leave,
    now_ms,
    peek,
    prune,
    rebalance,
)
from shared.adapters.sqlite_durability import DEFAULT_SYNCHRONOUS, SqliteSynchronous
from shared.adapters.sqlite_group import GroupCommit
from shared.adapters.sqlite_lane import SqliteLane
from shared.ports.bus import BatchHandler, Outgoing, Received, Subscription

P = ParamSpec("P")
T = TypeVar("T")

log = logging.getLogger(__name__)

# ---------------------------------------------------------------- deliveries -------------------


@dataclass
class Delivery:
    """The batch a member is handing to its handler, and the offsets that acknowledge it.

    A handler that writes to the same SQLite file may acknowledge the batch inside its own last
    write transaction (shared/adapters/sqlite_outbox.py): its effects and the acknowledgement are
    then committed together, and the member skips its own offset commit, one write transaction
    less per batch. Only the very batch the member delivered may be acknowledged so (the poison
    guard's one-message retries are other lists)."""

    path: str
    group: str
    member: str
    batch: Sequence[Received]
    positions: dict[tuple[str, int], int]
    acknowledged: bool = False
    refused: list[tuple[str, int]] = field(default_factory=list)


CURRENT_DELIVERY: contextvars.ContextVar[Delivery | None] = contextvars.ContextVar(
    "cairn_embedded_delivery", default=None
)
"""Set by a member around its handler call (the handler runs in the member's task)."""


# ---------------------------------------------------------------- the database thread ----------


class _Database:
    """The bus's connections to its file: short hot-path transactions (`inline=True`) on the
    loop's thread, the rest on one worker thread, whose lock waits (busy_timeout) then block that
    thread, never the loop (shared/adapters/sqlite_lane.py)."""

    def __init__(self, path: str, synchronous: SqliteSynchronous = DEFAULT_SYNCHRONOUS) -> None:
        self._lane = SqliteLane(lambda same_thread: connect(path, same_thread, synchronous), "cairn-bus-db")
        self.grouped = GroupCommit(self._lane)
        """Appends committed together with the others of the loop's turn (sqlite_group.py)."""

    async def run(
        self,
        fn: Callable[Concatenate[sqlite3.Connection, P], T],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        """On the worker thread."""
        return await self._lane.run(lambda conn: fn(conn, *args, **kwargs))

    async def run_inline(
        self,
        fn: Callable[Concatenate[sqlite3.Connection, P], T],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        """On the loop's thread unless the write lock is held elsewhere: `fn` must be one
        transaction (or a read) that is safe to run again after a rollback."""
        return await self._lane.run(lambda conn: fn(conn, *args, **kwargs), inline=True)

    async def close(self) -> None:
        await self._lane.close()


# ---------------------------------------------------------------- in-process wake-ups ----------


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class _LocalMembers:
    """This process's members by database file, so a publish can wake its consumers at once and a
    member leaving can make its group's other members rebalance at once (thread-safe: buses on
    other threads' loops are woken through their own loop)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._members: set[_Member] = set()

    def add(self, member: _Member) -> None:
        with self._lock:
            self._members.add(member)

    def discard(self, member: _Member) -> None:
        with self._lock:
            self._members.discard(member)

    def _matching(self, path: str, test: Callable[[_Member], bool]) -> list[_Member]:
        with self._lock:
            return [m for m in self._members if m.path == path and test(m)]

    def wake_topics(self, path: str, topics: set[str]) -> None:
        for member in self._matching(path, lambda m: not topics.isdisjoint(m.topics)):
            member.wake()

    def nudge_group(self, path: str, group: str, besides: _Member) -> None:
        for member in self._matching(path, lambda m: m.group == group and m is not besides):
            member.nudge()


_LOCAL = _LocalMembers()


# ---------------------------------------------------------------- members ----------------------


class _Member:
    """One subscription: a member of a consumer group with its own consume loop and heartbeat."""

    def __init__(
        self,
        bus: EmbeddedBus,
        topics: Sequence[str],
        group: str,
        handler: BatchHandler,
        max_batch: int,
    ) -> None:
        self.path = bus.path
        self.topics = tuple(dict.fromkeys(topics))
        self.group = group
        self.id = bus.member_id(group)
        self._bus = bus
        self._handler = handler
        self._max_batch = max_batch
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wakeup = asyncio.Event()
        self._closing = asyncio.Event()
        self._rebalance_due = True
        self._next_rebalance = 0.0
        self._rotation = itertools.count()
        self._tasks: list[asyncio.Task[None]] = []
        self._closed = False

    async def start(self) -> None:
        """Join the group (the first rebalance), then consume and heartbeat in the background."""
        self._loop = asyncio.get_running_loop()
        await self._rebalance()
        _LOCAL.add(self)
        _LOCAL.nudge_group(self.path, self.group, besides=self)
        self._tasks = [
            asyncio.create_task(self._consume(), name=f"cairn-bus {self.group} {self.id}"),
            asyncio.create_task(self._heartbeats(), name=f"cairn-bus heartbeat {self.id}"),
        ]

    async def close(self) -> None:
        """Leave the group: let the in-flight batch finish (cancel it after the bus's graceful
        timeout), then give back every lease so other members take over at once."""
        if self._closed:
            return
        self._closed = True
        self._closing.set()
        self._wakeup.set()
        _LOCAL.discard(self)
        if self._tasks:
            consume, heartbeats = self._tasks
            _, pending = await asyncio.wait({consume}, timeout=self._bus.graceful_timeout_s)
            for task in (*pending, heartbeats):
                task.cancel()
            await asyncio.gather(consume, heartbeats, return_exceptions=True)
        try:
            await self._bus.db.run(leave, self.group, self.id)
        except Exception:
            log.warning("could not leave group %s cleanly; leases expire instead", self.group, exc_info=True)
        _LOCAL.nudge_group(self.path, self.group, besides=self)
        self._bus.forget(self)

    def wake(self) -> None:
        """New messages may be there (callable from any thread)."""
        self._threadsafe(self._wakeup.set)

    def nudge(self) -> None:
        """The group changed: rebalance before the next fetch (callable from any thread)."""
        self._threadsafe(self._nudged)

    def _nudged(self) -> None:
        self._rebalance_due = True
        self._wakeup.set()

    def _threadsafe(self, callback: Callable[[], None]) -> None:
        if self._loop is None:
            return
        if self._loop is _running_loop():  # a publish on this member's own loop: no self-pipe write
            callback()
            return
        try:
            self._loop.call_soon_threadsafe(callback)
        except RuntimeError:  # its loop is closed: a member that was never closed
            _LOCAL.discard(self)

    async def _rebalance(self) -> None:
        """Between batches: converge on the fair share. A member short of its share looks again
        soon (its partitions are being given back by another member, possibly in another process);
        one that gave partitions back tells this process's peers to take them now."""
        bus = self._bus
        self._rebalance_due = False  # before the call: a nudge arriving meanwhile is kept
        balance = await bus.db.run_inline(
            rebalance, self.group, self.id, self.topics, bus.partitions, bus.session_ms
        )
        if balance.released:
            _LOCAL.nudge_group(self.path, self.group, besides=self)
        wait = min(bus.heartbeat_s, SHORT_RECHECK_S) if balance.short else bus.heartbeat_s
        self._next_rebalance = asyncio.get_running_loop().time() + wait

    async def _consume(self) -> None:
        failures = 0
        while not self._closing.is_set():
            try:
                if self._rebalance_due or asyncio.get_running_loop().time() >= self._next_rebalance:
                    await self._rebalance()
                self._wakeup.clear()  # before the fetch: a publish after it is not missed
                batch = await self._bus.db.run_inline(
                    fetch, self.group, self.id, self._max_batch, next(self._rotation)
                )
                if not batch:
                    await self._idle()
                    continue
                delivered = await self._deliver(batch)
                failures = 0 if delivered else failures + 1
            except Exception:
                failures += 1
                log.exception("embedded bus consumer of %s failed; retrying", self.topics)
            if failures:
                await self._pause(min(0.1 * 2 ** min(failures, 6), 5.0))

    async def _deliver(self, batch: list[Received]) -> bool:
        """Hand the batch to the handler; commit only if it returned. False if it raised."""
        positions = {(m.topic, m.partition): m.offset + 1 for m in batch}  # offsets ascend per partition
        delivery = Delivery(self.path, self.group, self.id, batch, positions)
        token = CURRENT_DELIVERY.set(delivery)
        try:
            await self._handler(batch)
        except Exception:
            log.exception("handler for %s failed; the batch will be delivered again", self.topics)
            return False
        finally:
            CURRENT_DELIVERY.reset(token)
        if delivery.acknowledged:  # with the handler's own last transaction
            refused = delivery.refused
        else:
            refused = await self._bus.db.run_inline(commit, self.group, self.id, positions)
        if refused:
            log.warning("lost %s before committing; the new owner delivers them again", refused)
        return True

    async def _idle(self) -> None:
        """Wait for a wake-up (a publish here, or one in another process the bus's watcher saw)
        or a rebalance; without a watcher (a bus not started), poll every interval."""
        wait = self._next_rebalance - asyncio.get_running_loop().time()
        if not self._bus.watching:
            wait = min(self._bus.poll_interval_s, wait)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(0.0, wait)):
                await self._wakeup.wait()

    async def _pause(self, seconds: float) -> None:
        """Back off before a redelivery, but not past `close()`."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._closing.wait()

    async def _heartbeats(self) -> None:
        """Renew the leases while a long batch runs; the consume loop rebalances between batches."""
        while True:
            await asyncio.sleep(self._bus.heartbeat_s)
            try:
                await self._bus.db.run_inline(heartbeat, self.group, self.id, self._bus.session_ms)
            except Exception:
                log.warning("embedded bus heartbeat failed for %s", self.group, exc_info=True)


# ---------------------------------------------------------------- the bus ----------------------


class EmbeddedBus:
    """The `Bus` port on a SQLite file (see the module docstring for the model)."""

    def __init__(
        self,
        path: str,
        *,
        partitions: int = 4,
        client_id: str = "cairn",
        poll_interval_s: float = 0.05,
        session_timeout_s: float = 10.0,
        retention_s: float = 3600.0,
        kept_longer: Mapping[str, float] | None = None,
        stable_members: bool = False,
        prune_interval_s: float = 60.0,
        graceful_timeout_s: float = 15.0,
        group_retention_s: float = 7 * 86_400.0,
        synchronous: SqliteSynchronous = DEFAULT_SYNCHRONOUS,
    ) -> None:
        self.path = os.path.realpath(path)
        self.partitions = partitions
        self.client_id = client_id
        self.poll_interval_s = poll_interval_s
        self.session_ms = int(session_timeout_s * 1000)
        self.heartbeat_s = session_timeout_s / 3
        self.graceful_timeout_s = graceful_timeout_s
        self.db = _Database(self.path, synchronous)
        self._retention_ms = int(retention_s * 1000)
        self._kept_longer_ms = {topic: int(s * 1000) for topic, s in (kept_longer or {}).items()}
        self._stable_members = stable_members
        self._joined: dict[str, int] = {}
        """Topics whose messages are kept longer (seconds): the dead letters operators read."""
        self._prune_interval_s = prune_interval_s
        self._group_retention_ms = int(group_retention_s * 1000)
        self._pending: list[tuple[tuple[str, ...], str, BatchHandler, int]] = []
        self._members: list[_Member] = []
        self._housekeeping: asyncio.Task[None] | None = None
        self._watcher: asyncio.Task[None] | None = None
        self._started = False
        self._round_robin = itertools.count()

    def subscribe(
        self, topics: Sequence[str], group: str, handler: BatchHandler, *, max_batch: int = 100
    ) -> None:
        """Register a member of `group`; it joins when the bus starts."""
        if self._started:
            raise RuntimeError("the bus is running: use add_subscription to join a group now")
        self._pending.append((tuple(topics), group, handler, max_batch))

    async def add_subscription(
        self, topics: Sequence[str], group: str, handler: BatchHandler, *, max_batch: int = 100
    ) -> Subscription:
        """Join `group` now; the returned member's `close()` leaves it again."""
        member = _Member(self, topics, group, handler, max_batch)
        await member.start()
        self._members.append(member)
        return member

    def member_id(self, group: str) -> str:
        """A new member's id. With `stable_members` it is the same in every run of this process
        (client id, group, the how-many-th member of that group): a `cairn dev` restarted after a
        kill finds the leases its dead run held are its own and consumes at once, instead of
        waiting a session timeout for them to expire. Only for one process per state file (the
        caller holds a lock on it); otherwise ids are unique per process."""
        index = self._joined.get(group, 0)
        self._joined[group] = index + 1
        if self._stable_members:
            return f"{self.client_id}:{group}:{index}"
        return f"{self.client_id}:{os.getpid()}:{uuid.uuid4().hex[:8]}"

    def forget(self, member: _Member) -> None:
        """Called by a member that closed."""
        if member in self._members:
            self._members.remove(member)

    async def start(self) -> None:
        if self._started:
            return
        self._started = True
        marks = await self.db.run(high_watermarks)
        self._watcher = asyncio.create_task(self._watch(marks), name="cairn-bus watcher")
        pending, self._pending = self._pending, []
        for topics, group, handler, max_batch in pending:
            await self.add_subscription(topics, group, handler, max_batch=max_batch)
        self._housekeeping = asyncio.create_task(self._prune_periodically(), name="cairn-bus prune")

    @property
    def watching(self) -> bool:
        """Whether the watcher wakes this bus's idle members for other processes' publishes."""
        return self._watcher is not None and not self._watcher.done()

    async def _watch(self, marks: dict[tuple[str, int], int]) -> None:
        """Every poll interval, wake the members of the topics whose partitions grew (another
        process published there; this process's own publishes woke them already)."""
        while True:
            await asyncio.sleep(self.poll_interval_s)
            try:
                now = await self.db.run_inline(high_watermarks)
            except Exception:
                log.warning("embedded bus watcher could not read the high watermarks", exc_info=True)
                continue
            grown = {
                topic for (topic, partition), offset in now.items() if marks.get((topic, partition)) != offset
            }
            marks = now
            if grown:
                _LOCAL.wake_topics(self.path, grown)

    async def stop(self) -> None:
        """Members finish their in-flight batches and leave their groups; then the file is closed."""
        self._started = False
        for task in (self._housekeeping, self._watcher):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        self._housekeeping = self._watcher = None
        await asyncio.gather(*(member.close() for member in list(self._members)))
        await self.db.close()

    async def publish(self, messages: Sequence[Outgoing]) -> None:
        """Append all together, in the transaction of the loop turn's other publishes
        (shared/adapters/sqlite_group.py); returns after its COMMIT, then wakes local consumers."""
        if not messages:
            return
        batch = list(messages)
        await self.db.grouped.write(lambda c: append_rows(c, batch, self.partitions, self.partition_for))
        self.wake_consumers({message.topic for message in messages})

    def wake_consumers(self, topics: set[str]) -> None:
        """Wake this process's consumers of `topics`: messages were appended to them (by
        `publish`, or by another connection's transaction on the same file)."""
        _LOCAL.wake_topics(self.path, topics)

    def partition_for(self, key: str | None, partitions: int) -> int:
        """Stable across processes and restarts (crc32, not Python's salted hash)."""
        if key is None:
            return next(self._round_robin) % partitions
        return zlib.crc32(key.encode("utf-8")) % partitions

    async def ensure_topics(self, topics: Sequence[str]) -> None:
        await self.db.run(create_topics, list(dict.fromkeys(topics)), self.partitions)

    async def peek(self, topic: str, limit: int) -> list[Received]:
        return await self.db.run(peek, topic, limit)

    async def prune(self, older_than_ms: int) -> int:
        """Delete messages older than `older_than_ms` that every known group has committed past;
        forget members silent for far longer than a session. Returns how many messages went."""
        now = now_ms()
        forget_after = max(60_000, 10 * self.session_ms)
        longer = {topic: now - max(ms, older_than_ms) for topic, ms in self._kept_longer_ms.items()}
        group_idle_before = now - max(self._group_retention_ms, forget_after)
        return await self.db.run(prune, now - older_than_ms, now - forget_after, longer, group_idle_before)

    async def _prune_periodically(self) -> None:
        while True:
            await asyncio.sleep(self._prune_interval_s)
            try:
                deleted = await self.prune(self._retention_ms)
            except Exception:
                log.warning("embedded bus retention pass failed", exc_info=True)
                continue
            if deleted:
                log.debug("embedded bus pruned %d messages", deleted)
