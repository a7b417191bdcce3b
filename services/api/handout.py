"""One poll's hand-out: the tasks a poller receives, held by a short store claim until its answer
has been sent.

A hand-out is claimed for CAIRN_API_HANDOUT_CONFIRM_S only. `HandOutResponse` confirms it once
the body has gone out (Starlette runs a response's background task after sending it): each
claim is then renewed to the task's responseTimeoutSeconds and its offer settled (once its
started report is out too: services/api/started.py), so the bus batch is acknowledged only now
that the poller has its tasks. An answer that is never sent (the
poller hung up, the route failed, the process died) never confirms: the tasks go back to the
head of their queue — at once when the poller is seen gone, else when the confirmation time
runs out — and after a process death the bus delivers the unacknowledged dispatch again, whose
short claim has run out by then. No task waits for its response timeout because an answer was
lost on the way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from starlette.background import BackgroundTask
from starlette.responses import JSONResponse
from starlette.types import Message, Receive, Scope, Send

from services.api.offers import Offer, TypeQueue
from shared.models.messages import TaskMessage
from shared.ports.store import Store

log = logging.getLogger(__name__)

DEFAULT_CLAIM_LEASE_MS = 3_600_000
"""Conductor's default responseTimeoutSeconds: how long a poller holds a task it never reports."""


def response_lease_ms(task: TaskMessage) -> int:
    """How long a confirmed hand-out is held: until the task's response timeout."""
    return task.response_timeout_seconds * 1000 or DEFAULT_CLAIM_LEASE_MS


class HandOut:
    """The tasks of one poll and the offers they came from, until confirmed or given up."""

    def __init__(self, queue: TypeQueue, store: Store, clock: Callable[[], int], confirm_s: float) -> None:
        self.queue = queue
        self.store = store
        self.clock = clock
        self.confirm_s = confirm_s
        self.tasks: list[dict[str, Any]] = []
        self.offers: list[Offer] = []
        self._timer: asyncio.TimerHandle | None = None
        self._resolved = False

    def add(self, offer: Offer, task: dict[str, Any]) -> None:
        offer.hand_out = self
        self.offers.append(offer)
        self.tasks.append(task)

    def arm(self) -> None:
        """Start the confirmation time: without a confirmation by then, the tasks go back."""
        if self.offers and self._timer is None and not self._resolved:
            self._timer = asyncio.get_running_loop().call_later(self.confirm_s, self._expire)

    async def confirm(self) -> None:
        """The answer has been sent: hold each task until its response timeout, then settle its
        offer. A late confirmation (the tasks went back meanwhile) still renews: the poller has
        them; renewal fails only where another poller claimed one since, which keeps it. The
        offers are settled whatever the store answers: the poller has its tasks either way."""
        self._resolve()
        now = self.clock()
        try:
            outcomes = await asyncio.gather(
                *(self._renew(offer, now) for offer in self.offers), return_exceptions=True
            )
            for offer, outcome in zip(self.offers, outcomes, strict=True):
                if isinstance(outcome, BaseException):
                    log.warning("task %s: its claim was not extended: %s", offer.task.task_id, outcome)
                elif not outcome:
                    log.info("task %s was confirmed after another poller claimed it", offer.task.task_id)
        finally:
            for offer in self.offers:
                offer.mark_confirmed()

    async def _renew(self, offer: Offer, now: int) -> bool:
        assert offer.holder is not None
        return await self.store.renew_task_claim(
            offer.claim_id, offer.holder, now, response_lease_ms(offer.task)
        )

    def abandon(self, why: str) -> None:
        """The answer will not reach the poller: its tasks go back to the head of the queue (the
        next hand-out renews this api's claim, so they go out again at once)."""
        if self._resolved:
            return
        self._resolve()
        back = [offer for offer in self.offers if offer.hand_out is self and not offer.settled.done()]
        if back:
            log.info("%d %s task(s) go back to the queue: %s", len(back), self.queue.task_type, why)
            self.queue.put_back(back)

    def _expire(self) -> None:
        self.abandon(f"no answer was sent within {self.confirm_s:g} s")

    def _resolve(self) -> None:
        self._resolved = True
        if self._timer is not None:
            self._timer.cancel()


async def hung_up(receive: Receive) -> bool:
    """Whether the client has closed its connection, without waiting for anything (a request
    body still pending is read past: the route has what it needed)."""
    for _ in range(2):
        message = receive_now(receive)
        if message is None:
            return False
        if message.get("type") != "http.request":
            return message.get("type") == "http.disconnect"
    return False


def receive_now(receive: Receive) -> Message | None:
    """The connection's next ASGI message if it is there already; None if `receive` would wait.

    The receive coroutine is stepped once and closed should it suspend (its waits unwind as on a
    cancellation). Starlette's `is_disconnected` does the same inside a cancelled anyio
    CancelScope, which costs 24 µs against 1 µs here, paid a few times per hand-out."""
    pending = receive()
    if not isinstance(pending, Coroutine):
        return None  # not a coroutine (no ASGI server's receive is): cannot look without waiting
    try:
        pending.send(None)
    except StopIteration as done:
        message: Message = done.value
        return message
    pending.close()
    return None


class HandOutResponse(JSONResponse):
    """A poll's answer that confirms its hand-out once sent, or gives it up unsent when the
    poller already hung up (uvicorn drops an answer to a closed connection without a word)."""

    def __init__(self, content: Any, hand_out: HandOut) -> None:
        super().__init__(content, background=BackgroundTask(hand_out.confirm) if hand_out.offers else None)
        self.hand_out = hand_out

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # The look is best effort: should it fail, the answer goes out and is confirmed as usual.
        with contextlib.suppress(Exception):
            if self.hand_out.offers and await hung_up(receive):
                self.hand_out.abandon("the poller hung up before its answer was sent")
                self.background = None
        await super().__call__(scope, receive, send)
