"""Seeded fault injection for a bus: drop, duplicate, delay and redeliver messages on purpose, so a
test can show that Cairn's guarantees hold when delivery goes wrong, not only when it goes right.

`FaultyBus` wraps any `Bus` (made for `EmbeddedBus`) and implements the same port, so the services
run unchanged on top of it; nothing in the production adapters knows about faults, and a bus
without the wrapper takes exactly the code path it always took. A `FaultPlan` says what to do:

- drop: `publish` returns as if the message were durable, but it was never appended (a message
  lost after its producer was told it was safe);
- duplicate: the message is appended twice, back to back (a producer retry);
- delay: the message is appended `delay_ms` later, in the background, so messages published after
  it may overtake it (a slow path; Kafka keeps one producer's order per key, several producers —
  the api and a worker, two replicas — never had an order between them);
- redeliver: after a consumer group's handler returned for a batch (the batch is acknowledged), a
  message of it is appended again `delay_ms` later: a stale copy arriving after the consumer moved
  on. It is republished on its topic, so every group of that topic sees it again; each of Cairn's
  topics has one consuming group.

Determinism: a probabilistic decision is a hash of (seed, fault kind, topic, message id, how many
times that message id passed that point before), never a draw from a shared random stream, so
concurrent publishers cannot shift each other's faults: one seed makes the same decision for the
same message whatever the interleaving. A scheduled fault (`ScheduledFault`) hits the n-th
message of a topic class at its point, so it is deterministic given the message sequence. What a
seed cannot pin down is the engine's own timing (timer and sweep ids carry clock values), so a
failure found with a seed reproduces its faults exactly and its interleaving only usually.

Every injected fault is logged at DEBUG with the message id and counted in `FaultPlan.stats`,
so a test can show that faults actually happened.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from shared.ports.bus import BatchHandler, Bus, Outgoing, Received, Subscription

log = logging.getLogger(__name__)

FaultKind = Literal["drop", "duplicate", "delay", "redeliver"]
PUBLISH_KINDS: tuple[FaultKind, ...] = ("drop", "duplicate", "delay")
"""Decided when a message is published, in this order of precedence (at most one per message)."""
KINDS: tuple[FaultKind, ...] = (*PUBLISH_KINDS, "redeliver")

DEFAULT_EXEMPT = frozenset({"workflow.events", "deadletter"})
"""Topic classes nobody in Cairn consumes: faults there would prove nothing and inflate stats."""


@dataclass(frozen=True)
class FaultRates:
    """The probability of each fault, per message (0 to 1)."""

    drop: float = 0.0
    duplicate: float = 0.0
    delay: float = 0.0
    redeliver: float = 0.0

    def __post_init__(self) -> None:
        for kind in KINDS:
            if not 0.0 <= getattr(self, kind) <= 1.0:
                raise ValueError(f"{kind} probability must be between 0 and 1, not {getattr(self, kind)}")

    def of(self, kind: FaultKind) -> float:
        rate: float = getattr(self, kind)
        return rate


@dataclass(frozen=True)
class ScheduledFault:
    """Inject `kind` into the `nth` message (0-based) of `topic_class` at the point where that kind
    applies: publishes for drop / duplicate / delay, acknowledgements for redeliver."""

    kind: FaultKind
    topic_class: str
    nth: int = 0
    delay_ms: int | None = None
    """For delay and redeliver; None draws one from the plan's `delay_ms` range."""


@dataclass(frozen=True)
class Fault:
    """One decision: what to do with one message."""

    kind: FaultKind
    delay_ms: int = 0


@dataclass
class FaultPlan:
    """What faults to inject, seeded. Rates apply per topic class: the topic without the prefix,
    with every `tasks.<type>` topic as the class `tasks` (see `topic_class`); `per_topic` overrides
    `rates` for a class, and classes in `exempt` get no fault at all (scheduled ones included)."""

    seed: int
    rates: FaultRates = field(default_factory=FaultRates)
    per_topic: Mapping[str, FaultRates] = field(default_factory=dict)
    exempt: Collection[str] = DEFAULT_EXEMPT
    schedule: Sequence[ScheduledFault] = ()
    delay_ms: tuple[int, int] = (20, 300)
    prefix: str = "cairn."
    stats: Counter[str] = field(default_factory=Counter, init=False)
    """Faults injected, by kind."""
    stats_by_topic: Counter[tuple[str, str]] = field(default_factory=Counter, init=False)
    """Faults injected, by (kind, topic class)."""
    seen: Counter[str] = field(default_factory=Counter, init=False)
    """Messages that passed a fault point, by point ("publish", "ack")."""
    _occurrences: Counter[tuple[str, str]] = field(default_factory=Counter, init=False, repr=False)
    _positions: Counter[tuple[str, str]] = field(default_factory=Counter, init=False, repr=False)

    def __post_init__(self) -> None:
        low, high = self.delay_ms
        if not 0 <= low <= high:
            raise ValueError(
                f"delay_ms must be a range (low, high) with 0 <= low <= high, not {self.delay_ms}"
            )

    def describe(self) -> str:
        """One line to print with a failure: everything needed to build the same plan again."""
        return (
            f"FaultPlan(seed={self.seed}, rates={self.rates}, per_topic={dict(self.per_topic)}, "
            f"exempt={sorted(self.exempt)}, schedule={list(self.schedule)}, delay_ms={self.delay_ms})"
        )

    def topic_class(self, topic: str) -> str:
        """`cairn.task.dispatch` -> `task.dispatch`; `cairn.tasks.charge_card` -> `tasks`."""
        name = topic.removeprefix(self.prefix)
        return "tasks" if name.startswith("tasks.") else name

    def on_publish(self, message: Outgoing) -> Fault | None:
        """The fault (drop, duplicate or delay) for a message being published, if any."""
        return self._decide("publish", message.topic, message.value, PUBLISH_KINDS)

    def on_acked(self, received: Received) -> Fault | None:
        """The fault (redeliver) for a message whose batch a handler just finished, if any."""
        return self._decide("ack", received.topic, received.value, ("redeliver",))

    def _decide(self, point: str, topic: str, value: bytes, kinds: tuple[FaultKind, ...]) -> Fault | None:
        cls = self.topic_class(topic)
        if cls in self.exempt:
            return None
        self.seen[point] += 1
        message_id = message_id_of(value)
        occurrence = self._count(self._occurrences, (point, message_id))
        position = self._count(self._positions, (point, cls))
        fault = self._scheduled(cls, position, kinds, message_id) or self._drawn(
            cls, topic, message_id, occurrence, kinds
        )
        if fault is not None:
            self.stats[fault.kind] += 1
            self.stats_by_topic[(fault.kind, cls)] += 1
            log.debug(
                "fault injected: %s message %s on %s (delay %d ms, seed %d)",
                fault.kind,
                message_id,
                topic,
                fault.delay_ms,
                self.seed,
            )
        return fault

    @staticmethod
    def _count(counter: Counter[tuple[str, str]], key: tuple[str, str]) -> int:
        """How many times `key` was counted before this call."""
        before = counter[key]
        counter[key] = before + 1
        return before

    def _scheduled(
        self, cls: str, position: int, kinds: tuple[FaultKind, ...], message_id: str
    ) -> Fault | None:
        for planned in self.schedule:
            if planned.kind in kinds and planned.topic_class == cls and planned.nth == position:
                delay = planned.delay_ms
                if delay is None:
                    delay = self._delay(f"scheduled|{cls}|{position}|{message_id}")
                return Fault(planned.kind, delay if planned.kind in ("delay", "redeliver") else 0)
        return None

    def _drawn(
        self, cls: str, topic: str, message_id: str, occurrence: int, kinds: tuple[FaultKind, ...]
    ) -> Fault | None:
        rates = self.per_topic.get(cls, self.rates)
        for kind in kinds:
            key = f"{topic}|{message_id}|{occurrence}"
            if self._uniform(f"{kind}|{key}") < rates.of(kind):
                delay = self._delay(key) if kind in ("delay", "redeliver") else 0
                return Fault(kind, delay)
        return None

    def _delay(self, key: str) -> int:
        low, high = self.delay_ms
        return low + int(self._uniform(f"delay_ms|{key}") * (high - low + 1)) if high > low else low

    def _uniform(self, key: str) -> float:
        """A number in [0, 1) fixed by the seed and the key: the plan's only source of chance."""
        digest = hashlib.sha256(f"{self.seed}|{key}".encode()).digest()
        return int.from_bytes(digest[:8], "big") / 2**64


def message_id_of(value: bytes) -> str:
    """The envelope's `id` (every Cairn message has one); a digest of the bytes otherwise."""
    try:
        body = json.loads(value)
    except (UnicodeDecodeError, json.JSONDecodeError):
        body = None
    if isinstance(body, dict) and isinstance(body.get("id"), str):
        message_id: str = body["id"]
        return message_id
    return "sha256:" + hashlib.sha256(value).hexdigest()[:16]


class FaultyBus:
    """The `Bus` port around another bus, injecting the faults of `plan` (module docstring)."""

    def __init__(self, inner: Bus, plan: FaultPlan) -> None:
        self.inner = inner
        self.plan = plan
        self._later: set[asyncio.Task[None]] = set()

    @property
    def pending(self) -> int:
        """Delayed and redelivered messages not appended yet."""
        return len(self._later)

    async def settle(self, within_s: float = 5.0) -> None:
        """Wait (bounded) until every delayed and redelivered message has been appended."""
        async with asyncio.timeout(within_s):
            while self._later:
                await asyncio.gather(*list(self._later), return_exceptions=True)

    def subscribe(
        self, topics: Sequence[str], group: str, handler: BatchHandler, *, max_batch: int = 100
    ) -> None:
        self.inner.subscribe(topics, group, self._acking(handler), max_batch=max_batch)

    async def add_subscription(
        self, topics: Sequence[str], group: str, handler: BatchHandler, *, max_batch: int = 100
    ) -> Subscription:
        return await self.inner.add_subscription(topics, group, self._acking(handler), max_batch=max_batch)

    async def start(self) -> None:
        await self.inner.start()

    async def stop(self) -> None:
        """Messages still held back are lost with the bus (as a producer's buffer would be)."""
        for task in self._later:
            task.cancel()
        await asyncio.gather(*self._later, return_exceptions=True)
        await self.inner.stop()

    async def ensure_topics(self, topics: Sequence[str]) -> None:
        await self.inner.ensure_topics(topics)

    async def peek(self, topic: str, limit: int) -> list[Received]:
        return await self.inner.peek(topic, limit)

    async def publish(self, messages: Sequence[Outgoing]) -> None:
        now: list[Outgoing] = []
        for message in messages:
            fault = self.plan.on_publish(message)
            if fault is None:
                now.append(message)
            elif fault.kind == "duplicate":
                now.extend((message, message))
            elif fault.kind == "delay":
                self._append_later([message], fault.delay_ms)
            # drop: publish succeeds without it
        await self.inner.publish(now)

    def _acking(self, handler: BatchHandler) -> BatchHandler:
        """The handler, followed — once it returned, so the batch will be acknowledged — by the
        redeliveries the plan asks for."""

        async def handle(batch: Sequence[Received]) -> None:
            await handler(batch)
            for received in batch:
                fault = self.plan.on_acked(received)
                if fault is not None:
                    again = Outgoing(received.topic, received.value, received.key, dict(received.headers))
                    self._append_later([again], fault.delay_ms)

        return handle

    def _append_later(self, messages: list[Outgoing], delay_ms: int) -> None:
        task = asyncio.create_task(self._append_after(messages, delay_ms), name="cairn-fault-later")
        self._later.add(task)
        task.add_done_callback(self._later.discard)

    async def _append_after(self, messages: list[Outgoing], delay_ms: int) -> None:
        await asyncio.sleep(delay_ms / 1000)
        try:
            await self.inner.publish(messages)
        except Exception:
            log.warning("a held-back message could not be appended; it is lost", exc_info=True)
