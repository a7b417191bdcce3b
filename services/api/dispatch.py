"""Handing task executions to HTTP pollers (Conductor's `GET /api/tasks/poll…`).

The api joins a task type's worker group (`Topics.workers(type)`, the group Kafka workers use)
when the type is first polled, so HTTP and bus workers share the type's partitions and every
dispatch goes to exactly one of them. A type nobody has polled for `idle_close_s` leaves the
group again, so its partitions go back to bus workers.

A batch from the bus is acknowledged only once each of its tasks is settled: handed to a poller
that has its answer, found stale, or held by another poller. A hand-out is fenced by a store
claim keyed by (task id, dispatch number), so a redelivered dispatch that one poller holds is
never given to a second poller, on this api instance or another. The claim is short (the
hand-out's confirmation time, CAIRN_API_HANDOUT_CONFIRM_S) until the answer has been sent, and
only then is renewed to the task's responseTimeoutSeconds and settled (services/api/handout.py).
So a hand-out lost on the way is handed out again within seconds, not after the response timeout:

- the poller hung up, or the answer was never sent: the task goes back to the head of its queue
  (at once, or when the confirmation time runs out) and the next poll gets it;
- the api process died between claim and answer: the batch was never acknowledged, the bus
  delivers it again after the restart, and the dead process's short claim has run out (a
  dispatch refused by a claim is tried again for one confirmation time, so a claim that was
  never confirmed is outwaited; one still live after that was confirmed, and the dispatch is
  dropped as held).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from services.api.conductor import polled_task_json
from services.api.handout import HandOut
from services.api.offers import Offer, QueueClosedError, TypeQueue, is_stale
from services.api.started import DEFAULT_STARTED_REPORT_DELAY_S, StartedReports, started_report
from shared.messaging import PoisonMessageError, dead_letter, parse
from shared.models.messages import WORKER_TASK, TaskMessage
from shared.ports.bus import Bus, Received
from shared.ports.store import Store
from shared.topics import Topics

log = logging.getLogger(__name__)

DEFAULT_MAX_TASK_TYPES = 500


class TooManyTaskTypesError(Exception):
    """A poll for one more task type than the api serves at once (the routes answer 429)."""

    def __init__(self, served: int, idle_close_s: float) -> None:
        super().__init__(
            f"taskType: this api already serves {served} task types to HTTP pollers, its limit "
            "(CAIRN_API_MAX_POLLED_TASK_TYPES); poll this one once a type nobody polls is released "
            "(CAIRN_API_POLL_IDLE_CLOSE_S), or from another replica"
        )
        self.retry_after_s = max(1, round(idle_close_s))


__all__ = ["QueueClosedError", "TaskDispatcher", "is_stale"]

DEFAULT_HANDOUT_CONFIRM_S = 10.0
REFUSED_RETRY_S = 1.0
"""How often a dispatch refused by another holder's claim is tried again, while that claim may
still be an unconfirmed hand-out."""
STALE = object()
"""A hand-out's outcome for an offer it did not try to claim: its workflow has moved on."""


class TaskDispatcher:
    """The api's side of HTTP polling: one queue per polled task type, fed by its bus group."""

    def __init__(
        self,
        bus: Bus,
        store: Store,
        topics: Topics,
        clock: Callable[[], int],
        *,
        idle_close_s: float = 120.0,
        max_batch: int = 100,
        handout_confirm_s: float = DEFAULT_HANDOUT_CONFIRM_S,
        kill_after_claim: str | None = None,
        max_task_types: int = DEFAULT_MAX_TASK_TYPES,
        started_report_delay_s: float = DEFAULT_STARTED_REPORT_DELAY_S,
        consumers: int = 1,
    ) -> None:
        if handout_confirm_s <= 0:
            raise ValueError("handout_confirm_s must be positive")
        self.bus = bus
        self.store = store
        self.topics = topics
        self.clock = clock
        self.idle_close_s = idle_close_s
        self.max_batch = max_batch
        self.handout_confirm_s = handout_confirm_s
        self.max_task_types = max_task_types
        """Task types served at once: each is a consumer in a group of its own, so a poller
        naming new types (any string is one) must not make the api join groups without end."""
        self.kill_after_claim = kill_after_claim
        if consumers < 1:
            raise ValueError("consumers must be at least 1")
        self.consumers = consumers
        """Members per polled type in its worker group: a batch waiting on its hand-outs holds
        up only its own partitions."""
        self.started = StartedReports(bus, store, topics, started_report_delay_s)
        """The hand-outs' started reports, held back for a quick result to carry them."""
        self._queues: dict[str, TypeQueue] = {}
        self._joining = asyncio.Lock()
        self._reaper: asyncio.Task[None] | None = None

    async def poll(
        self,
        task_type: str,
        worker_id: str,
        count: int,
        timeout_s: float,
        gone: Callable[[], Awaitable[bool]] | None = None,
    ) -> HandOut:
        """Up to `count` tasks for `worker_id`, waiting up to `timeout_s` for the first one. The
        caller answers with them and then confirms the hand-out (`HandOutResponse`); unconfirmed,
        the tasks go back to the queue after the confirmation time.

        `gone` says whether the poller hung up (its process died mid long-poll): a task is
        never handed to a connection nobody reads."""
        loop = asyncio.get_running_loop()
        queue = await self._queue(task_type)
        deadline = loop.time() + max(timeout_s, 0.0)
        hand_out = HandOut(queue, self.store, self.clock, self.handout_confirm_s)
        try:
            while True:
                queue.last_poll = loop.time()
                if gone is not None and not hand_out.tasks and await gone():
                    log.info("%s poller %s hung up before a task arrived", task_type, worker_id)
                    return hand_out
                offers = queue.take(count - len(hand_out.tasks))
                if offers:
                    await self._hand_out(queue, offers, worker_id, hand_out)
                    continue
                remaining = deadline - loop.time()
                if hand_out.tasks or remaining <= 0 or queue.closed:
                    return hand_out
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(queue.arrived.wait(), remaining)
        except BaseException:
            hand_out.abandon("the poll failed or was cancelled")
            raise
        finally:
            hand_out.arm()

    async def _hand_out(
        self, queue: TypeQueue, offers: Sequence[Offer], worker_id: str, hand_out: HandOut
    ) -> None:
        """Claim the offers that are still current (for the confirmation time) into `hand_out`.
        Every offer taken leaves settled (stale, held by another poller, or failed back to the
        bus), in `hand_out`, waiting to be tried again, or back at the head of the queue (the
        poll was cancelled), so no bus batch waits forever on a task nobody holds."""
        pending = list(offers)
        try:
            ids = list({offer.task.workflow_instance_id for offer in pending})
            heads = await self.store.load_heads(ids)
            now = self.clock()
            current = [o for o in pending if not is_stale(heads.get(o.task.workflow_instance_id), o.task)]
            outcomes = await self._claim_all(current, worker_id, now)
            claims = dict(zip(map(id, current), outcomes, strict=True))
            claimed: list[Offer] = []
            held: list[Offer] = []
            while pending:
                offer = pending[0]
                outcome = claims.get(id(offer), STALE)
                if outcome is STALE:
                    log.debug("dropping stale dispatch of task %s", offer.task.task_id)
                    offer.settle()
                elif isinstance(outcome, BaseException):
                    log.warning("claiming task %s failed: %s", offer.task.task_id, outcome)
                    offer.fail(outcome)  # back to the bus: its batch is delivered again
                elif outcome:
                    hand_out.add(offer, polled_task_json(offer.task, worker_id, now))
                    claimed.append(offer)
                    self._fault_after_claim(offer.task)
                elif not offer.settled.done() and self._refused(queue, offer, now):
                    held.append(offer)
                pending.pop(0)
            # Before the answer goes out: a result the poller sends at once finds its report.
            await self.started.hold(claimed, worker_id)
            await self._report_held(held)
        except Exception as error:
            # The store failed: the rest go back to the bus (their batch is delivered again).
            log.warning("handing out %s tasks failed: %s", queue.task_type, error)
            for offer in pending:
                offer.fail(error)
            pending = []
        finally:
            if pending:  # cancelled mid hand-out (the poller went away)
                queue.put_back(pending)

    async def _claim_all(
        self, offers: Sequence[Offer], worker_id: str, now: int
    ) -> list[bool | BaseException]:
        """Claim the offers all at once (the store commits the claims of one turn together:
        shared/adapters/sqlite_group.py); each one's outcome, or the error its claim raised. One
        offer (update-v2's hand-out, every hand-out at low load) is claimed without a task."""
        if len(offers) == 1:
            try:
                return [await self._claim(offers[0], worker_id, now)]
            except Exception as error:
                return [error]
        return await asyncio.gather(*(self._claim(o, worker_id, now) for o in offers), return_exceptions=True)

    async def _claim(self, offer: Offer, worker_id: str, now: int) -> bool:
        """Claim the dispatch for the confirmation time; a dispatch this api claimed before (its
        answer was lost) renews its own claim, so it goes out again without waiting."""
        lease_ms = int(self.handout_confirm_s * 1000)
        if offer.holder is None:
            offer.holder = f"{worker_id}/{uuid.uuid4().hex}"
            return await self.store.claim_task(offer.claim_id, offer.holder, now, lease_ms)
        return await self.store.renew_task_claim(offer.claim_id, offer.holder, now, lease_ms)

    def _refused(self, queue: TypeQueue, offer: Offer, now: int) -> bool:
        """Another holder's claim is live. It may be a hand-out that will never be confirmed (its
        api died before answering: this is the redelivery): try again until a whole confirmation
        time has passed, by when such a claim has run out. Still refused then, the claim was
        confirmed: the dispatch is held by another poller (True), to be reported and dropped."""
        task = offer.task
        if offer.refused_at is None:
            offer.refused_at = now
        waited_s = (now - offer.refused_at) / 1000
        if waited_s > self.handout_confirm_s:
            log.info("task %s dispatch %d is held by another poller", task.task_id, task.poll_count)
            return True
        log.log(
            logging.INFO if waited_s == 0 else logging.DEBUG,
            "task %s dispatch %d is claimed by another poller; trying again until its claim may run out",
            task.task_id,
            task.poll_count,
        )
        delay_s = min(REFUSED_RETRY_S, self.handout_confirm_s - waited_s + 0.05)
        asyncio.get_running_loop().call_later(delay_s, queue.put_back, [offer])
        return False

    async def _report_held(self, held: list[Offer]) -> None:
        """Report dispatches held by another poller started, on the holder's behalf, then drop
        them: the holder's api may have died with its report held back (services/api/started.py),
        and a task a poller has must be IN_PROGRESS for its response timeout to apply. A holder
        that did report used the same id, so the decider applies the report once."""
        try:
            if held:
                await self.bus.publish([started_report(self.topics, offer.task, None) for offer in held])
        except Exception as error:
            for offer in held:
                offer.fail(error)
            raise
        for offer in held:
            offer.settle()

    def _fault_after_claim(self, task: TaskMessage) -> None:
        """Test hook (CAIRN_FAULT_KILL_AFTER_CLAIM): die as `kill -9` would, claim made, poll
        unanswered. Does nothing unless the setting names this task type."""
        if self.kill_after_claim is not None and task.task_type == self.kill_after_claim:
            log.error("test hook CAIRN_FAULT_KILL_AFTER_CLAIM: SIGKILL after claiming task %s", task.task_id)
            os.kill(os.getpid(), signal.SIGKILL)

    async def _queue(self, task_type: str) -> TypeQueue:
        queue = self._queues.get(task_type)
        if queue is not None and not queue.closed:
            return queue
        async with self._joining:
            queue = self._queues.get(task_type)
            if queue is None or queue.closed:
                if len(self._queues) >= self.max_task_types:
                    raise TooManyTaskTypesError(len(self._queues), self.idle_close_s)
                queue = TypeQueue(task_type, last_poll=asyncio.get_running_loop().time())
                for _ in range(self.consumers):
                    queue.subscriptions.append(
                        await self.bus.add_subscription(
                            [self.topics.tasks(task_type)],
                            self.topics.workers(task_type),
                            self._handler(queue),
                            max_batch=self.max_batch,
                        )
                    )
                self._queues[task_type] = queue
                log.info("api joined %s for HTTP pollers", self.topics.workers(task_type))
            if self._reaper is None:
                self._reaper = asyncio.create_task(self._close_idle_queues())
        return queue

    def _handler(self, queue: TypeQueue) -> Callable[[Sequence[Received]], Any]:
        async def handle(batch: Sequence[Received]) -> None:
            if queue.closed:
                raise QueueClosedError(queue.task_type)
            offers: list[Offer] = []
            dead = []
            loop = asyncio.get_running_loop()
            for received in batch:
                try:
                    task = parse(received, WORKER_TASK)
                except PoisonMessageError as error:
                    dead.append(dead_letter(received, str(error), self.topics.dead_letter))
                    continue
                offers.append(Offer(task, loop.create_future()))
            await self.bus.publish(dead)
            queue.offers.extend(offers)
            if offers:
                queue.arrived.set()
            # Acknowledge only once every task reached a poller that has its answer (or proved
            # stale, or held by another poller).
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

    async def _close(self, queue: TypeQueue) -> None:
        queue.fail_all()
        for subscription in queue.subscriptions:
            await subscription.close()
        if self._queues.get(queue.task_type) is queue:
            del self._queues[queue.task_type]

    async def aclose(self) -> None:
        await self.started.aclose()
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
        for queue in list(self._queues.values()):
            await self._close(queue)
