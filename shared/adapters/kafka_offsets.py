"""Offsets of handled batches, committed behind a subscriber's consume loop.

Every batch a subscriber handles ends in an offset commit, a round trip to the group coordinator
(about 1 ms on a local broker, 6 ms with Kafka 4's default coordinator linger). Awaited in the
consume loop, as FastStream's `ack` does it, that round trip sits between a batch and the next
fetch on every step of a workflow: a decider's next task result, a worker's next task wait for it.
Here the commit runs in a task while the loop fetches on; the guarantee is unchanged, because
what is committed is the explicit next offset of each partition's records in batches whose
handler has returned (their effects durable), never the consumer's position, which may already
be past records fetched and not yet handled.

At most one commit per subscriber is on its way; what batches finish meanwhile is merged (the
highest offset per partition) and committed next, so a slow coordinator slows the commits, not
the memory or the number of tasks. A commit that fails (a rebalance) is logged; the batch is then
delivered again, as after a crash before the commit, which every handler already tolerates.

Once a subscriber is closing, a batch's commit is awaited in place, after the one on its way, so
a graceful stop or close leaves nothing uncommitted behind (`drain`), within a bound: a stop
never hangs on a coordinator that does not answer.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any

from aiokafka import TopicPartition

log = logging.getLogger(__name__)

DRAIN_TIMEOUT_S = 10.0
"""The longest a stop or close waits for offset commits (FastStream then has its own 15 s)."""


def next_offsets(records: Iterable[Any]) -> dict[TopicPartition, int]:
    """For each partition of `records`, the offset after its last record: what a commit saying
    "all of these are handled" stores."""
    offsets: dict[TopicPartition, int] = {}
    for record in records:
        partition = TopicPartition(record.topic, record.partition)
        offsets[partition] = max(offsets.get(partition, 0), record.offset + 1)
    return offsets


class OffsetCommits:
    """One subscriber's offset commits: one on its way at a time, the rest merged behind it, in
    the background until its `closing` event (set when the subscriber stops) is set."""

    def __init__(self, closing: asyncio.Event, drain_timeout_s: float = DRAIN_TIMEOUT_S) -> None:
        self.closing = closing
        self._drain_timeout_s = drain_timeout_s
        self._pending: dict[TopicPartition, int] = {}
        self._consumer: Any = None
        self._running: asyncio.Task[None] | None = None

    async def commit(self, consumer: Any, records: Iterable[Any]) -> None:
        """Commit `records` (a handled batch): left to the background, or, while closing,
        awaited with everything before it."""
        for partition, offset in next_offsets(records).items():
            self._pending[partition] = max(self._pending.get(partition, 0), offset)
        self._consumer = consumer
        if self.closing.is_set():
            await self.drain()
        elif self._pending and (self._running is None or self._running.done()):
            self._running = asyncio.create_task(self._commit_pending())

    async def _commit_pending(self) -> None:
        while self._pending:  # batches handled during a commit go in the next one
            offsets, self._pending = self._pending, {}
            await _commit(self._consumer, offsets)

    async def drain(self) -> None:
        """Commit everything handled so far; give up (logged) after the drain timeout. Being
        cancelled while waiting leaves the commit on its way running."""
        if self._running is not None and not self._running.done():
            done, _ = await asyncio.wait({self._running}, timeout=self._drain_timeout_s)
            if not done:
                log.warning(
                    "offset commits still unanswered after %.0f s; batches handled since the last "
                    "one may be delivered again",
                    self._drain_timeout_s,
                )
                return
        if self._pending and self._consumer is not None:
            offsets, self._pending = self._pending, {}
            try:
                async with asyncio.timeout(self._drain_timeout_s):
                    await _commit(self._consumer, offsets)
            except TimeoutError:
                log.warning("gave up committing offsets %s; they may be delivered again", _named(offsets))


def _named(offsets: dict[TopicPartition, int]) -> dict[str, int]:
    return {f"{tp.topic}[{tp.partition}]": offset for tp, offset in offsets.items()}


async def _commit(consumer: Any, offsets: dict[TopicPartition, int]) -> None:
    try:
        await consumer.commit(offsets)
    except Exception:
        log.warning(
            "could not commit offsets %s (a rebalance?); the batch may be delivered again",
            _named(offsets),
            exc_info=True,
        )
