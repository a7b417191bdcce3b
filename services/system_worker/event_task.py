"""EVENT: publish one message to the task's sink, as Conductor's Event task does
(docs/research/conductor-operators.md, EVENT).

The decider has resolved `sink` into the input. `kafka:<topic>` publishes through the Bus port
(Kafka on a deployment, the embedded bus in `cairn dev`): key = the task id, value = the JSON of
the task's output, which is a copy of its input plus `workflowInstanceId`, `workflowType`,
`workflowVersion`, `correlationId`, `taskToDomain` (empty: Cairn has no task domains) and
`event_produced` (the sink, e.g. "kafka:orders"); then the task is COMPLETED. A topic that does
not exist yet is created (`ensure_topics`) before the first message to it.

Where Cairn differs from Conductor (for docs/operators.md):
- `kafka:` and `conductor` sinks only: anything else (`sqs:`, `nats:`, ...) FAILS the task with
  "Invalid / Unsupported sink specified: <sink>" (registration refuses such literal sinks; this
  catches an expression that resolved to one). A `conductor:<workflow>:<queue>` queue is the topic
  `<prefix>conductor.<workflow>.<queue>`, which the events service consumes for the handlers
  listening on it.
- A topic that is not a valid Kafka name, or that is one of Cairn's own topics (the fixed ones
  and `<prefix>tasks.*`: a message there could only be dead-lettered), FAILS the task.
- A message bigger than a task result may be (handler.py's `max_result_bytes`) FAILS the task
  before anything is published.
- The message is published at least once: a worker that dies after publishing and before its
  result is delivered publishes it again when the task is redelivered (the message key, the task
  id, lets a consumer drop the repeat).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from services.system_worker.outcome import Outcome
from shared import telemetry
from shared.core.tasktypes.system import KAFKA_TOPIC
from shared.models.events import source_topic
from shared.models.messages import TaskMessage
from shared.models.runtime import TaskStatus
from shared.ports.bus import Bus, Outgoing
from shared.topics import Topics

KAFKA_SINK = "kafka:"


class EventPublisher:
    """Runs EVENT tasks on one bus; remembers the topics it has already made sure exist."""

    def __init__(self, bus: Bus, topics: Topics, max_message_bytes: int, publish_timeout_s: float) -> None:
        self.bus = bus
        self.topics = topics
        self.max_message_bytes = max_message_bytes
        self.publish_timeout_s = publish_timeout_s
        self._ensured: set[str] = set()
        self._own = set(topics.fixed)

    def _topic_problem(self, topic: str) -> str | None:
        if not KAFKA_TOPIC.match(topic) or topic in (".", ".."):
            return f"{topic!r} is not a Kafka topic name (letters, digits, '.', '_' and '-', at most 249)"
        if topic in self._own or topic.startswith(self.topics.tasks("")):
            return f"{topic!r} is one of Cairn's own topics"
        return None

    async def run(self, task: TaskMessage) -> Outcome:
        sink = task.input_data.get("sink")
        queue = source_topic(sink, self.topics.prefix) if isinstance(sink, str) else None
        if isinstance(sink, str) and sink.startswith("conductor:") and queue is not None:
            topic = queue  # Conductor's internal queue: Cairn's own topic, read by the events service
        elif not isinstance(sink, str) or not sink.startswith(KAFKA_SINK):
            return Outcome.failed(f"Invalid / Unsupported sink specified: {sink}")
        else:
            topic = sink.removeprefix(KAFKA_SINK)
            if problem := self._topic_problem(topic):
                return Outcome.failed(f"Invalid / Unsupported sink specified: {sink}: {problem}")
        output: dict[str, Any] = {
            **task.input_data,
            "workflowInstanceId": task.workflow_instance_id,
            "workflowType": task.workflow_type,
            "workflowVersion": task.workflow_version,
            "correlationId": task.correlation_id,
            "taskToDomain": {},
            "event_produced": sink,
        }
        value = json.dumps(output, separators=(",", ":")).encode()
        if len(value) > self.max_message_bytes:
            return Outcome.failed(
                f"the event for {sink} is {len(value)} bytes, more than the {self.max_message_bytes} "
                "a message may carry",
            )
        # the `id` header: an event handler acts once on the event of one task execution, however
        # often it is published (a redelivered task publishes it again)
        headers = {**telemetry.inject(), "id": task.task_id}
        message = Outgoing(topic=topic, value=value, key=task.task_id, headers=headers)
        try:
            async with asyncio.timeout(self.publish_timeout_s):
                if topic not in self._ensured:
                    await self.bus.ensure_topics([topic])
                    self._ensured.add(topic)
                await self.bus.publish([message])
        except TimeoutError:
            return Outcome.failed(
                f"publishing to {sink} did not finish within {self.publish_timeout_s:.0f}s", output
            )
        except Exception as error:
            return Outcome.failed(f"publishing to {sink} failed: {type(error).__name__}: {error}", output)
        return Outcome(TaskStatus.COMPLETED, output)
