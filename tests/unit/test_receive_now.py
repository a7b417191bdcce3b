"""`receive_now` looks at a connection's next ASGI message without waiting for one: the check
the api makes before it hands a task to a long-poll (services/api/handout.py)."""

from __future__ import annotations

import asyncio
from typing import Any

from services.api.handout import hung_up, receive_now


async def test_a_message_already_there_is_returned() -> None:
    async def receive() -> dict[str, Any]:
        return {"type": "http.disconnect"}

    assert receive_now(receive) == {"type": "http.disconnect"}
    assert await hung_up(receive)


async def test_a_receive_that_would_wait_gives_none_and_leaves_nothing_waiting() -> None:
    """The receive is unwound as a cancellation would unwind it: its wait is withdrawn, its
    cleanup runs, and a message that arrives later is there for the next receive."""
    arrived = asyncio.Event()
    unwound: list[bool] = []

    async def receive() -> dict[str, Any]:
        try:
            await arrived.wait()
        finally:
            unwound.append(True)
        return {"type": "http.disconnect"}

    assert receive_now(receive) is None
    assert unwound == [True]
    assert not arrived._waiters  # type: ignore[attr-defined]  # no wait left behind
    assert not await hung_up(receive)
    arrived.set()
    assert receive_now(receive) == {"type": "http.disconnect"}


async def test_a_pending_body_is_read_past_to_see_a_hang_up() -> None:
    messages = [{"type": "http.disconnect"}, {"type": "http.request", "body": b"", "more_body": False}]

    async def receive() -> dict[str, Any]:
        return messages.pop()

    assert await hung_up(receive)


async def test_an_awaitable_that_is_not_a_coroutine_counts_as_nothing_there() -> None:
    loop = asyncio.get_running_loop()
    future: asyncio.Future[dict[str, Any]] = loop.create_future()
    future.set_result({"type": "http.disconnect"})
    assert receive_now(lambda: future) is None
