"""Workers: `@worker("task_type")` on plain or async functions, run by a WorkerRunner over Kafka.

A worker function receives the task's input (a dict) and returns its output (a dict, or None).
Raising an exception fails the attempt (FAILED: retried per the TaskDef); raising TerminalError
fails it for good (FAILED_WITH_TERMINAL_ERROR). Returning `InProgress(n)` says "not done yet:
hand me this task again in n seconds" (Conductor's IN_PROGRESS + callbackAfterSeconds). A worker
may see a task execution more than once (at-least-once delivery): `task.task_id` is its
idempotency key, passed when the function takes a second parameter.

Plain functions run in a thread pool of `concurrency` threads, so a blocking worker neither
stalls the other tasks nor the heartbeats. While a function runs, its runner reports the task
IN_PROGRESS every `heartbeat_interval(responseTimeoutSeconds)` seconds, so a task that runs longer
than its TaskDef's responseTimeoutSeconds is not timed out while its worker is alive (off with
`auto_heartbeat=False` / `cairn worker --no-heartbeat`); `heartbeat()` sends one on demand.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import logging
import os
import socket
import uuid
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field
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
HeartbeatSender = Callable[[TaskResult], Awaitable[bool]]
"""Delivers one IN_PROGRESS report; False means the execution is no longer current (stop beating)."""

MIN_HEARTBEAT_INTERVAL_S = 0.5


class TerminalError(Exception):
    """Raise from a worker to fail the task without retries (FAILED_WITH_TERMINAL_ERROR)."""


class FailedWithOutput(Exception):
    """Raise from a worker to fail the attempt (FAILED) with `reason` and an output that says more
    (cairn.workflow's activities send the error's type and stack trace this way)."""

    def __init__(self, reason: str, output: dict[str, Any]) -> None:
        super().__init__(reason)
        self.reason = reason
        self.output = output


@dataclass(frozen=True)
class InProgress:
    """Return from a worker to report the task IN_PROGRESS and have it handed to a worker again
    after `callback_after_seconds` (Conductor's callbackAfterSeconds): for polling something slow
    without holding a worker slot. `output` is merged into the task's output. The next delivery
    has the same `task_id` and a higher `poll_count`."""

    callback_after_seconds: int
    output: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.callback_after_seconds < 1:
            # 0 would leave the task IN_PROGRESS with nobody holding it until responseTimeoutSeconds.
            raise ValueError("InProgress needs callback_after_seconds >= 1")


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


def heartbeat_interval(response_timeout_seconds: int) -> float | None:
    """Seconds between automatic heartbeats: a third of responseTimeoutSeconds, so one lost or
    late beat never times out a task whose worker is alive, and at least 0.5 s, so a tiny timeout
    cannot become a flood of reports. None (no automatic beats) when the task has no timeout."""
    if response_timeout_seconds <= 0:
        return None
    return max(MIN_HEARTBEAT_INTERVAL_S, response_timeout_seconds / 3)


class _Heartbeats:
    """IN_PROGRESS reports for one running task: `interval` seconds after the last one (None:
    only on demand) and whenever the worker function calls `heartbeat()`. A request that arrives
    while a report is being sent is merged into one more report. Costs one timer handle until a
    beat is due (most tasks finish first); each beat is a short task on the runner's loop."""

    def __init__(self, make: Callable[[], TaskResult], send: HeartbeatSender, interval: float | None) -> None:
        self._make = make
        self._send = send
        self._interval = interval
        self._loop = asyncio.get_running_loop()
        self._timer: asyncio.TimerHandle | None = None
        self._sending: asyncio.Task[None] | None = None
        self._again = False
        self._stopped = False
        self._arm()

    def request(self) -> None:
        """Ask for a report now; safe from any thread (plain worker functions run in a pool)."""
        try:
            self._loop.call_soon_threadsafe(self._due)
        except RuntimeError:
            pass  # the loop is closed: the runner is gone, and so is anyone to report to

    async def stop(self) -> None:
        """Stop beating; a report already on its way is finished first, so it cannot arrive
        after the task's result."""
        self._stopped = True
        if self._timer is not None:
            self._timer.cancel()
        if self._sending is not None:
            await asyncio.shield(self._sending)

    def _arm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self._interval is not None and not self._stopped:
            self._timer = self._loop.call_later(self._interval, self._due)

    def _due(self) -> None:
        if self._stopped:
            return
        if self._sending is not None:
            self._again = True
            return
        self._sending = self._loop.create_task(self._beat())

    async def _beat(self) -> None:
        try:
            while not self._stopped:
                self._again = False
                if not await self._send_one():
                    self._stopped = True  # no longer current: nobody is listening
                elif not self._again:
                    break
        finally:
            self._sending = None
            self._arm()

    async def _send_one(self) -> bool:
        try:
            return await self._send(self._make())
        except Exception as error:  # one failed beat is not fatal: the next one may get through
            log.warning("heartbeat failed: %s", error)
            return True


_CURRENT_BEATS: contextvars.ContextVar[_Heartbeats | None] = contextvars.ContextVar(
    "cairn_heartbeats", default=None
)


def heartbeat() -> None:
    """Report the running task IN_PROGRESS now, resetting its responseTimeoutSeconds clock.

    For worker functions whose runner has automatic heartbeats off, or that want to say "alive"
    exactly when they make progress. Call it from the worker function (plain or async, any
    thread it runs in); it returns at once and the runner sends the report in the background.
    Outside a running task it does nothing, so worker functions stay callable in unit tests."""
    beats = _CURRENT_BEATS.get()
    if beats is not None:
        beats.request()


def _heartbeat_result(task: TaskMessage, worker_id: str) -> TaskResult:
    # A fresh id per beat: the decider drops ids it has already applied (inbox dedupe).
    return TaskResult(
        id=f"heartbeat:{task.task_id}:{task.poll_count}:{uuid.uuid4().hex}",
        workflow_instance_id=task.workflow_instance_id,
        task_id=task.task_id,
        status=TaskStatus.IN_PROGRESS,
        worker_id=worker_id,
    )


async def _call(spec: WorkerSpec, task: TaskMessage, executor: Executor | None) -> Any:
    """The function's return value: async functions on the loop, plain ones in `executor` (with
    this task's context, so `heartbeat()` and the trace span work there too)."""
    args: tuple[Any, ...] = (task.input_data, task) if spec.wants_task else (task.input_data,)
    if inspect.iscoroutinefunction(spec.function):
        return await spec.function(*args)
    context = contextvars.copy_context()
    value = await asyncio.get_running_loop().run_in_executor(executor, context.run, spec.function, *args)
    if inspect.isawaitable(value):
        value = await value
    return value


async def execute(
    spec: WorkerSpec,
    task: TaskMessage,
    worker_id: str,
    *,
    send_heartbeat: HeartbeatSender | None = None,
    auto_heartbeat: bool = True,
    executor: Executor | None = None,
) -> TaskResult:
    """Run one task execution and turn its outcome into a TaskResult. With `send_heartbeat`, the
    task is reported IN_PROGRESS while the function runs (automatically when `auto_heartbeat`,
    and on each `heartbeat()` call); beating stops before this returns."""
    status: TaskStatus = TaskStatus.COMPLETED
    output: dict[str, Any] = {}
    reason: str | None = None
    callback = 0
    beats = None
    if send_heartbeat is not None:
        interval = heartbeat_interval(task.response_timeout_seconds) if auto_heartbeat else None
        beats = _Heartbeats(lambda: _heartbeat_result(task, worker_id), send_heartbeat, interval)
    token = _CURRENT_BEATS.set(beats)
    try:
        value = await _call(spec, task, executor)
        if isinstance(value, InProgress):
            status, output, callback = TaskStatus.IN_PROGRESS, value.output, value.callback_after_seconds
        else:
            output = _as_output(value)
    except TerminalError as error:
        status, reason = TaskStatus.FAILED_WITH_TERMINAL_ERROR, str(error) or type(error).__name__
    except FailedWithOutput as error:
        status, reason, output = TaskStatus.FAILED, error.reason, error.output
    except Exception as error:
        status, reason = TaskStatus.FAILED, f"{type(error).__name__}: {error}"
    finally:
        _CURRENT_BEATS.reset(token)
        if beats is not None:
            await beats.stop()
    if status in (TaskStatus.FAILED, TaskStatus.FAILED_WITH_TERMINAL_ERROR):
        log.info("task %s (%s) %s: %s", task.task_id, spec.task_type, status, reason)
    return TaskResult(
        id=f"result:{task.task_id}:{task.poll_count}",
        workflow_instance_id=task.workflow_instance_id,
        task_id=task.task_id,
        status=status,
        output_data=output,
        reason_for_incompletion=reason,
        worker_id=worker_id,
        callback_after_seconds=callback,
    )


def _as_output(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if isinstance(value, dict):
        return value
    return {"result": value}


class WorkerRunner:
    """Consumes `tasks.<type>` for each worker, runs up to `concurrency` tasks at once, reports
    results on the task-result topic, and acknowledges a batch only after its results are sent.

    Kafka workers report no start: a task stays SCHEDULED until its result, unless it runs past
    its first heartbeat, which marks it IN_PROGRESS, so responseTimeoutSeconds then recovers it
    if this worker dies. Quick tasks (most) finish before a beat is due and cost no extra message.
    `auto_heartbeat=False` leaves only the beats the functions ask for with `heartbeat()`."""

    def __init__(
        self,
        bus: Bus,
        topics: Topics,
        workers: Sequence[WorkerSpec] | None = None,
        concurrency: int = 10,
        worker_id: str | None = None,
        auto_heartbeat: bool = True,
    ) -> None:
        self.bus = bus
        self.topics = topics
        self.workers = list(workers if workers is not None else registered_workers())
        if not self.workers:
            raise ValueError("no workers registered: decorate functions with @worker('task_type')")
        self.concurrency = concurrency
        self.worker_id = worker_id or f"{socket.gethostname()}-{os.getpid()}"
        self.auto_heartbeat = auto_heartbeat
        self._slots = asyncio.Semaphore(concurrency)
        self._executor = ThreadPoolExecutor(concurrency, thread_name_prefix="cairn-worker")

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
                result = await execute(
                    spec,
                    task,
                    self.worker_id,
                    send_heartbeat=self._send_heartbeat,
                    auto_heartbeat=self.auto_heartbeat,
                    executor=self._executor,
                )
                headers = telemetry.inject()
        return outgoing(self.topics.task_result, result, task.workflow_instance_id, headers)

    async def _send_heartbeat(self, beat: TaskResult) -> bool:
        """Heartbeats go on the task-result topic, keyed like the result, so they reach the
        decider before it (per-key order)."""
        await self.bus.publish(
            [outgoing(self.topics.task_result, beat, beat.workflow_instance_id, telemetry.inject())]
        )
        return True

    async def run(self, stop: asyncio.Event) -> None:
        """Consume until `stop` is set, then finish in-flight tasks and stop."""
        self.attach()
        await self.bus.start()
        try:
            await stop.wait()
        finally:
            await self.bus.stop()
            self._executor.shutdown(wait=False)
