"""The bus port's contract. Every adapter runs this same suite: Kafka (a real broker, see
deploy/local/up.sh) and the embedded bus (one SQLite file per test under tmp_path, shared by every
bus instance of the test, as by the processes of one `cairn dev` state file)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path

import pytest

from shared.messaging import PoisonMessageError, dead_letter, parse
from shared.models.messages import DECIDER_INBOUND, StartWorkflow
from shared.ports.bus import Bus, Outgoing, Received
from shared.topics import Topics
from tests.waiting import eventually

ADAPTERS = [pytest.param("kafka", marks=pytest.mark.integration), "embedded"]

# Small, so a killed member's partitions are taken over quickly; still many heartbeats long.
EMBEDDED_SESSION_TIMEOUT_S = 1.5


@pytest.fixture(params=ADAPTERS)
def adapter(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def bus_target(adapter: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where the buses of this test meet: Kafka's bootstrap address, or the embedded bus's file."""
    if adapter == "kafka":
        return str(request.getfixturevalue("kafka_bootstrap"))
    return str(tmp_path / "cairn.db")


def open_bus(adapter: str, target: str, client_id: str) -> Bus:
    if adapter == "kafka":
        from shared.adapters.kafka_bus import KafkaBus

        return KafkaBus(target, client_id=client_id, partitions=4)
    from shared.adapters.embedded_bus import EmbeddedBus

    return EmbeddedBus(
        target, client_id=client_id, partitions=4, session_timeout_s=EMBEDDED_SESSION_TIMEOUT_S
    )


@pytest.fixture
def make_bus(adapter: str, bus_target: str) -> Callable[[], Bus]:
    def make() -> Bus:
        return open_bus(adapter, bus_target, "contract")

    return make


@pytest.fixture
async def buses(make_bus: Callable[[], Bus]) -> AsyncIterator[list[Bus]]:
    created: list[Bus] = []
    yield created
    for bus in created:
        await bus.stop()


@pytest.fixture
async def producer(make_bus: Callable[[], Bus], buses: list[Bus], topics: Topics) -> Bus:
    """A bus to publish with; the test topic exists before any consumer subscribes."""
    bus = make_bus()
    buses.append(bus)
    await bus.ensure_topics([topics.task_result])
    return bus


def msg(topic: str, key: str, n: int) -> Outgoing:
    return Outgoing(topic=topic, key=key, value=json.dumps({"key": key, "n": n}).encode())


async def test_per_key_order_and_all_delivered(
    make_bus: Callable[[], Bus], buses: list[Bus], topics: Topics, producer: Bus
) -> None:
    topic = topics.task_result
    seen: list[tuple[str, int]] = []

    async def handler(batch: Sequence[Received]) -> None:
        seen.extend((m.key or "", json.loads(m.value)["n"]) for m in batch)

    consumer = make_bus()
    buses.append(consumer)
    consumer.subscribe([topic], "g-order", handler)
    await consumer.start()
    await producer.publish([msg(topic, f"k{n % 7}", n) for n in range(300)])
    await eventually(lambda: len(seen) >= 300)
    for key in {k for k, _ in seen}:
        numbers = [n for k, n in seen if k == key]
        assert numbers == sorted(numbers), f"order broken for {key}"
    assert sorted(n for _, n in seen) == list(range(300))


async def test_failed_handler_batch_is_redelivered(
    make_bus: Callable[[], Bus], buses: list[Bus], topics: Topics, producer: Bus
) -> None:
    topic = topics.task_result
    attempts: list[int] = []
    done: list[int] = []

    async def handler(batch: Sequence[Received]) -> None:
        numbers = [json.loads(m.value)["n"] for m in batch]
        attempts.extend(numbers)
        if attempts.count(numbers[0]) == 1:
            raise RuntimeError("store down")
        done.extend(numbers)

    consumer = make_bus()
    buses.append(consumer)
    consumer.subscribe([topic], "g-retry", handler)
    await consumer.start()
    await producer.publish([msg(topic, "same", n) for n in range(5)])
    await eventually(lambda: sorted(set(done)) == list(range(5)))
    assert len(attempts) > len(set(attempts)), "nothing was delivered twice"


async def test_batches_handled_before_a_graceful_stop_are_not_delivered_again(
    make_bus: Callable[[], Bus], buses: list[Bus], topics: Topics, producer: Bus
) -> None:
    """The stop comes right after the last batch's handler returned, while the commit of its
    offsets may still be on its way (Kafka commits behind the consume loop, and a stop waits for
    those commits: kafka_offsets): the next member of the group starts after it."""
    topic = topics.task_result
    first: list[int] = []
    all_handled = asyncio.Event()

    async def handler(batch: Sequence[Received]) -> None:
        first.extend(json.loads(m.value)["n"] for m in batch)
        if len(first) >= 50:
            all_handled.set()

    consumer = make_bus()
    consumer.subscribe([topic], "g-stop", handler)
    await consumer.start()
    await producer.publish([msg(topic, f"k{n % 5}", n) for n in range(50)])
    await asyncio.wait_for(all_handled.wait(), 30)
    await consumer.stop()
    await producer.publish([msg(topic, f"k{n % 5}", n) for n in range(50, 60)])
    later: list[int] = []

    async def second_handler(batch: Sequence[Received]) -> None:
        later.extend(json.loads(m.value)["n"] for m in batch)

    successor = make_bus()
    buses.append(successor)
    successor.subscribe([topic], "g-stop", second_handler)
    await successor.start()
    await eventually(lambda: len(later) >= 10)
    await asyncio.sleep(0.5)  # anything redelivered would come with them
    assert sorted(later) == list(range(50, 60))


async def test_two_consumers_of_a_group_share_partitions(
    make_bus: Callable[[], Bus], buses: list[Bus], topics: Topics, producer: Bus
) -> None:
    topic = topics.task_result
    got: dict[str, list[int]] = {"a": [], "b": []}

    def handler_for(name: str):  # type: ignore[no-untyped-def]
        async def handler(batch: Sequence[Received]) -> None:
            got[name].extend(json.loads(m.value)["n"] for m in batch)
            await asyncio.sleep(0.01)

        return handler

    for name in ("a", "b"):
        consumer = make_bus()
        buses.append(consumer)
        consumer.subscribe([topic], "g-share", handler_for(name))
        await consumer.start()
    await asyncio.sleep(3)  # let the group settle with two members
    await producer.publish([msg(topic, f"key-{n}", n) for n in range(200)])
    await eventually(lambda: len(set(got["a"]) | set(got["b"])) == 200)
    assert got["a"] and got["b"], f"one member got everything: a={len(got['a'])} b={len(got['b'])}"
    assert not set(got["a"]) & set(got["b"]), "a message went to both members"


async def test_other_group_gets_everything_too(
    make_bus: Callable[[], Bus], buses: list[Bus], topics: Topics, producer: Bus
) -> None:
    topic = topics.task_result
    await producer.publish([msg(topic, f"k{n}", n) for n in range(20)])
    seen: dict[str, set[int]] = {"x": set(), "y": set()}
    for group in seen:
        consumer = make_bus()
        buses.append(consumer)

        async def handler(batch: Sequence[Received], group: str = group) -> None:
            seen[group].update(json.loads(m.value)["n"] for m in batch)

        consumer.subscribe([topic], f"g-{group}", handler)
        await consumer.start()
    await eventually(lambda: all(len(s) == 20 for s in seen.values()))


CONSUMER_THAT_HANGS = textwrap.dedent(
    """
    import asyncio, sys
    from tests.contract.test_bus_contract import open_bus

    async def main():
        adapter, target, topic = sys.argv[1:4]
        bus = open_bus(adapter, target, "doomed")
        async def handler(batch):
            print("GOT", len(batch), flush=True)
            await asyncio.sleep(3600)
        bus.subscribe([topic], "g-crash", handler)
        await bus.start()
        await asyncio.sleep(3600)

    asyncio.run(main())
    """
)


async def test_messages_of_a_killed_consumer_are_redelivered(
    make_bus: Callable[[], Bus],
    buses: list[Bus],
    topics: Topics,
    adapter: str,
    bus_target: str,
    producer: Bus,
) -> None:
    topic = topics.task_result
    await producer.publish([msg(topic, f"k{n}", n) for n in range(10)])
    doomed = subprocess.Popen(
        [sys.executable, "-c", CONSUMER_THAT_HANGS, adapter, bus_target, topic],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    try:
        line = await asyncio.wait_for(asyncio.to_thread(doomed.stdout.readline), 60)  # type: ignore[union-attr]
        assert line.startswith("GOT")
    finally:
        doomed.send_signal(signal.SIGKILL)
        doomed.wait()
    seen: set[int] = set()

    async def handler(batch: Sequence[Received]) -> None:
        seen.update(json.loads(m.value)["n"] for m in batch)

    survivor = make_bus()
    buses.append(survivor)
    survivor.subscribe([topic], "g-crash", handler)
    await survivor.start()
    await eventually(lambda: seen == set(range(10)), within_s=90)


async def test_subscription_added_while_running_receives_messages(
    make_bus: Callable[[], Bus], buses: list[Bus], topics: Topics, producer: Bus
) -> None:
    topic = topics.task_result
    await producer.publish([msg(topic, f"k{n}", n) for n in range(10)])
    seen: set[int] = set()

    async def handler(batch: Sequence[Received]) -> None:
        seen.update(json.loads(m.value)["n"] for m in batch)

    consumer = make_bus()
    buses.append(consumer)
    await consumer.start()  # running, with no subscription yet
    subscription = await consumer.add_subscription([topic], "g-dynamic", handler)
    await producer.publish([msg(topic, f"k{n}", n) for n in range(10, 20)])
    await eventually(lambda: seen == set(range(20)))
    await subscription.close()


async def test_closed_member_hands_its_partitions_to_the_rest_of_the_group(
    make_bus: Callable[[], Bus], buses: list[Bus], topics: Topics, producer: Bus
) -> None:
    topic = topics.task_result
    leaving: list[int] = []  # seen by the member that closes; it never acknowledges anything
    staying: set[int] = set()

    async def never_acknowledges(batch: Sequence[Received]) -> None:
        leaving.extend(json.loads(m.value)["n"] for m in batch)
        raise RuntimeError("not acknowledged")

    async def acknowledges(batch: Sequence[Received]) -> None:
        staying.update(json.loads(m.value)["n"] for m in batch)

    first, second = make_bus(), make_bus()
    buses.extend([first, second])
    await first.start()
    await second.start()
    subscription = await first.add_subscription([topic], "g-handover", never_acknowledges)
    await second.add_subscription([topic], "g-handover", acknowledges)
    await asyncio.sleep(3)  # let the group settle with two members
    await producer.publish([msg(topic, f"key-{n}", n) for n in range(100)])
    await eventually(lambda: bool(leaving))
    await subscription.close()
    await eventually(lambda: staying == set(range(100)))
    assert set(leaving) <= staying


async def test_poison_goes_to_dead_letter_and_next_message_is_processed(
    make_bus: Callable[[], Bus], buses: list[Bus], topics: Topics
) -> None:
    topic, dlq = topics.workflow_start, topics.dead_letter
    bus = make_bus()
    buses.append(bus)
    await bus.ensure_topics([topic, dlq])
    processed: list[str] = []
    letters: list[dict] = []

    async def handler(batch: Sequence[Received]) -> None:
        dead = []
        for received in batch:
            try:
                processed.append(parse(received, DECIDER_INBOUND).id)
            except PoisonMessageError as error:
                dead.append(dead_letter(received, str(error), dlq))
        await bus.publish(dead)

    async def dlq_handler(batch: Sequence[Received]) -> None:
        letters.extend(json.loads(m.value) for m in batch)

    bus.subscribe([topic], "g-poison", handler)
    bus.subscribe([dlq], "g-dlq", dlq_handler)
    await bus.start()
    good = StartWorkflow(id="good", workflow_id="wf", name="w")
    await bus.publish(
        [
            Outgoing(topic=topic, key="wf", value=b"{not json"),
            Outgoing(topic=topic, key="wf", value=b'{"type": "start_workflow", "id": "x"}'),
            Outgoing(topic=topic, key="wf", value=good.to_bytes()),
        ]
    )
    await eventually(lambda: processed == ["good"] and len(letters) == 2)
    reasons = [letter["reason"] for letter in letters]
    assert reasons[0].startswith("not JSON")
    assert "schema violation" in reasons[1] and "workflowId" in reasons[1]
    assert letters[0]["valueText"] == "{not json" and letters[0]["topic"] == topic


async def test_peek_reads_the_newest_messages_of_a_topic_without_a_group(
    make_bus: Callable[[], Bus], buses: list[Bus], topics: Topics
) -> None:
    """`cairn deadletter ls` reads the dead-letter topic nobody consumes: the newest records of
    every partition, oldest first, and reading them commits nothing."""
    bus = make_bus()
    buses.append(bus)
    await bus.ensure_topics([topics.dead_letter])
    assert await bus.peek(topics.dead_letter, 10) == []
    for n in range(6):  # apart in time: their order in time is their order here
        await bus.publish([msg(topics.dead_letter, f"k{n}", n)])
        await asyncio.sleep(0.005)
    seen = await bus.peek(topics.dead_letter, 4)
    assert [json.loads(r.value)["n"] for r in seen] == [2, 3, 4, 5]
    assert all(r.topic == topics.dead_letter for r in seen)
    again = await bus.peek(topics.dead_letter, 100)
    assert [json.loads(r.value)["n"] for r in again] == [0, 1, 2, 3, 4, 5]


async def test_members_of_a_group_get_the_same_partitions_of_every_topic(
    make_bus: Callable[[], Bus], buses: list[Bus], topics: Topics
) -> None:
    """Issue 12 point 4: one owner per workflow. Three members subscribed to three topics keyed
    alike: once the group has settled, every key's messages on all three topics reach one
    member (Kafka's range assignment; the embedded bus computes the same split)."""
    inbound = [topics.workflow_start, topics.task_result, topics.timer_fired]
    producer = make_bus()
    buses.append(producer)
    await producer.ensure_topics(inbound)
    owners: dict[str, dict[str, set[str]]] = {}  # key -> topic -> members that got it
    settled = asyncio.Event()

    def handler_for(name: str):  # type: ignore[no-untyped-def]
        async def handler(batch: Sequence[Received]) -> None:
            if settled.is_set():
                for m in batch:
                    owners.setdefault(str(m.key), {}).setdefault(m.topic, set()).add(name)

        return handler

    for name in ("a", "b", "c"):
        consumer = make_bus()
        buses.append(consumer)
        consumer.subscribe(inbound, "g-copartition", handler_for(name))
        await consumer.start()
    await asyncio.sleep(6)  # three joins, and the rebalances they cause
    settled.set()
    keys = [f"wf-{n}" for n in range(60)]
    await producer.publish([msg(topic, key, n) for n, key in enumerate(keys) for topic in inbound])
    await eventually(lambda: all(len(owners.get(key, {})) == len(inbound) for key in keys))
    members = {key: set().union(*owners[key].values()) for key in keys}
    split = {key: who for key, who in members.items() if len(who) != 1}
    assert not split, f"keys whose topics reached different members: {dict(list(split.items())[:5])}"
    assert len(set().union(*members.values())) == 3, "the three members did not share the partitions"
