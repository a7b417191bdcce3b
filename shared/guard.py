"""No message is redelivered forever: every consumer's batch handler runs behind this guard.

When a handler raises, the guard tells an outage from a poison message:

- an outage (the store or the broker unreachable, a lock, a timeout, a lost commit race, a
  handler asking for redelivery) is raised on, so the bus delivers the batch again, with backoff,
  until the outage ends — nothing is dead-lettered because a server was down;
- anything else may be one bad message in the batch: the guard runs the batch again one message at
  a time, each up to `attempts` times with a short backoff, and dead-letters a message that keeps
  failing — with the reason, the handler and the original bytes — so its partition moves on. Every
  handler is idempotent (at-least-once delivery), so running the good messages again is harmless.

A test hook (`CAIRN_FAULT_POISON_MARKER`) makes every guarded handler fail on messages whose bytes
contain a marker, so one test can show the guard on every consumer.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Sequence

from aiokafka.errors import KafkaError, MessageSizeTooLargeError, RecordTooLargeError
from pymongo.errors import ConnectionFailure, ExecutionTimeout, WTimeoutError

from shared import telemetry
from shared.messaging import dead_letter
from shared.ports.bus import BatchHandler, Bus, Outgoing, Received, RedeliverError, Subscription

log = logging.getLogger("cairn.guard")
meter = telemetry.meter("cairn.guard")
dead_lettered = meter.create_counter(
    "cairn.guard.deadletters",
    description="Messages a handler kept failing on, moved to the dead-letter topic",
)

ATTEMPTS = 3
"""How often one message is tried on its own before it is dead-lettered (besides the batch try)."""


class PoisonedByTestHookError(RuntimeError):
    """Raised by the CAIRN_FAULT_POISON_MARKER test hook."""


def is_outage(error: BaseException) -> bool:
    """Whether `error` says a server is unavailable (wait and retry) rather than that a message
    can never be handled. A message too large for the broker is not an outage: it never fits."""
    if isinstance(error, MessageSizeTooLargeError | RecordTooLargeError):
        return False
    return isinstance(
        error,
        RedeliverError
        | ConnectionFailure  # pymongo: server selection, network, AutoReconnect, not primary
        | ExecutionTimeout
        | WTimeoutError
        | KafkaError
        | sqlite3.OperationalError  # locked, busy, disk I/O
        | OSError  # connection refused or reset (ConnectionError), and TimeoutError
        | asyncio.TimeoutError,
    )


class PoisonGuard:
    """One guarded handler: `await guard(batch)` in place of `await handler(batch)`."""

    def __init__(
        self,
        handler: BatchHandler,
        name: str,
        bus: Bus,
        dead_letter_topic: str,
        *,
        attempts: int = ATTEMPTS,
        backoff_s: float = 0.1,
        poison_marker: bytes | None = None,
    ) -> None:
        self.handler = handler
        self.name = name
        self.bus = bus
        self.dead_letter_topic = dead_letter_topic
        self.attempts = attempts
        self.backoff_s = backoff_s
        self.poison_marker = poison_marker

    async def __call__(self, batch: Sequence[Received]) -> None:
        try:
            await self._handle(batch)
            return
        except Exception as error:
            if is_outage(error):
                raise
            log.warning(
                "%s failed on a batch of %d (%r); trying its messages one by one",
                self.name,
                len(batch),
                error,
            )
        dead: list[Outgoing] = []
        for received in batch:
            reason = await self._try_alone(received)
            if reason is not None:
                log.error(
                    "%s dead-letters %s[%d]@%d: %s",
                    self.name,
                    received.topic,
                    received.partition,
                    received.offset,
                    reason,
                )
                dead.append(dead_letter(received, reason, self.dead_letter_topic))
        if dead:
            await self.bus.publish(dead)
            dead_lettered.add(len(dead), {"handler": self.name})

    async def _try_alone(self, received: Received) -> str | None:
        """None once the message was handled; else why it failed every time."""
        last: Exception | None = None
        for attempt in range(self.attempts):
            try:
                await self._handle([received])
                return None
            except Exception as error:
                if is_outage(error):
                    raise
                last = error
            await asyncio.sleep(self.backoff_s * 2**attempt)
        return f"{self.name} failed {self.attempts} times on it: {type(last).__name__}: {last}"

    async def _handle(self, batch: Sequence[Received]) -> None:
        if self.poison_marker is not None and any(self.poison_marker in m.value for m in batch):
            raise PoisonedByTestHookError(f"test hook: a message holds {self.poison_marker.decode()!r}")
        await self.handler(batch)


class GuardedBus:
    """A Bus whose every subscription's handler runs behind a PoisonGuard; the rest delegates.
    The services are assembled on it, so no consumer can forget the guard."""

    def __init__(self, bus: Bus, dead_letter_topic: str, poison_marker: str | None = None) -> None:
        self.inner = bus
        self.dead_letter_topic = dead_letter_topic
        self.poison_marker = poison_marker.encode() if poison_marker else None

    def _guard(self, topics: Sequence[str], group: str, handler: BatchHandler) -> PoisonGuard:
        return PoisonGuard(
            handler,
            group,
            self.inner,
            self.dead_letter_topic,
            poison_marker=self.poison_marker,
        )

    def subscribe(
        self, topics: Sequence[str], group: str, handler: BatchHandler, *, max_batch: int = 100
    ) -> None:
        self.inner.subscribe(topics, group, self._guard(topics, group, handler), max_batch=max_batch)

    async def add_subscription(
        self, topics: Sequence[str], group: str, handler: BatchHandler, *, max_batch: int = 100
    ) -> Subscription:
        return await self.inner.add_subscription(
            topics, group, self._guard(topics, group, handler), max_batch=max_batch
        )

    async def start(self) -> None:
        await self.inner.start()

    async def stop(self) -> None:
        await self.inner.stop()

    async def publish(self, messages: Sequence[Outgoing]) -> None:
        await self.inner.publish(messages)

    async def ensure_topics(self, topics: Sequence[str]) -> None:
        await self.inner.ensure_topics(topics)

    async def peek(self, topic: str, limit: int) -> list[Received]:
        return await self.inner.peek(topic, limit)

    def __getattr__(self, name: str) -> object:
        """What an adapter offers beyond the port (the embedded bus's file, for `cairn dev`)."""
        return getattr(self.inner, name)
