"""Offsets of handled batches, committed behind a subscriber's consume loop.

Every batch a subscriber handles ends in an offset commit, a round trip to the group coordinator
(about 1 ms on a local broker, 6 ms with Kafka 4's default coordinator linger). Awaited in the
consume loop, as FastStream's `ack` does it, that round trip sits between a batch and the next
fetch on every step of a workflow: a decider's next task result, a worker's next task wait for it.
Here the commit runs in a task while the loop fetches on; the guarantee is unchanged, because
what is committed is the explicit next offset of each partition's records in a batch whose
handler has returned (its effects durable), never the consumer's position, which may already be
past records fetched and not yet handled. The commits of one subscriber run one after the other,
in batch order. A commit that fails (a rebalance) is logged; the new owner is then handed the
batch again, as after a crash before the commit, which every handler already tolerates.

Once a subscriber is closing, a batch's commit is awaited in place, after those still running,
so a graceful stop or close leaves nothing uncommitted behind (`drain`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any

from aiokafka import TopicPartition

log = logging.getLogger(__name__)


def next_offsets(records: Iterable[Any]) -> dict[TopicPartition, int]:
    """For each partition of `records`, the offset after its last record: what a commit saying
    "all of these are handled" stores."""
    offsets: dict[TopicPartition, int] = {}
    for record in records:
        partition = TopicPartition(record.topic, record.partition)
        offsets[partition] = max(offsets.get(partition, 0), record.offset + 1)
    return offsets


class OffsetCommits:
    """One subscriber's offset commits, in order, in the background until `closing` is set."""

    def __init__(self, closing: asyncio.Event) -> None:
        self._closing = closing
        self._last: asyncio.Task[None] | None = None

    async def commit(self, consumer: Any, records: Iterable[Any]) -> None:
        """Commit `records` (a handled batch): started and left running, or, while closing,
        awaited with every commit before it."""
        offsets = next_offsets(records)
        if not offsets:
            return
        if self._closing.is_set():
            await self.drain()
            await _commit(consumer, offsets)
            return
        self._last = asyncio.create_task(_commit_after(self._last, consumer, offsets))

    async def drain(self) -> None:
        """Wait for every commit started so far."""
        if self._last is not None:
            await self._last


async def _commit_after(
    previous: asyncio.Task[None] | None, consumer: Any, offsets: dict[TopicPartition, int]
) -> None:
    if previous is not None:
        await previous  # never raises: _commit logs what fails
    await _commit(consumer, offsets)


async def _commit(consumer: Any, offsets: dict[TopicPartition, int]) -> None:
    try:
        await consumer.commit(offsets)
    except Exception:
        log.warning(
            "could not commit offsets %s (a rebalance?); the batch may be delivered again",
            {f"{tp.topic}[{tp.partition}]": offset for tp, offset in offsets.items()},
            exc_info=True,
        )
