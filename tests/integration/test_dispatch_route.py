"""Where a task dispatch goes: from the decider's outbox straight to the workers' topic
`tasks.<type>` (no scheduler hop), while the scheduler still forwards, unchanged, what an older
decider put on `task.dispatch`, and dead-letters what it cannot read there."""

from __future__ import annotations

import json
from pathlib import Path

from services.scheduler.handler import SchedulerHandler
from shared.adapters.embedded_bus import EmbeddedBus
from shared.models.messages import TaskMessage
from shared.ports.bus import Received
from shared.topics import Topics


def _task() -> TaskMessage:
    return TaskMessage(
        id="dispatch:t-1:1",
        task_id="t-1",
        task_type="charge",
        task_def_name="charge",
        reference_task_name="charge",
        workflow_instance_id="wf-1",
        workflow_type="payment",
        poll_count=1,
    )


def test_the_outbox_sends_a_dispatch_to_the_workers_topic() -> None:
    topics = Topics()
    assert topics.for_outbox(_task()) == topics.tasks("charge") == "cairn.tasks.charge"


async def test_the_scheduler_forwards_an_older_deciders_dispatch_and_dead_letters_garbage(
    tmp_path: Path,
) -> None:
    topics = Topics()
    bus = EmbeddedBus(str(tmp_path / "bus.db"))
    try:
        task = _task()
        batch = [
            Received(topics.task_dispatch, task.to_bytes(), "wf-1", {"traceparent": "x"}, 0, 0),
            Received(topics.task_dispatch, b'{"poison": 1}', "wf-2", {}, 0, 1),
        ]
        await SchedulerHandler(bus, topics).handle_batch(batch)
        [forwarded] = await bus.peek(topics.tasks("charge"), 10)
        assert TaskMessage.model_validate_json(forwarded.value) == task and forwarded.key == "wf-1"
        [dead] = await bus.peek(topics.dead_letter, 10)
        assert json.loads(dead.value)["topic"] == topics.task_dispatch
    finally:
        await bus.stop()
