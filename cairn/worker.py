"""Workers: `@worker("task_type")` on plain or async functions, run by a WorkerRunner over Kafka.

A worker function receives the task's input (a dict) and returns its output (a dict, or None).
Raising an exception fails the attempt (FAILED: retried per the TaskDef); raising TerminalError
fails it for good (FAILED_WITH_TERMINAL_ERROR). A worker may see a task execution more than once
(at-least-once delivery): `task.task_id` is its idempotency key, passed when the function takes a
second parameter.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import socket
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from opentelemetry import trace

from shared import telemetry
from shared.messaging import PoisonMessageError, dead_letter, outgoing, parse
from shared.models.messages import WORKER_TASK, TaskMessage, TaskResult
from shared.models.runtime import TaskStatus
from shared.ports.bus import Bus, Outgoing, Received
from shared.topics import Topics

log = logging.getLogger(__name__)
tracer = telemetry.tracer("cairn.worker")

WorkerFunction = Callable[..., Any]


class TerminalError(Exception):
    """Raise from a worker to fail the task without retries (FAILED_WITH_TERMINAL_ERROR)."""


@dataclass(frozen=True)
class WorkerSpec:
    task_type: str
    function: WorkerFunction

    @property
    def wants_task(self) -> bool:
        return len(inspect.signature(self.function).parameters) >= 2


_REGISTERED: dict[str, WorkerSpec] = {}


def worker(task_type: str) -> Callable[[WorkerFunction], WorkerFunction]:
    """Register a function as the worker for `task_type` (a SIMPLE task's name)."""

    def register(function: WorkerFunction) -> WorkerFunction:
        if task_type in _REGISTERED and _REGISTERED[task_type].function is not function:
            raise ValueError(f"a worker for task type {task_type!r} is already registered")
        _REGISTERED[task_type] = WorkerSpec(task_type, function)
        return function

    return register


def registered_workers() -> list[WorkerSpec]:
    return list(_REGISTERED.values())


async def execute(spec: WorkerSpec, task: TaskMessage, worker_id: str) -> TaskResult:
    """Run one task execution and turn its outcome into a TaskResult."""
    args: tuple[Any, ...] = (task.input_data, task) if spec.wants_task else (task.input_data,)
    status: TaskStatus = TaskStatus.COMPLETED
    output: dict[str, Any] = {}
    reason: str | None = None
    try:
        value = spec.function(*args)
        if inspect.isawaitable(value):
            value = await value
        if value is None:
            output = {}
        elif isinstance(value, dict):
            output = value
        else:
            output = {"result": value}
    except TerminalError as error:
        status, reason = TaskStatus.FAILED_WITH_TERMINAL_ERROR, str(error) or type(error).__name__
    except Exception as error:
        status, reason = TaskStatus.FAILED, f"{type(error).__name__}: {error}"
    if status is not TaskStatus.COMPLETED:
        log.info("task %s (%s) %s: %s", task.task_id, spec.task_type, status, reason)
    return TaskResult(
        id=f"result:{task.task_id}:{task.poll_count}",
        workflow_instance_id=task.workflow_instance_id,
        task_id=task.task_id,
        status=status,
        output_data=output,
        reason_for_incompletion=reason,
        worker_id=worker_id,
    )


class WorkerRunner:
    """Consumes `tasks.<type>` for each worker, runs up to `concurrency` tasks at once, reports
    results on the task-result topic, and acknowledges a batch only after its results are sent."""

    def __init__(
        self,
        bus: Bus,
        topics: Topics,
        workers: Sequence[WorkerSpec] | None = None,
        concurrency: int = 10,
        worker_id: str | None = None,
    ) -> None:
        self.bus = bus
        self.topics = topics
        self.workers = list(workers if workers is not None else registered_workers())
        if not self.workers:
            raise ValueError("no workers registered: decorate functions with @worker('task_type')")
        self.concurrency = concurrency
        self.worker_id = worker_id or f"{socket.gethostname()}-{os.getpid()}"
        self._slots = asyncio.Semaphore(concurrency)

    def attach(self) -> None:
        for spec in self.workers:
            self.bus.subscribe(
                [self.topics.tasks(spec.task_type)],
                self.topics.workers(spec.task_type),
                self._handler(spec),
                max_batch=self.concurrency,
            )

    def _handler(self, spec: WorkerSpec) -> Callable[[Sequence[Received]], Awaitable[None]]:
        async def handle(batch: Sequence[Received]) -> None:
            results = await asyncio.gather(*(self._run_one(spec, received) for received in batch))
            await self.bus.publish([result for result in results if result is not None])

        return handle

    async def _run_one(self, spec: WorkerSpec, received: Received) -> Outgoing | None:
        try:
            task = parse(received, WORKER_TASK)
        except PoisonMessageError as error:
            return dead_letter(received, str(error), self.topics.dead_letter)
        async with self._slots:
            with tracer.start_as_current_span(
                f"cairn.worker {spec.task_type}",
                context=telemetry.extract(received.headers),
                kind=trace.SpanKind.CONSUMER,
                attributes={"cairn.workflow_id": task.workflow_instance_id, "cairn.task_id": task.task_id},
            ):
                result = await execute(spec, task, self.worker_id)
                headers = telemetry.inject()
        return outgoing(self.topics.task_result, result, task.workflow_instance_id, headers)

    async def run(self, stop: asyncio.Event) -> None:
        """Consume until `stop` is set, then finish in-flight tasks and stop."""
        self.attach()
        await self.bus.start()
        try:
            await stop.wait()
        finally:
            await self.bus.stop()
