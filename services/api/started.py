"""The "started" reports of handed-out tasks, published before the poll is answered or, if
configured, held back briefly so a quick result carries them.

Conductor marks a polled task IN_PROGRESS. Cairn does it with a TaskResult IN_PROGRESS on the
task-result topic, and each such report is a decision and a commit of its own. With
CAIRN_API_STARTED_REPORT_DELAY_S above 0 a report waits up to that long: a result (or an
IN_PROGRESS update) the worker sends meanwhile goes out in the same publish, after it, and the
decider applies both in one decision; a task still running when the delay is up is reported
alone. A held report keeps its dispatch unsettled, and a member of the type's group takes its
next batch only once its last one is settled, so the wait pays only with more than one member
(CAIRN_API_DISPATCH_CONSUMERS): measured, one member with the wait was slower at full load, two
were faster (benchmarks/README.md). `cairn dev` on its embedded bus uses 0.1 s and two members.

Nothing is given up either way: a dispatch's bus batch is acknowledged only once its report has
been published (`Offer.reported`), so an api that dies holding one leaves the dispatch to be
delivered again; the next api finds it held by the dead one's confirmed claim and reports it
started on the holder's behalf (`TaskDispatcher._report_held`). So a hand-out is always
reported, and a task whose worker died is still timed out by its responseTimeoutSeconds.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from services.api.offers import Offer, is_stale
from shared import telemetry
from shared.messaging import outgoing
from shared.models.messages import TaskMessage, TaskResult
from shared.models.runtime import TaskStatus
from shared.ports.bus import Bus, Outgoing
from shared.ports.store import Store
from shared.topics import Topics

log = logging.getLogger(__name__)

DEFAULT_STARTED_REPORT_DELAY_S = 0.0


def started_report(topics: Topics, task: TaskMessage, worker_id: str | None) -> Outgoing:
    """The report that a poller has the task. One id per (execution, dispatch number): a report
    made again for the same hand-out (by another api, after a crash) is applied once."""
    started = TaskResult(
        id=f"started:{task.task_id}:{task.poll_count}",
        workflow_instance_id=task.workflow_instance_id,
        task_id=task.task_id,
        status=TaskStatus.IN_PROGRESS,
        worker_id=worker_id,
    )
    return outgoing(topics.task_result, started, task.workflow_instance_id, telemetry.inject())


class StartedReports:
    """The reports not yet published, by task id, and the timer that publishes them."""

    def __init__(self, bus: Bus, store: Store, topics: Topics, delay_s: float) -> None:
        if delay_s < 0:
            raise ValueError("the started report's delay cannot be negative")
        self.bus = bus
        self.store = store
        self.topics = topics
        self.delay_s = delay_s
        self._held: dict[str, tuple[Offer, Outgoing]] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._flushing: set[asyncio.Task[None]] = set()

    async def hold(self, offers: Sequence[Offer], worker_id: str) -> None:
        """Keep the reports of a poll's hand-out until a result carries them or the delay is up
        (with no delay, publish them now). A task handed out again (its first answer was lost)
        keeps one report, naming the poller that has it now."""
        reports = [(offer, started_report(self.topics, offer.task, worker_id)) for offer in offers]
        for offer, _ in reports:
            offer.reported = False
        if self.delay_s == 0:
            try:
                await self._publish(reports)
            except Exception as error:  # back to the bus: held by this api's claim, then reported
                for offer, _ in reports:
                    offer.fail(error)
                raise
            return
        # One entry per task: a newer dispatch of it is on the same partition (one key per
        # workflow), which is delivered again only once this dispatch settled, report and all.
        for offer, report in reports:
            self._held[offer.task.task_id] = (offer, report)
        if self._held and self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.delay_s, self._flush_soon)

    async def publish_with(self, task_id: str, messages: list[Outgoing]) -> None:
        """Publish a worker's report on a task, after the task's held started report if there is
        one, in one publish: the decider sees the start and the result in one batch."""
        held = self._held.pop(task_id, None)
        if held is None:
            await self.bus.publish(messages)
            return
        offer, report = held
        try:
            await self.bus.publish([report, *messages])
        except BaseException:
            self._held.setdefault(task_id, held)  # the timer publishes it yet
            raise
        offer.mark_reported()

    def _flush_soon(self) -> None:
        self._timer = None
        flush = asyncio.get_running_loop().create_task(self._flush())
        self._flushing.add(flush)
        flush.add_done_callback(self._flushing.discard)

    async def _flush(self) -> None:
        """Publish every held report whose task has not provably moved on (a result reached
        another api replica, say); those are settled without one."""
        held = list(self._held.values())
        self._held.clear()
        if not held:  # every report went out with its result
            return
        try:
            ids = list({offer.task.workflow_instance_id for offer, _ in held})
            heads = await self.store.load_heads(ids)
            current = [
                (offer, report)
                for offer, report in held
                if not is_stale(heads.get(offer.task.workflow_instance_id), offer.task)
            ]
            await self._publish(current)
            for offer, _ in held:
                offer.mark_reported()
        except Exception as error:  # the dispatches go back to the bus; their next hand-out reports
            log.warning("publishing %d started reports failed: %s", len(held), error)
            for offer, _ in held:
                offer.fail(error)

    async def _publish(self, reports: list[tuple[Offer, Outgoing]]) -> None:
        if reports:
            await self.bus.publish([report for _, report in reports])
        for offer, _ in reports:
            offer.mark_reported()

    async def aclose(self) -> None:
        """Publish what is held now (an api stopping cleanly leaves no report to its successor)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._held:
            await self._flush()
        for flush in list(self._flushing):
            await flush
