"""The bus port. Adapters: Kafka via FastStream (production), embedded (issue 3).

Delivery contract, checked by tests/contract/test_bus_contract.py on every adapter:
- messages with the same key on the same topic are handled in the order they were published;
- a batch is acknowledged only when its handler returns; if the handler raises, or the consumer
  dies first, the batch is delivered again (to this or another member of the group);
- members of one group share the topic's partitions; different groups each get everything.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class Outgoing:
    topic: str
    value: bytes
    key: str | None = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Received:
    topic: str
    value: bytes
    key: str | None
    headers: dict[str, str]
    partition: int
    offset: int


BatchHandler = Callable[[Sequence[Received]], Awaitable[None]]


class RedeliverError(Exception):
    """Raised by a handler that wants its batch delivered again later and is not failing on its
    content (a queue closing under it, commit races it lost too often): never a dead letter."""


class Subscription(Protocol):
    async def close(self) -> None:
        """Leave the group: finish the in-flight batch, then stop; the group's other members
        take over this member's partitions (unacknowledged messages are delivered again)."""
        ...


class Bus(Protocol):
    def subscribe(
        self, topics: Sequence[str], group: str, handler: BatchHandler, *, max_batch: int = 100
    ) -> None:
        """Register a batch handler for a consumer group; call before `start`."""
        ...

    async def add_subscription(
        self, topics: Sequence[str], group: str, handler: BatchHandler, *, max_batch: int = 100
    ) -> Subscription:
        """Join a group while the bus is running (the api joins `tasks.<type>` groups when an HTTP
        worker first polls that type); same delivery contract as `subscribe`."""
        ...

    async def start(self) -> None: ...
    async def stop(self) -> None:
        """Stop consuming after in-flight batches finish, then flush and close producers."""
        ...

    async def publish(self, messages: Sequence[Outgoing]) -> None:
        """Publish all messages and return once every one is durably accepted by the bus."""
        ...

    async def ensure_topics(self, topics: Sequence[str]) -> None:
        """Create topics that do not exist yet (no-op where topics need no creation)."""
        ...

    async def peek(self, topic: str, limit: int) -> list[Received]:
        """The newest `limit` messages of `topic` still retained, from every partition, oldest
        first; read outside any consumer group (nothing is committed). For operators: the
        dead-letter topic nobody consumes (`cairn deadletter ls`)."""
        ...
