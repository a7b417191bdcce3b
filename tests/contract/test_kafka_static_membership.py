"""Static group membership of the Kafka bus (CAIRN_INSTANCE_ID): a consumer SIGKILLed and
restarted under its instance id resumes without waiting out the session; a closed static member
still leaves its group at once; two processes sharing an id are reported as such."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator, Sequence

import pytest
from aiokafka.admin import AIOKafkaAdminClient

from shared.adapters.kafka_bus import KafkaBus
from shared.adapters.kafka_membership import InstanceIds
from shared.ports.bus import Outgoing, Received
from shared.topics import Topics

pytestmark = pytest.mark.integration

CONSUMER = textwrap.dedent(
    """
    import asyncio, sys
    from shared.adapters.kafka_bus import KafkaBus

    async def main():
        target, topic, group, instance = sys.argv[1:5]
        bus = KafkaBus(target, client_id="static", partitions=4, instance_id=instance or None,
                       session_timeout_ms=30000)
        async def handler(batch):
            print("GOT", len(batch), flush=True)
        bus.subscribe([topic], group, handler)
        await bus.start()
        print("STARTED", flush=True)
        await asyncio.sleep(3600)

    asyncio.run(main())
    """
)


def msg(topic: str, n: int) -> Outgoing:
    return Outgoing(topic=topic, key=f"k{n}", value=json.dumps({"n": n}).encode())


@pytest.fixture
async def producer(kafka_bootstrap: str, topics: Topics) -> AsyncIterator[KafkaBus]:
    bus = KafkaBus(kafka_bootstrap, client_id="producer", partitions=4)
    await bus.ensure_topics([topics.task_result])
    yield bus
    await bus.stop()


def test_instance_ids_are_distinct_in_a_process_and_stable_across_restarts() -> None:
    ids = InstanceIds("decider-0")
    first = [ids.claim("cairn.decider"), ids.claim("cairn.decider"), ids.claim("cairn.timer")]
    assert first == ["decider-0.cairn.decider.0", "decider-0.cairn.decider.1", "decider-0.cairn.timer.0"]
    ids.release("cairn.decider", "decider-0.cairn.decider.0")
    assert ids.claim("cairn.decider") == "decider-0.cairn.decider.0"  # a reopened group reuses its id
    again = InstanceIds("decider-0")
    assert [again.claim("cairn.decider"), again.claim("cairn.decider"), again.claim("cairn.timer")] == first


async def _first_delivery_after_restart(
    kafka_bootstrap: str, topic: str, producer: KafkaBus, instance: str, group: str
) -> float:
    """Start a consumer process, SIGKILL it once it consumes, publish, start it again: seconds from
    the second spawn to its first delivery."""
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    argv = [sys.executable, "-c", CONSUMER, kafka_bootstrap, topic, group, instance]

    async def line(process: subprocess.Popen[str], prefix: str) -> None:
        while True:
            got = await asyncio.wait_for(asyncio.to_thread(process.stdout.readline), 60)  # type: ignore[union-attr]
            assert got, f"consumer exited ({process.poll()})"
            if got.startswith(prefix):
                return

    first = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env)
    try:
        await producer.publish([msg(topic, n) for n in range(8)])
        await line(first, "GOT")
    finally:
        first.kill()
        first.wait()
    await producer.publish([msg(topic, n) for n in range(8, 16)])
    spawned = time.monotonic()
    second = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env)
    try:
        await line(second, "GOT")
        return time.monotonic() - spawned
    finally:
        second.kill()
        second.wait()


async def test_a_static_member_killed_and_restarted_resumes_without_waiting_out_its_session(
    kafka_bootstrap: str, topics: Topics, producer: KafkaBus
) -> None:
    """The session is 30 s: a dynamic member's restart waits for the dead member to time out (or
    the rebalance to), a static one is handed its partitions back as it joins."""
    static = await _first_delivery_after_restart(
        kafka_bootstrap, topics.task_result, producer, "replica-a", "g-static"
    )
    dynamic = await _first_delivery_after_restart(
        kafka_bootstrap, topics.task_result, producer, "", "g-dynamic"
    )
    print(f"\nfirst delivery after SIGKILL + restart: static {static:.2f} s, dynamic {dynamic:.2f} s")
    assert static < 10


async def _member_clients(kafka_bootstrap: str, group: str) -> list[str]:
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        described = await admin.describe_consumer_groups([group])
    finally:
        await admin.close()
    return [member[1] for member in described[0].groups[0][5]]  # (member_id, client_id, ...)


async def test_a_closed_static_member_leaves_its_group_at_once(
    kafka_bootstrap: str, topics: Topics, producer: KafkaBus
) -> None:
    """aiokafka sends no LeaveGroup for a static member; the bus does (LeaveGroup v3), so a
    closed hand-out group or a stopped replica does not hold partitions for a session timeout."""
    topic = topics.task_result
    seen: set[int] = set()

    async def handler(batch: Sequence[Received]) -> None:
        seen.update(json.loads(m.value)["n"] for m in batch)

    leaving = KafkaBus(kafka_bootstrap, client_id="leaving", instance_id="r1", session_timeout_ms=120_000)
    staying = KafkaBus(kafka_bootstrap, client_id="staying", instance_id="r2", session_timeout_ms=120_000)
    await leaving.start()
    await staying.start()
    try:
        subscription = await leaving.add_subscription([topic], "g-leave", handler)
        await staying.add_subscription([topic], "g-leave", handler)
        await producer.publish([msg(topic, n) for n in range(20)])
        for _ in range(300):
            if seen == set(range(20)) and len(await _member_clients(kafka_bootstrap, "g-leave")) == 2:
                break
            await asyncio.sleep(0.1)
        assert sorted(await _member_clients(kafka_bootstrap, "g-leave")) == ["leaving", "staying"]
        await subscription.close()
        assert await _member_clients(kafka_bootstrap, "g-leave") == ["staying"]
        await leaving.stop()
        await staying.stop()
        assert await _member_clients(kafka_bootstrap, "g-leave") == []
    finally:
        await leaving.stop()
        await staying.stop()


async def test_two_processes_sharing_an_instance_id_are_reported(
    kafka_bootstrap: str, topics: Topics, producer: KafkaBus, caplog: pytest.LogCaptureFixture
) -> None:
    async def handler(batch: Sequence[Received]) -> None:
        pass

    one = KafkaBus(kafka_bootstrap, client_id="one", instance_id="twin", session_timeout_ms=6000)
    two = KafkaBus(kafka_bootstrap, client_id="two", instance_id="twin", session_timeout_ms=6000)
    caplog.set_level(logging.WARNING)
    try:
        one.subscribe([topics.task_result], "g-twins", handler)
        await one.start()
        await asyncio.sleep(2)
        two.subscribe([topics.task_result], "g-twins", handler)
        await two.start()
        for _ in range(300):
            if "another process is using the same instance id (CAIRN_INSTANCE_ID=twin" in caplog.text:
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError("no fencing error logged:\n" + caplog.text[-3000:])
    finally:
        await one.stop()
        await two.stop()
