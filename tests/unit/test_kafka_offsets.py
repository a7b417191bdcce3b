"""The Kafka bus's offset commits behind the consume loop (shared/adapters/kafka_offsets.py):
what is committed is each handled batch's own records, in batch order, and a closing subscriber
waits for every commit. The consumer here only records calls (aiokafka's `commit(offsets)`); the
bus contract suite runs the same path on a real broker
(tests/contract/test_bus_contract.py::test_batches_handled_before_a_graceful_stop_are_not_delivered_again)."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiokafka import TopicPartition

from shared.adapters.kafka_offsets import OffsetCommits, next_offsets


@dataclass(frozen=True)
class Record:
    topic: str
    partition: int
    offset: int


@dataclass
class RecordingConsumer:
    """aiokafka's consumer as far as committing goes; each commit can be held until released."""

    committed: list[dict[TopicPartition, int]] = field(default_factory=list)
    hold: dict[int, asyncio.Event] = field(default_factory=dict)  # call number -> release
    fail: set[int] = field(default_factory=set)
    calls: int = 0

    async def commit(self, offsets: dict[TopicPartition, Any]) -> None:
        call = self.calls
        self.calls += 1
        if call in self.hold:
            await self.hold[call].wait()
        if call in self.fail:
            raise RuntimeError("CommitFailedError: the group rebalanced")
        self.committed.append(dict(offsets))


def test_the_next_offset_of_each_partition_of_the_batch() -> None:
    records = [Record("a", 0, 7), Record("a", 1, 3), Record("a", 0, 9), Record("b", 0, 0)]
    assert next_offsets(records) == {
        TopicPartition("a", 0): 10,
        TopicPartition("a", 1): 4,
        TopicPartition("b", 0): 1,
    }


async def test_commits_run_behind_the_caller_one_at_a_time_the_rest_merged() -> None:
    consumer = RecordingConsumer(hold={0: asyncio.Event()})
    commits = OffsetCommits(asyncio.Event())
    await commits.commit(consumer, [Record("t", 0, 0)])  # returns with its commit still held
    await asyncio.sleep(0)  # the commit task starts: its call is on its way
    await commits.commit(consumer, [Record("t", 0, 1), Record("t", 1, 5)])
    await commits.commit(consumer, [Record("t", 0, 2)])
    await asyncio.sleep(0.01)
    assert consumer.committed == [] and consumer.calls == 1  # the others wait, merged
    consumer.hold[0].set()
    await commits.drain()
    assert consumer.committed == [
        {TopicPartition("t", 0): 1},
        {TopicPartition("t", 0): 3, TopicPartition("t", 1): 6},
    ]


async def test_a_closing_subscriber_commits_in_place_after_the_one_on_its_way() -> None:
    consumer = RecordingConsumer(hold={0: asyncio.Event()})
    closing = asyncio.Event()
    commits = OffsetCommits(closing)
    await commits.commit(consumer, [Record("t", 0, 0)])
    closing.set()
    last = asyncio.create_task(commits.commit(consumer, [Record("t", 0, 1)]))
    await asyncio.sleep(0.01)
    assert not last.done()  # waits for the held one
    consumer.hold[0].set()
    await last  # returns only once its own offsets are committed
    assert consumer.committed[-1] == {TopicPartition("t", 0): 2}


async def test_a_refused_commit_is_logged_and_the_next_ones_still_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    consumer = RecordingConsumer(fail={0})
    commits = OffsetCommits(asyncio.Event())
    with caplog.at_level(logging.WARNING, "shared.adapters.kafka_offsets"):
        await commits.commit(consumer, [Record("t", 2, 4)])
        await commits.drain()
        await commits.commit(consumer, [Record("t", 2, 5)])
        await commits.drain()
    assert consumer.committed == [{TopicPartition("t", 2): 6}]
    assert "could not commit offsets {'t[2]': 5}" in caplog.text


async def test_a_stop_gives_up_on_a_coordinator_that_does_not_answer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    consumer = RecordingConsumer(hold={0: asyncio.Event()})  # never released
    commits = OffsetCommits(asyncio.Event(), drain_timeout_s=0.05)
    await commits.commit(consumer, [Record("t", 0, 0)])
    with caplog.at_level(logging.WARNING, "shared.adapters.kafka_offsets"):
        await asyncio.wait_for(commits.drain(), 1)
    assert "still unanswered" in caplog.text
    consumer.hold[0].set()


async def test_a_cancelled_drain_leaves_the_commits_working() -> None:
    consumer = RecordingConsumer(hold={0: asyncio.Event()})
    commits = OffsetCommits(asyncio.Event())
    await commits.commit(consumer, [Record("t", 0, 0)])
    drainer = asyncio.create_task(commits.drain())
    await asyncio.sleep(0.01)
    drainer.cancel()
    consumer.hold[0].set()
    await asyncio.sleep(0.01)
    await commits.commit(consumer, [Record("t", 0, 1)])
    await commits.drain()
    assert consumer.committed == [{TopicPartition("t", 0): 1}, {TopicPartition("t", 0): 2}]
