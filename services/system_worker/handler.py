"""The system worker's consumer: `tasks.<type>` of HTTP, EVENT and the AI tasks
(LLM_CHAT_COMPLETE, LLM_TEXT_COMPLETE, LIST_MCP_TOOLS, CALL_MCP_TOOL) in the workers' groups
(`<prefix>workers.<type>`, the groups SDK workers and the api's HTTP pollers of those types join
too), each task run and its TaskResult published on `task.result`, keyed by the workflow id; a
batch is acknowledged only after its results are published.

- Secrets: `${secrets.NAME}` is resolved at the places the decider marked (`secretPaths`), in
  memory, just before the task runs; the values of the secrets it used are masked (`***`) in its
  output and reason (shared/secrets.py).

- Delivery: at least once. A task message seen twice is run twice (an HTTP request made twice,
  an event published twice); the decider applies the first result and drops the second.
- Concurrency: the tasks of a batch run at once, at most `concurrency` across both types;
  batches are at most `concurrency` messages.
- Bad messages (not JSON, not a task message) are dead-lettered with the reason, as the
  scheduler does; the rest of the batch goes on. An unexpected error while running a task
  FAILS that task with the error as its reason (retried per the TaskDef) instead of redelivering
  the batch forever.
- Heartbeats: while a task runs (an HTTP call may wait up to its readTimeOut, which may be long)
  it is reported IN_PROGRESS every responseTimeoutSeconds/3 (at least 0.5 s; none when the task
  has no response timeout), as cairn/worker.py's runner does, so a slow call is not timed out
  while this worker is alive, and is once it dies. Quick tasks finish before a beat is due.
- Size: a result whose JSON is more than `max_result_bytes` (1,000,000 by default: Kafka's
  default message limit is 1 MiB, aiokafka's `max_request_size` too) could never be published,
  so it is replaced by a FAILED one saying so (for HTTP, with the response's statusCode and
  reasonPhrase kept, without its headers and body).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import httpx
from opentelemetry import trace

from services.system_worker.ai_runners import AiRunners
from services.system_worker.event_task import EventPublisher
from services.system_worker.http_task import MAX_BODY_BYTES, run_http
from services.system_worker.outcome import Outcome
from shared import telemetry
from shared.integrations import Integrations
from shared.messaging import PoisonMessageError, dead_letter, outgoing, parse
from shared.models.messages import WORKER_TASK, TaskMessage, TaskResult
from shared.models.runtime import TaskStatus
from shared.ports.bus import Bus, Outgoing, Received
from shared.secrets import Redactor, SecretError, SecretStore
from shared.topics import Topics

log = logging.getLogger(__name__)
tracer = telemetry.tracer("cairn.system_worker")
meter = telemetry.meter("cairn.system_worker")
tasks_run = meter.create_counter(
    "cairn.system_worker.tasks", description="System tasks run, by task type and resulting status"
)
dead_lettered = meter.create_counter(
    "cairn.deadletters", description="Messages moved to the dead-letter topic"
)

MAX_RESULT_BYTES = 1_000_000
MIN_HEARTBEAT_INTERVAL_S = 0.5
MAX_REDIRECTS = 20


def heartbeat_interval(response_timeout_seconds: int) -> float | None:
    """cairn.worker.heartbeat_interval's rule (services do not import the SDK): a third of the
    response timeout, at least 0.5 s; None without a timeout."""
    if response_timeout_seconds <= 0:
        return None
    return max(MIN_HEARTBEAT_INTERVAL_S, response_timeout_seconds / 3)


class SystemWorker:
    def __init__(
        self,
        bus: Bus,
        topics: Topics,
        *,
        concurrency: int = 10,
        worker_id: str | None = None,
        max_body_bytes: int = MAX_BODY_BYTES,
        max_result_bytes: int = MAX_RESULT_BYTES,
        publish_timeout_s: float = 30.0,
        integrations: Integrations | None = None,
        secrets: SecretStore | None = None,
        max_retry_after_s: int = 600,
    ) -> None:
        self.bus = bus
        self.topics = topics
        self.concurrency = max(1, concurrency)
        self.worker_id = worker_id or f"cairn-system-worker@{socket.gethostname()}-{os.getpid()}"
        self.max_body_bytes = max_body_bytes
        self.max_result_bytes = max_result_bytes
        self._slots = asyncio.Semaphore(self.concurrency)
        self._client = httpx.AsyncClient(follow_redirects=True, max_redirects=MAX_REDIRECTS)
        self._events = EventPublisher(bus, topics, max_result_bytes, publish_timeout_s)
        self.secrets = secrets or SecretStore()
        self._ai = AiRunners(integrations or Integrations(), self.secrets, self._client, max_retry_after_s)
        self._runners: dict[str, Callable[[TaskMessage], Awaitable[Outcome]]] = {
            "HTTP": self._run_http,
            "EVENT": self._events.run,
            "LLM_CHAT_COMPLETE": self._run_llm,
            "LLM_TEXT_COMPLETE": self._run_llm,
            "LIST_MCP_TOOLS": self._run_mcp,
            "CALL_MCP_TOOL": self._run_mcp,
        }

    def attach(self) -> None:
        """Subscribe to every system task type's topic in its workers' group (before `bus.start`)."""
        for task_type in self._runners:
            self.bus.subscribe(
                [self.topics.tasks(task_type)],
                self.topics.workers(task_type),
                self._handler(task_type),
                max_batch=self.concurrency,
            )

    async def aclose(self) -> None:
        await self._ai.aclose()
        await self._client.aclose()

    def _handler(self, task_type: str) -> Callable[[Sequence[Received]], Awaitable[None]]:
        async def handle(batch: Sequence[Received]) -> None:
            await self.handle_batch(task_type, batch)

        return handle

    async def handle_batch(self, task_type: str, batch: Sequence[Received]) -> None:
        results = await asyncio.gather(*(self._one(task_type, received) for received in batch))
        await self.bus.publish(results)

    async def _run_http(self, task: TaskMessage) -> Outcome:
        return await run_http(self._client, task.input_data, self.max_body_bytes)

    async def _run_llm(self, task: TaskMessage) -> Outcome:
        return await self._ai.llm().run(task, task.input_data)

    async def _run_mcp(self, task: TaskMessage) -> Outcome:
        return await self._ai.mcp().run(task.task_type, task.input_data)

    async def _one(self, task_type: str, received: Received) -> Outgoing:
        try:
            task = parse(received, WORKER_TASK)
        except PoisonMessageError as error:
            dead_lettered.add(1, {"topic": received.topic})
            return dead_letter(received, str(error), self.topics.dead_letter)
        async with self._slots:
            with tracer.start_as_current_span(
                f"cairn.system_worker {task_type}",
                context=telemetry.extract(received.headers),
                kind=trace.SpanKind.CONSUMER,
                attributes={"cairn.workflow_id": task.workflow_instance_id, "cairn.task_id": task.task_id},
            ):
                outcome = await self._with_heartbeats(task, self._run(task_type, task))
                headers = telemetry.inject()
        result = self._result(task, outcome)
        tasks_run.add(1, {"type": task_type, "status": str(result.status)})
        if result.status is not TaskStatus.COMPLETED:
            log.info(
                "task %s (%s) %s: %s", task.task_id, task_type, result.status, result.reason_for_incompletion
            )
        return outgoing(self.topics.task_result, result, task.workflow_instance_id, headers)

    async def _run(self, task_type: str, task: TaskMessage) -> Outcome:
        """Run the task with its secrets resolved (in memory, at the places the decider marked),
        and every value of those secrets masked in what comes back."""
        redactor = Redactor([])
        try:
            if task.secret_paths:
                resolved, used = self.secrets.resolve(task.input_data, task.secret_paths)
                redactor = self.secrets.redactor(used)
                task = task.model_copy(update={"input_data": resolved})
            outcome = await self._runners[task_type](task)
        except SecretError as error:
            return Outcome.terminal(str(error))
        except Exception as error:  # a bug here must fail one task, not wedge the partition
            log.exception("system task %s (%s) raised", task.task_id, task_type)  # masked by the log filter
            outcome = Outcome.failed(
                f"the system worker failed running {task_type}: {type(error).__name__}: {error}"
            )
        if not redactor.values:
            return outcome
        reason = redactor.text(outcome.reason) if outcome.reason else None
        return Outcome(outcome.status, redactor.data(outcome.output), reason, outcome.retry_after_s)

    async def _with_heartbeats(self, task: TaskMessage, work: Awaitable[Outcome]) -> Outcome:
        """`work`'s outcome, reporting the task IN_PROGRESS every heartbeat interval meanwhile;
        each beat is published before the next one is due and before the result."""
        interval = heartbeat_interval(task.response_timeout_seconds)
        running = asyncio.ensure_future(work)
        try:
            while interval is not None:
                done, _ = await asyncio.wait({running}, timeout=interval)
                if done:
                    break
                await self._heartbeat(task)
            return await running
        finally:
            if not running.done():
                running.cancel()

    async def _heartbeat(self, task: TaskMessage) -> None:
        beat = TaskResult(
            # A fresh id per beat: the decider drops ids it has already applied (inbox dedupe).
            id=f"heartbeat:{task.task_id}:{task.poll_count}:{uuid.uuid4().hex}",
            workflow_instance_id=task.workflow_instance_id,
            task_id=task.task_id,
            status=TaskStatus.IN_PROGRESS,
            worker_id=self.worker_id,
        )
        try:
            await self.bus.publish(
                [outgoing(self.topics.task_result, beat, task.workflow_instance_id, telemetry.inject())]
            )
        except Exception as error:  # one lost beat is not fatal: the next one may get through
            log.warning("heartbeat for task %s failed: %s", task.task_id, error)

    def _result(self, task: TaskMessage, outcome: Outcome) -> TaskResult:
        result = TaskResult(
            id=f"result:{task.task_id}:{task.poll_count}",
            workflow_instance_id=task.workflow_instance_id,
            task_id=task.task_id,
            status=outcome.status,
            output_data=outcome.output,
            reason_for_incompletion=outcome.reason,
            worker_id=self.worker_id,
            callback_after_seconds=outcome.retry_after_s,
        )
        size = len(result.to_bytes())
        if size <= self.max_result_bytes:
            return result
        reason = (
            f"the task's output is {size} bytes, more than the {self.max_result_bytes} a task result "
            "may carry"
        )
        return result.model_copy(
            update={
                "status": TaskStatus.FAILED,
                "output_data": _without_bodies(outcome.output),
                "reason_for_incompletion": reason,
            }
        )


def _without_bodies(output: dict[str, Any]) -> dict[str, Any]:
    """What is left of an oversized output: an HTTP response's status."""
    response = output.get("response")
    if not isinstance(response, dict):
        return {}
    kept = {key: response.get(key) for key in ("statusCode", "reasonPhrase") if key in response}
    return {"response": {**kept, "headers": {}, "body": None}}
