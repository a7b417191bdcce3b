"""The api's queue of one task type: dispatches from the bus waiting for an HTTP poller.

An `Offer` is one dispatch as the bus delivered it. It leaves the api only by being settled —
handed out, confirmed and reported started, found stale, held by another poller, or failed back
to the bus — and
its bus batch is acknowledged once all of its offers are settled (services/api/dispatch.py).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from shared.core.refs import node_ref
from shared.models.messages import TaskMessage
from shared.ports.bus import RedeliverError, Subscription
from shared.ports.store import WorkflowHeads

if TYPE_CHECKING:
    from services.api.handout import HandOut


class QueueClosedError(RedeliverError):
    """The api left the task type's group; unsettled tasks go back to the bus."""


def is_stale(heads: WorkflowHeads | None, task: TaskMessage) -> bool:
    """True when the workflow has provably moved past this dispatch (finished, or the task
    execution is done or superseded). An unknown or older-looking workflow is not proof: the
    task is handed out, and the decider ignores a result that turns out not to be current.
    A dispatch whose "started" report was already applied (a hand-out lost with its process) is
    still current: it is the same dispatch (same poll count), still IN_PROGRESS."""
    if heads is None:
        return False
    if heads.status.is_terminal:
        return True
    current = heads.executions.get(node_ref(task.reference_task_name))
    if current is None:
        return False
    if current.task_id == task.task_id:
        return current.status.is_terminal or current.dispatch_count > task.poll_count
    return current.retry_count > task.retry_count


@dataclass(eq=False)
class Offer:
    task: TaskMessage
    settled: asyncio.Future[None]
    holder: str | None = None
    """This api's claim token for the dispatch, made at its first claim. A hand-out that never
    reached its poller leaves the claim in place; the next hand-out renews it under the same
    token, so the offer goes out again at once, not when the claim runs out."""
    hand_out: HandOut | None = None
    """The hand-out the offer is in now; None while it waits in the queue."""
    refused_at: int | None = None
    """When a claim was first refused (another holder's live claim), epoch ms."""
    reported: bool = True
    """Whether its hand-out's "started" report has been published (services/api/started.py)."""
    confirmed: bool = False
    """Whether its poller's answer has been sent."""

    @property
    def claim_id(self) -> str:
        """One claim per (execution, dispatch number): a redelivered copy meets the same claim."""
        return f"{self.task.task_id}:{self.task.poll_count}"

    def mark_confirmed(self) -> None:
        """The poller has its answer: settled once the hand-out's started report is out too."""
        self.confirmed = True
        if self.reported:
            self.settle()

    def mark_reported(self) -> None:
        """The started report is published: settled if the poller has its answer."""
        self.reported = True
        if self.confirmed:
            self.settle()

    def settle(self) -> None:
        if not self.settled.done():
            self.settled.set_result(None)

    def fail(self, error: BaseException) -> None:
        if not self.settled.done():
            self.settled.set_exception(error)


@dataclass
class TypeQueue:
    task_type: str
    offers: deque[Offer] = field(default_factory=deque)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    subscriptions: list[Subscription] = field(default_factory=list)
    """The type's members in its worker group (CAIRN_API_DISPATCH_CONSUMERS)."""
    last_poll: float = 0.0
    closed: bool = False

    def take(self, count: int) -> list[Offer]:
        taken: list[Offer] = []
        while self.offers and len(taken) < count:
            offer = self.offers.popleft()
            if not offer.settled.done():
                taken.append(offer)
        if not self.offers:
            self.arrived.clear()
        return taken

    def put_back(self, offers: Iterable[Offer]) -> None:
        """Return unsettled offers to the head of the queue, in order, for the next poll; on a
        closed queue they fail back to the bus instead."""
        returned = [offer for offer in offers if not offer.settled.done()]
        for offer in returned:
            offer.hand_out = None
        if self.closed:
            for offer in returned:
                offer.fail(QueueClosedError(self.task_type))
            return
        self.offers.extendleft(reversed(returned))
        if returned:
            self.arrived.set()

    def fail_all(self) -> None:
        self.closed = True
        while self.offers:
            self.offers.popleft().fail(QueueClosedError(self.task_type))
        self.arrived.set()
