"""The fault plan and the faulty bus themselves: a property test that injects nothing, or injects
something other than what it claims, would prove nothing."""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

from shared.adapters.embedded_bus import EmbeddedBus
from shared.adapters.faults import Fault, FaultPlan, FaultRates, FaultyBus, ScheduledFault, message_id_of
from shared.ports.bus import Outgoing, Received

TOPIC = "cairn.task.result"


def message(n: int, topic: str = TOPIC, key: str = "k") -> Outgoing:
    return Outgoing(topic=topic, value=json.dumps({"id": f"m{n}", "n": n}).encode(), key=key)


def decisions(plan: FaultPlan, messages: Sequence[Outgoing]) -> dict[str, Fault | None]:
    return {message_id_of(m.value): plan.on_publish(m) for m in messages}


def test_a_seed_decides_the_same_for_each_message_whatever_the_order() -> None:
    rates = FaultRates(drop=0.2, duplicate=0.2, delay=0.2)
    messages = [message(n) for n in range(300)]
    shuffled = random.Random(7).sample(messages, len(messages))
    first = decisions(FaultPlan(42, rates), messages)
    assert first == decisions(FaultPlan(42, rates), shuffled)
    assert first != decisions(FaultPlan(43, rates), messages)


def test_rates_are_kept_and_counted() -> None:
    plan = FaultPlan(1, FaultRates(drop=0.1, duplicate=0.2, delay=0.3), delay_ms=(10, 20))
    faults = [f for f in decisions(plan, [message(n) for n in range(4000)]).values() if f is not None]
    counts = {kind: sum(f.kind == kind for f in faults) for kind in ("drop", "duplicate", "delay")}
    # Precedence drop > duplicate > delay: 10%, 90% of 20%, 72% of 30%.
    assert 300 < counts["drop"] < 500 and 600 < counts["duplicate"] < 840 and 750 < counts["delay"] < 980
    assert dict(plan.stats) == {k: v for k, v in counts.items() if v}
    assert all(10 <= f.delay_ms <= 20 for f in faults if f.kind == "delay")
    assert plan.seen["publish"] == 4000


def test_exempt_and_per_topic_classes() -> None:
    plan = FaultPlan(
        3,
        FaultRates(drop=1.0),
        per_topic={"tasks": FaultRates(duplicate=1.0)},
        exempt={"workflow.events"},
    )
    assert plan.topic_class("cairn.tasks.charge_card") == "tasks"
    assert plan.on_publish(message(1, "cairn.workflow.events")) is None
    assert plan.on_publish(message(2, "cairn.tasks.charge_card")) == Fault("duplicate")
    assert plan.on_publish(message(3, "cairn.task.dispatch")) == Fault("drop")
    assert plan.on_acked(Received("cairn.task.dispatch", b"{}", None, {}, 0, 0)) is None


def test_a_scheduled_fault_hits_the_nth_message_of_its_class_only() -> None:
    plan = FaultPlan(5, schedule=[ScheduledFault("delay", "task.result", nth=2, delay_ms=70)])
    faults = [plan.on_publish(message(n)) for n in range(5)]
    assert faults == [None, None, Fault("delay", 70), None, None]
    assert plan.stats_by_topic == {("delay", "task.result"): 1}


def test_a_message_published_again_gets_a_fresh_decision() -> None:
    """Otherwise a dropped message that the engine republishes under the same id would be
    dropped forever, which no real bus does."""
    plan = FaultPlan(9, FaultRates(drop=0.5))
    outcomes = {plan.on_publish(message(1)) for _ in range(40)}
    assert outcomes == {None, Fault("drop")}


# ---- the wrapper on a real embedded bus ----


@pytest.fixture
async def inner(tmp_path: Path) -> AsyncIterator[EmbeddedBus]:
    bus = EmbeddedBus(str(tmp_path / "bus.db"), partitions=1)
    yield bus
    await bus.stop()


async def consume(bus: FaultyBus, until: int, within_s: float = 5.0) -> list[int]:
    """Numbers delivered to one group, in order, once `until` of them arrived."""
    got: list[int] = []
    arrived = asyncio.Event()

    async def handler(batch: Sequence[Received]) -> None:
        got.extend(json.loads(m.value)["n"] for m in batch)
        if len(got) >= until:
            arrived.set()

    bus.subscribe([TOPIC], "g", handler)
    await bus.start()
    async with asyncio.timeout(within_s):
        await arrived.wait()
    return got


async def test_drop_duplicate_and_delay_reach_the_consumer(
    inner: EmbeddedBus, caplog: pytest.LogCaptureFixture
) -> None:
    plan = FaultPlan(
        0,
        schedule=[
            ScheduledFault("drop", "task.result", nth=0),
            ScheduledFault("duplicate", "task.result", nth=1),
            ScheduledFault("delay", "task.result", nth=2, delay_ms=300),
        ],
    )
    bus = FaultyBus(inner, plan)
    with caplog.at_level(logging.DEBUG, logger="shared.adapters.faults"):
        await bus.publish([message(n) for n in range(4)])
        assert bus.pending == 1
        got = await consume(bus, until=4)
    assert got == [1, 1, 3, 2], "0 dropped, 1 twice, 2 overtaken by 3"
    assert dict(plan.stats) == {"drop": 1, "duplicate": 1, "delay": 1}
    logged = [r.getMessage() for r in caplog.records]
    assert any("drop message m0" in line for line in logged), logged


async def test_redeliver_comes_after_the_acknowledgement(inner: EmbeddedBus) -> None:
    plan = FaultPlan(0, schedule=[ScheduledFault("redeliver", "task.result", nth=0, delay_ms=100)])
    bus = FaultyBus(inner, plan)
    await bus.publish([message(0), message(1)])
    got = await consume(bus, until=3)
    await bus.settle()
    assert got == [0, 1, 0]
    assert dict(plan.stats) == {"redeliver": 1}


async def test_a_plan_without_faults_changes_nothing(inner: EmbeddedBus) -> None:
    plan = FaultPlan(11)
    bus = FaultyBus(inner, plan)
    await bus.publish([message(n) for n in range(20)])
    assert await consume(bus, until=20) == list(range(20))
    assert not plan.stats and plan.seen["publish"] == 20
