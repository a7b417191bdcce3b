"""What only the embedded bus promises beyond the shared bus contract: its SQLite file is the whole
truth, so acknowledged work survives a SIGKILL and is not redone, leaving a group hands partitions
over at once, and retention never deletes what a group still has to read."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path

import pytest

from shared.adapters.embedded_bus import EmbeddedBus
from shared.ports.bus import Outgoing, Received
from tests.waiting import eventually

TOPIC = "t.work"


@pytest.fixture
def db_path(tmp_path: Path) -> str:
    return str(tmp_path / "cairn.db")


@pytest.fixture
async def buses() -> AsyncIterator[list[EmbeddedBus]]:
    created: list[EmbeddedBus] = []
    yield created
    for bus in created:
        await bus.stop()


@pytest.fixture
def make_bus(db_path: str, buses: list[EmbeddedBus]) -> Callable[..., EmbeddedBus]:
    def make(client_id: str = "test", session_timeout_s: float = 1.5) -> EmbeddedBus:
        bus = EmbeddedBus(db_path, client_id=client_id, partitions=4, session_timeout_s=session_timeout_s)
        buses.append(bus)
        return bus

    return make


def msg(key: str, n: int, topic: str = TOPIC) -> Outgoing:
    return Outgoing(topic=topic, key=key, value=json.dumps({"n": n}).encode())


def numbers(batch: Sequence[Received]) -> list[int]:
    return [json.loads(m.value)["n"] for m in batch]


def query(db_path: str, sql: str, *args: object) -> list[tuple]:
    """Read the bus's tables the way another process would."""
    conn = sqlite3.connect(db_path)
    try:
        return conn.execute(sql, args).fetchall()
    finally:
        conn.close()


def committed(db_path: str, group: str) -> int:
    rows = query(db_path, "SELECT COALESCE(SUM(committed), 0) FROM bus_offsets WHERE grp = ?", group)
    return int(rows[0][0])


PUBLISHES_ACKS_ONE_BATCH_THEN_HANGS = textwrap.dedent(
    """
    import asyncio, json, sys
    from shared.adapters.embedded_bus import EmbeddedBus
    from shared.ports.bus import Outgoing

    async def main():
        path, topic = sys.argv[1:3]
        bus = EmbeddedBus(path, client_id="doomed", session_timeout_s=1.5)
        await bus.publish(
            [Outgoing(topic=topic, key="one-key", value=json.dumps({"n": n}).encode()) for n in range(10)]
        )
        print("PUBLISHED", flush=True)
        batches = 0

        async def handler(batch):
            nonlocal batches
            batches += 1
            print("BATCH", batches, *[json.loads(m.value)["n"] for m in batch], flush=True)
            if batches > 1:  # the first batch was acknowledged before this one was fetched
                await asyncio.sleep(3600)

        bus.subscribe([topic], "g-restart", handler, max_batch=5)
        await bus.start()
        await asyncio.sleep(3600)

    asyncio.run(main())
    """
)


async def test_acknowledged_work_survives_sigkill_and_only_unacknowledged_is_redelivered(
    db_path: str, make_bus: Callable[..., EmbeddedBus]
) -> None:
    doomed = subprocess.Popen(
        [sys.executable, "-c", PUBLISHES_ACKS_ONE_BATCH_THEN_HANGS, db_path, TOPIC],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    lines: list[str] = []
    try:
        while not (lines and lines[-1].startswith("BATCH 2")):
            line = await asyncio.wait_for(asyncio.to_thread(doomed.stdout.readline), 60)  # type: ignore[union-attr]
            assert line, f"the consumer process ended early: {lines}"
            lines.append(line.strip())
    finally:
        doomed.send_signal(signal.SIGKILL)
        doomed.wait()
    assert lines[0] == "PUBLISHED"
    acknowledged = [int(n) for n in lines[1].split()[2:]]
    unacknowledged = [int(n) for n in lines[2].split()[2:]]
    assert acknowledged == [0, 1, 2, 3, 4] and unacknowledged == [5, 6, 7, 8, 9]

    seen: list[int] = []

    async def handler(batch: Sequence[Received]) -> None:
        seen.extend(numbers(batch))

    restarted = make_bus("restarted")
    restarted.subscribe([TOPIC], "g-restart", handler)
    await restarted.start()
    await eventually(lambda: len(seen) >= len(unacknowledged))
    # One key, one partition, in order: a redelivered acknowledged message would have come first.
    assert seen == unacknowledged


async def test_close_gives_the_leases_back_at_once(
    db_path: str, make_bus: Callable[..., EmbeddedBus]
) -> None:
    # A session far longer than the test may wait: only released leases can be taken over in time.
    leaving, staying = make_bus("leaving", session_timeout_s=120), make_bus("staying", session_timeout_s=120)
    seen: set[int] = set()

    async def handler(batch: Sequence[Received]) -> None:
        seen.update(numbers(batch))

    async def refuses(batch: Sequence[Received]) -> None:
        raise RuntimeError("never acknowledged")

    await leaving.start()
    subscription = await leaving.add_subscription([TOPIC], "g-close", refuses)
    await staying.start()
    await staying.add_subscription([TOPIC], "g-close", handler)

    def owners() -> list[str]:
        return sorted(owner.split(":")[0] for (owner,) in query(db_path, "SELECT owner FROM bus_leases"))

    await eventually(lambda: owners() == ["leaving", "leaving", "staying", "staying"])

    await staying.publish([msg(f"k{n}", n) for n in range(40)])
    await subscription.close()
    assert not query(db_path, "SELECT owner FROM bus_leases WHERE owner LIKE 'leaving:%'")
    await eventually(lambda: seen == set(range(40)), within_s=30)


async def test_members_joining_and_leaving_never_share_a_partition(
    make_bus: Callable[..., EmbeddedBus],
) -> None:
    delivered: list[tuple[str, int]] = []
    busy: dict[tuple[str, int], str] = {}  # partition -> member handling it right now
    overlaps: list[str] = []

    def handler_for(name: str) -> Callable[[Sequence[Received]], object]:
        async def handler(batch: Sequence[Received]) -> None:
            mine = {(m.topic, m.partition) for m in batch}
            for partition in mine:
                if busy.setdefault(partition, name) != name:
                    overlaps.append(f"{name} and {busy[partition]} both hold {partition}")
            delivered.extend((name, n) for n in numbers(batch))
            await asyncio.sleep(0.005)
            for partition in mine:
                if busy.get(partition) == name:
                    del busy[partition]

        return handler

    producer = make_bus("producer")
    members = {name: make_bus(name) for name in ("a", "b", "c")}
    for bus in members.values():
        await bus.start()
    subscriptions = {
        "a": await members["a"].add_subscription([TOPIC], "g-churn", handler_for("a"), max_batch=7)
    }
    for chunk in range(10):
        await producer.publish([msg(f"k{n}", n) for n in range(chunk * 50, chunk * 50 + 50)])
        if chunk == 2:
            subscriptions["b"] = await members["b"].add_subscription(
                [TOPIC], "g-churn", handler_for("b"), max_batch=7
            )
        if chunk == 4:
            subscriptions["c"] = await members["c"].add_subscription(
                [TOPIC], "g-churn", handler_for("c"), max_batch=7
            )
        if chunk == 6:
            await subscriptions.pop("a").close()
        await asyncio.sleep(0.2)
    await eventually(lambda: {n for _, n in delivered} == set(range(500)))
    assert not overlaps
    counts: dict[int, int] = {}
    for _, n in delivered:
        counts[n] = counts.get(n, 0) + 1
    assert not [n for n, times in counts.items() if times > 1], "a message was delivered twice"


async def test_prune_keeps_what_a_known_group_has_not_read_and_offsets_never_restart(
    db_path: str, make_bus: Callable[..., EmbeddedBus]
) -> None:
    bus = make_bus()
    read: list[tuple[str, int]] = []

    async def reader(batch: Sequence[Received]) -> None:
        read.extend((m.topic, n) for m, n in zip(batch, numbers(batch), strict=True))

    async def lagging(batch: Sequence[Received]) -> None:
        raise RuntimeError("this group never gets anywhere")

    other = "t.other"
    bus.subscribe([TOPIC, other], "g-reader", reader)
    bus.subscribe([TOPIC], "g-lagging", lagging)
    await bus.start()
    await bus.publish([msg(f"k{n}", n) for n in range(10)] + [msg(f"k{n}", n, other) for n in range(10)])
    await eventually(lambda: committed(db_path, "g-reader") == 20)

    assert await bus.prune(older_than_ms=3_600_000) == 0, "pruned messages younger than retention"
    assert await bus.prune(older_than_ms=0) == 10, "only the topic every group has read is pruned"
    remaining = query(db_path, "SELECT topic, COUNT(*) FROM bus_messages GROUP BY topic")
    assert remaining == [(TOPIC, 10)]

    await bus.publish([msg("k0", 10, other)])
    offsets = query(db_path, "SELECT offset FROM bus_messages WHERE topic = ?", other)
    assert offsets[0][0] > 0, "an offset was reused after pruning"
    await eventually(lambda: (other, 10) in read)
    assert sorted(n for topic, n in read if topic == other) == list(range(11))


MEMBER_IN_ANOTHER_PROCESS = textwrap.dedent(
    """
    import asyncio, json, sys
    from shared.adapters.embedded_bus import EmbeddedBus

    async def main():
        path, topic = sys.argv[1:3]
        bus = EmbeddedBus(path, client_id="other-process", session_timeout_s=1.5)
        async def handler(batch):
            print("GOT", *[json.loads(m.value)["n"] for m in batch], flush=True)
            await asyncio.sleep(0.005)
        bus.subscribe([topic], "g-processes", handler, max_batch=10)
        await bus.start()
        print("JOINED", flush=True)
        await asyncio.sleep(3600)

    asyncio.run(main())
    """
)


async def test_members_in_two_processes_share_the_partitions_without_overlap(
    db_path: str, make_bus: Callable[..., EmbeddedBus]
) -> None:
    other = subprocess.Popen(
        [sys.executable, "-c", MEMBER_IN_ANOTHER_PROCESS, db_path, TOPIC],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    theirs: list[int] = []

    def read_their_output() -> None:
        for line in other.stdout:  # type: ignore[union-attr]
            if line.startswith("GOT"):
                theirs.extend(int(n) for n in line.split()[1:])

    try:
        line = await asyncio.wait_for(asyncio.to_thread(other.stdout.readline), 60)  # type: ignore[union-attr]
        assert line.startswith("JOINED")
        reader = asyncio.create_task(asyncio.to_thread(read_their_output))
        ours: list[int] = []

        async def handler(batch: Sequence[Received]) -> None:
            ours.extend(numbers(batch))
            await asyncio.sleep(0.005)

        bus = make_bus("this-process")
        bus.subscribe([TOPIC], "g-processes", handler, max_batch=10)
        await bus.start()
        leases = "SELECT owner FROM bus_leases WHERE grp = 'g-processes'"
        await eventually(lambda: len({owner for (owner,) in query(db_path, leases)}) == 2)
        await bus.publish([msg(f"k{n}", n) for n in range(300)])
        await eventually(lambda: set(ours) | set(theirs) == set(range(300)))
        await asyncio.sleep(0.5)  # a duplicate would show up now
    finally:
        other.send_signal(signal.SIGKILL)
        other.wait()
    await reader
    assert ours and theirs, f"one process got everything: here {len(ours)}, there {len(theirs)}"
    assert len(ours) + len(theirs) == 300, "a message was delivered to both processes"


async def test_a_group_nobody_consumed_for_its_retention_stops_holding_messages_back(
    db_path: str, make_bus: Callable[..., EmbeddedBus]
) -> None:
    """Issue 12 point 6: a group that once joined and is gone (a worker for a task type retired,
    an api that polled once) kept every message of its topics forever. Past the group retention
    it is forgotten, as Kafka's offsets.retention forgets a group; a live group never is."""
    bus = make_bus()
    read: list[int] = []

    async def reader(batch: Sequence[Received]) -> None:
        read.extend(numbers(batch))

    async def never_commits(batch: Sequence[Received]) -> None:
        raise RuntimeError("this group never gets anywhere")

    bus.subscribe([TOPIC], "g-live", reader)
    await bus.start()
    gone = await bus.add_subscription([TOPIC], "g-gone", never_commits)
    await bus.publish([msg(f"k{n}", n) for n in range(10)])
    await eventually(lambda: committed(db_path, "g-live") == 10)
    await gone.close()

    assert await bus.prune(older_than_ms=0) == 0, "a group inside its retention holds messages back"
    conn = sqlite3.connect(db_path)
    try:  # eight days pass for the group that is gone; the live one keeps heartbeating
        conn.execute("UPDATE bus_group_seen SET seen_at = seen_at - 8 * 86400000 WHERE grp = 'g-gone'")
        conn.commit()
    finally:
        conn.close()
    assert await bus.prune(older_than_ms=0) == 10
    assert query(db_path, "SELECT DISTINCT grp FROM bus_groups") == [("g-live",)]
    assert query(db_path, "SELECT COUNT(*) FROM bus_offsets WHERE grp = 'g-gone'") == [(0,)]
    await bus.publish([msg("k0", 10)])
    await eventually(lambda: 10 in read)
    assert sorted(read) == list(range(11)), "the live group lost nothing"
