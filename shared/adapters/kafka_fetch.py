"""A batch subscriber's fetch, without FastStream's sleep after an empty one.

FastStream's Kafka batch subscriber waits up to `batch_timeout_ms` for records and, when none
came, sleeps another `batch_timeout_ms` before fetching again. A record that arrives during that
sleep waits for its end: after any idle moment, a worker's next task, a decider's next start or
result and a listener's next event each waited 10 ms on average (20 ms at worst), on every hop,
so a workflow whose steps follow each other at a slower pace than the loop paid it at each step.
aiokafka's `getmany` already returns as soon as records arrive, so the sleep buys nothing when
the wait ran its course. It is kept only for a fetch that came back empty early (a consumer with
no partitions to fetch need not wait), where it keeps the loop from spinning.
"""

from __future__ import annotations

import asyncio
from itertools import chain
from typing import Any

from faststream.kafka.subscriber.usecase import BatchSubscriber


def fetch_without_idle_sleep(subscriber: BatchSubscriber) -> BatchSubscriber:
    """`subscriber`, whose consume loop now fetches with `fetch_batch` (FastStream's loop calls
    the instance's `get_msg`)."""

    async def get_msg(consumer: Any) -> tuple[Any, ...]:
        return await fetch_batch(consumer, subscriber.batch_timeout_ms, subscriber.max_records)

    subscriber.get_msg = get_msg  # type: ignore[method-assign]
    return subscriber


async def fetch_batch(consumer: Any, wait_ms: int, max_records: int | None) -> tuple[Any, ...]:
    """The next records of `consumer`, returned as soon as there are any; after `wait_ms`
    without any, none (and never sooner: an early empty answer is waited out)."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    batches = await consumer.getmany(timeout_ms=wait_ms, max_records=max_records)
    if batches:
        return tuple(chain.from_iterable(batches.values()))
    rest = wait_ms / 1000 - (loop.time() - started)
    if rest > 0:
        await asyncio.sleep(rest)
    return ()
