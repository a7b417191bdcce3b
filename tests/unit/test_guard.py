"""The poison guard (issue 12 point 2): a handler failing on one message dead-letters that message
after a bounded number of attempts and handles the rest; an outage is raised on, never a dead letter."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence

import pytest
from pymongo.errors import ServerSelectionTimeoutError

from shared.guard import GuardedBus, PoisonGuard, is_outage
from shared.ports.bus import Outgoing, Received, RedeliverError


class Recorder:
    """The bus the guard publishes dead letters on."""

    def __init__(self) -> None:
        self.published: list[Outgoing] = []

    async def publish(self, messages: Sequence[Outgoing]) -> None:
        self.published.extend(messages)


def message(offset: int, value: bytes = b'{"ok": true}') -> Received:
    return Received("cairn.task.dispatch", value, f"wf-{offset}", {}, 0, offset)


class Handler:
    def __init__(self, fails_on: bytes | None = None, error: Exception | None = None) -> None:
        self.fails_on = fails_on
        self.error = error or ValueError("cannot handle this one")
        self.handled: list[int] = []
        self.calls = 0

    async def __call__(self, batch: Sequence[Received]) -> None:
        self.calls += 1
        if self.fails_on is not None and any(self.fails_on in m.value for m in batch):
            raise self.error
        self.handled.extend(m.offset for m in batch)


def guard(handler: Handler, bus: Recorder) -> PoisonGuard:
    return PoisonGuard(handler, "scheduler", bus, "cairn.deadletter", backoff_s=0)  # type: ignore[arg-type]


async def test_one_bad_message_is_dead_lettered_and_the_others_are_handled() -> None:
    bus, handler = Recorder(), Handler(fails_on=b"poison")
    batch = [message(1), message(2, b'{"poison": 1}'), message(3)]
    await guard(handler, bus)(batch)
    assert sorted(set(handler.handled)) == [1, 3]
    [dead] = bus.published
    body = json.loads(dead.value)
    assert dead.topic == "cairn.deadletter"
    assert (body["topic"], body["offset"], body["valueText"]) == ("cairn.task.dispatch", 2, '{"poison": 1}')
    assert "scheduler failed 3 times on it: ValueError: cannot handle this one" == body["reason"]
    assert handler.calls == 1 + 1 + 3 + 1  # the batch, then each message alone (the bad one 3 times)


@pytest.mark.parametrize(
    "outage",
    [
        ServerSelectionTimeoutError("no servers"),
        sqlite3.OperationalError("database is locked"),
        ConnectionRefusedError(),
        TimeoutError(),
        RedeliverError(),
    ],
)
async def test_an_outage_is_raised_on_and_nothing_is_dead_lettered(outage: Exception) -> None:
    bus, handler = Recorder(), Handler(fails_on=b"", error=outage)
    with pytest.raises(type(outage)):
        await guard(handler, bus)([message(1), message(2)])
    assert bus.published == []
    assert is_outage(outage)


async def test_an_outage_while_isolating_stops_the_isolation() -> None:
    """The batch failed on content, then the store went away: the batch is redelivered whole."""

    class Flaky(Handler):
        async def __call__(self, batch: Sequence[Received]) -> None:
            self.calls += 1
            if self.calls == 1:
                raise ValueError("content")
            raise ServerSelectionTimeoutError("store down")

    bus = Recorder()
    with pytest.raises(ServerSelectionTimeoutError):
        await guard(Flaky(), bus)([message(1)])
    assert bus.published == []


def test_a_message_too_large_for_the_broker_is_not_an_outage() -> None:
    from aiokafka.errors import MessageSizeTooLargeError

    assert not is_outage(MessageSizeTooLargeError())
    assert not is_outage(OverflowError("Python int too large to convert to SQLite INTEGER"))


async def test_the_test_hook_poisons_every_guarded_subscription() -> None:
    class Inner(Recorder):
        def __init__(self) -> None:
            super().__init__()
            self.handlers: list[object] = []

        def subscribe(
            self, topics: Sequence[str], group: str, handler: object, *, max_batch: int = 100
        ) -> None:
            self.handlers.append(handler)

    inner = Inner()
    bus = GuardedBus(inner, "cairn.deadletter", poison_marker="BAD-MARKER")  # type: ignore[arg-type]
    handler = Handler()
    bus.subscribe(["t"], "g", handler)
    [guarded] = inner.handlers
    assert isinstance(guarded, PoisonGuard)
    guarded.backoff_s = 0
    await guarded([message(1), message(2, b"x BAD-MARKER x")])
    assert sorted(set(handler.handled)) == [1]
    assert [json.loads(m.value)["offset"] for m in inner.published] == [2]
