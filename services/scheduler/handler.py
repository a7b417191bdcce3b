"""The scheduler: forwards task dispatch requests from `task.dispatch` to `tasks.<taskType>`.

Since issue 16 the decider's outbox publishes a dispatch straight to `tasks.<taskType>`
(shared/topics.py `for_outbox`): forwarding it unchanged cost every step one more append, fetch
and offset commit, and a hop of latency. The scheduler keeps consuming `task.dispatch` so that
dispatches an older decider wrote there (a rolling upgrade, a backlog) still reach the workers.
Rate limits, concurrency limits and priorities, when Cairn supports them, are where a dispatch
would come back through here: the decider would send only the limited task types this way.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from shared import telemetry
from shared.messaging import PoisonMessageError, dead_letter, outgoing, parse
from shared.models.messages import WORKER_TASK
from shared.ports.bus import Bus, Outgoing, Received
from shared.topics import Topics

log = logging.getLogger(__name__)
tracer = telemetry.tracer("cairn.scheduler")


class SchedulerHandler:
    def __init__(self, bus: Bus, topics: Topics) -> None:
        self.bus = bus
        self.topics = topics

    async def handle_batch(self, batch: Sequence[Received]) -> None:
        out: list[Outgoing] = []
        for received in batch:
            try:
                task = parse(received, WORKER_TASK)
            except PoisonMessageError as error:
                out.append(dead_letter(received, str(error), self.topics.dead_letter))
                continue
            with tracer.start_as_current_span(
                "cairn.schedule",
                context=telemetry.extract(received.headers),
                attributes={"cairn.workflow_id": task.workflow_instance_id, "cairn.task_id": task.task_id},
            ):
                headers = telemetry.inject()
            out.append(outgoing(self.topics.tasks(task.task_type), task, task.workflow_instance_id, headers))
        await self.bus.publish(out)
