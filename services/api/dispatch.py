"""Handing task executions to HTTP pollers (Conductor's `GET /api/tasks/poll…`).

The api joins a task type's worker group (`Topics.workers(type)`, the group Kafka workers use)
when the type is first polled, so HTTP and bus workers share the type's partitions and every
dispatch goes to exactly one of them. A batch from the bus is acknowledged only once each of its
tasks has been handed to a poller (or found stale), so a crash of the api before the hand-out
means the bus delivers the tasks again. The hand-out itself is fenced by a store claim keyed by
(task id, dispatch number): a redelivered dispatch that one poller already holds is never given to
a second poller, on this api instance or another. A type nobody has polled for `idle_close_s`
leaves the group again, so its partitions go back to bus workers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from services.api.conductor import polled_task_json
from shared import telemetry
from shared.core.refs import node_ref
from shared.messaging import PoisonMessageError, dead_letter, outgoing, parse
from shared.models.messages import WORKER_TASK, TaskMessage, TaskResult
from shared.models.runtime import TaskStatus
from shared.ports.bus import Bus, Outgoing, Received, RedeliverError, Subscription
from shared.ports.store import Store, WorkflowHeads
from shared.topics import Topics

log = logging.getLogger(__name__)

DEFAULT_CLAIM_LEASE_MS = 3_600_000
"""Conductor's default responseTimeoutSeconds: how long a poller holds a task it never reports."""


class QueueClosedError(RedeliverError):
    """The api left the task type's group; unsettled tasks go back to the bus."""


def is_stale(heads: WorkflowHeads | None, task: TaskMessage) -> bool:
    """True when the workflow has provably moved past this dispatch (finished, or the task
    execution is done or superseded). An unknown or older-looking workflow is not proof: the
    task is handed out, and the decider ignores a result that turns out not to be current."""
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


@dataclass
class _Offer:
    task: TaskMessage
    settled: asyncio.Future[None]


@dataclass
class _TypeQueue:
    task_type: str
    offers: deque[_Offer] = field(default_factory=deque)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    subscription: Subscription | None = None
    last_poll: float = 0.0
    closed: bool = False

    def take(self, count: int) -> list[_Offer]:
        taken: list[_Offer] = []
        while self.offers and len(taken) < count:
            offer = self.offers.popleft()
            if not offer.settled.done():
                taken.append(offer)
        if not self.offers:
            self.arrived.clear()
        return taken

    def fail_all(self) -> None:
        self.closed = True
        while self.offers:
            offer = self.offers.popleft()
            if not offer.settled.done():
                offer.settled.set_exception(QueueClosedError(self.task_type))
        self.arrived.set()


class TaskDispatcher:
    def __init__(
        self,
        bus: Bus,
        store: Store,
        topics: Topics,
        clock: Callable[[], int],
        *,
        idle_close_s: float = 120.0,
        max_batch: int = 100,
    ) -> None:
        self.bus = bus
        self.store = store
        self.topics = topics
        self.clock = clock
        self.idle_close_s = idle_close_s
        self.max_batch = max_batch
        self._queues: dict[str, _TypeQueue] = {}
        self._joining = asyncio.Lock()
        self._reaper: asyncio.Task[None] | None = None

    async def poll(
        self,
        task_type: str,
        worker_id: str,
        count: int,
        timeout_s: float,
        gone: Callable[[], Awaitable[bool]] | None = None,
    ) -> list[dict[str, Any]]:
        """Up to `count` tasks for `worker_id`, waiting up to `timeout_s` for the first one.

        `gone` says whether the poller hung up (its process died mid long-poll): a task is
        never handed to a connection nobody reads, where only its response timeout would
        bring it back."""
        loop = asyncio.get_running_loop()
        queue = await self._queue(task_type)
        deadline = loop.time() + max(timeout_s, 0.0)
        handed: list[dict[str, Any]] = []
        while True:
            queue.last_poll = loop.time()
            if gone is not None and not handed and await gone():
                log.info("%s poller %s hung up before a task arrived", task_type, worker_id)
                return handed
            offers = queue.take(count - len(handed))
            if offers:
                handed.extend(await self._hand_out(queue, offers, worker_id))
                continue
            remaining = deadline - loop.time()
            if handed or remaining <= 0 or queue.closed:
                return handed
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(queue.arrived.wait(), remaining)

    async def _hand_out(
        self, queue: _TypeQueue, offers: Sequence[_Offer], worker_id: str
    ) -> list[dict[str, Any]]:
        """Claim and return the offers that are still current. Every offer taken leaves settled
        (handed out, stale, or failed back to the bus) or back at the head of the queue (the
        poll was cancelled), so no bus batch waits forever on a task nobody holds."""
        pending = list(offers)
        handed: list[dict[str, Any]] = []
        try:
            ids = list({offer.task.workflow_instance_id for offer in pending})
            heads = await self.store.load_heads(ids)
            now = self.clock()
            current = [o for o in pending if not is_stale(heads.get(o.task.workflow_instance_id), o.task)]
            current_ids = {id(offer) for offer in current}
            # "Started" goes out before the claim: once a task may be in a poller's hands, the
            # workflow shows it IN_PROGRESS, so responseTimeoutSeconds recovers it if the hand-out
            # is lost (this api dies before the poller gets its answer).
            await self.bus.publish([self._started(offer.task, worker_id) for offer in current])
            while pending:
                offer = pending[0]
                task = offer.task
                if id(offer) not in current_ids:
                    log.debug("dropping stale dispatch of task %s", task.task_id)
                elif await self.store.claim_task(
                    f"{task.task_id}:{task.poll_count}",
                    worker_id,
                    now,
                    task.response_timeout_seconds * 1000 or DEFAULT_CLAIM_LEASE_MS,
                ):
                    handed.append(polled_task_json(task, worker_id, now))
                else:
                    log.info("task %s dispatch %d is held by another poller", task.task_id, task.poll_count)
                pending.pop(0)
                offer.settled.set_result(None)
        except Exception as error:
            # The store failed: the rest go back to the bus (their batch is delivered again).
            log.warning("handing out %s tasks failed: %s", queue.task_type, error)
            for offer in pending:
                if not offer.settled.done():
                    offer.settled.set_exception(error)
            pending = []
        finally:
            if pending:  # cancelled mid hand-out (the poller went away)
                queue.offers.extendleft(reversed(pending))
                queue.arrived.set()
        return handed

    def _started(self, task: TaskMessage, worker_id: str) -> Outgoing:
        """The report that a poller has the task: Conductor marks a polled task IN_PROGRESS."""
        started = TaskResult(
            id=f"started:{task.task_id}:{task.poll_count}",
            workflow_instance_id=task.workflow_instance_id,
            task_id=task.task_id,
            status=TaskStatus.IN_PROGRESS,
            worker_id=worker_id,
        )
        return outgoing(self.topics.task_result, started, task.workflow_instance_id, telemetry.inject())

    async def _queue(self, task_type: str) -> _TypeQueue:
        queue = self._queues.get(task_type)
        if queue is not None and not queue.closed:
            return queue
        async with self._joining:
            queue = self._queues.get(task_type)
            if queue is None or queue.closed:
                queue = _TypeQueue(task_type, last_poll=asyncio.get_running_loop().time())
                queue.subscription = await self.bus.add_subscription(
                    [self.topics.tasks(task_type)],
                    self.topics.workers(task_type),
                    self._handler(queue),
                    max_batch=self.max_batch,
                )
                self._queues[task_type] = queue
                log.info("api joined %s for HTTP pollers", self.topics.workers(task_type))
            if self._reaper is None:
                self._reaper = asyncio.create_task(self._close_idle_queues())
        return queue

    def _handler(self, queue: _TypeQueue) -> Callable[[Sequence[Received]], Any]:
        async def handle(batch: Sequence[Received]) -> None:
            if queue.closed:
                raise QueueClosedError(queue.task_type)
            offers: list[_Offer] = []
            dead = []
            loop = asyncio.get_running_loop()
            for received in batch:
                try:
                    task = parse(received, WORKER_TASK)
                except PoisonMessageError as error:
                    dead.append(dead_letter(received, str(error), self.topics.dead_letter))
                    continue
                offers.append(_Offer(task, loop.create_future()))
            await self.bus.publish(dead)
            queue.offers.extend(offers)
            if offers:
                queue.arrived.set()
            # Acknowledge only after every task reached a poller (or proved stale).
            outcomes = await asyncio.gather(*(offer.settled for offer in offers), return_exceptions=True)
            for outcome in outcomes:
                if isinstance(outcome, BaseException):
                    raise outcome

        return handle

    async def _close_idle_queues(self) -> None:
        while True:
            await asyncio.sleep(min(self.idle_close_s / 4, 10.0))
            now = asyncio.get_running_loop().time()
            for task_type, queue in list(self._queues.items()):
                if not queue.closed and now - queue.last_poll > self.idle_close_s:
                    log.info(
                        "no HTTP poller for %s in %.0fs: leaving its group", task_type, self.idle_close_s
                    )
                    await self._close(queue)

    async def _close(self, queue: _TypeQueue) -> None:
        queue.fail_all()
        if queue.subscription is not None:
            await queue.subscription.close()
        if self._queues.get(queue.task_type) is queue:
            del self._queues[queue.task_type]

    async def aclose(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
        for queue in list(self._queues.values()):
            await self._close(queue)
