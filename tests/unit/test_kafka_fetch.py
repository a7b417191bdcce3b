"""The Kafka bus's fetch (shared/adapters/kafka_fetch.py): records as soon as there are any, no
sleep after a wait that ran its course (FastStream's own batch fetch sleeps `batch_timeout_ms`
then, and a record arriving meanwhile waited for it), and an early empty answer waited out.
The consumer here is a stand-in for aiokafka's `getmany`; the bus contract suite runs the same
fetch on a real broker."""

from __future__ import annotations

import asyncio
import types
from typing import Any

import pytest

from shared.adapters import kafka_fetch
from shared.adapters.kafka_bus import KafkaBus


class Consumer:
    """`getmany` that answers `records` after `delay_s`."""

    def __init__(self, records: dict[str, list[int]], delay_s: float = 0.0) -> None:
        self.records = records
        self.delay_s = delay_s
        self.calls: list[tuple[int, int | None]] = []

    async def getmany(self, timeout_ms: int, max_records: int | None) -> dict[str, list[int]]:
        self.calls.append((timeout_ms, max_records))
        await asyncio.sleep(self.delay_s)
        return self.records


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The sleeps kafka_fetch itself takes (not the consumer's)."""
    taken: list[float] = []

    async def sleep(seconds: float) -> None:
        taken.append(seconds)

    monkeypatch.setattr(
        kafka_fetch, "asyncio", types.SimpleNamespace(get_running_loop=asyncio.get_running_loop, sleep=sleep)
    )
    return taken


async def test_records_come_back_at_once(sleeps: list[float]) -> None:
    consumer = Consumer({"p0": [1, 2], "p1": [3]})
    assert await kafka_fetch.fetch_batch(consumer, 100, 50) == (1, 2, 3)
    assert consumer.calls == [(100, 50)] and sleeps == []


async def test_no_sleep_after_a_wait_that_ran_its_course(sleeps: list[float]) -> None:
    consumer = Consumer({}, delay_s=0.03)
    assert await kafka_fetch.fetch_batch(consumer, 30, 50) == ()
    assert sleeps == []


async def test_an_early_empty_answer_is_waited_out(sleeps: list[float]) -> None:
    consumer = Consumer({})
    assert await kafka_fetch.fetch_batch(consumer, 100, 50) == ()
    assert len(sleeps) == 1 and 0.09 < sleeps[0] <= 0.1


async def test_the_bus_subscribers_fetch_this_way(
    sleeps: list[float], monkeypatch: pytest.MonkeyPatch
) -> None:
    from faststream.kafka.subscriber import usecase

    async def faststreams_sleep(seconds: float) -> None:  # what FastStream's own fetch would take
        sleeps.append(seconds)

    monkeypatch.setattr(usecase, "anyio", types.SimpleNamespace(sleep=faststreams_sleep))

    async def handler(batch: Any) -> None:
        return None

    bus = KafkaBus("127.0.0.1:1")
    subscriber, _, _ = bus._register(["t"], "g", handler, 25, persistent=True)
    consumer = Consumer({}, delay_s=0.1)  # the whole wait, empty
    assert await subscriber.get_msg(consumer) == ()  # what FastStream's consume loop calls
    assert consumer.calls == [(100, 25)] and sleeps == []
