"""Running @worker functions over HTTP: long-poll Cairn's (Conductor-compatible) task API and
report results with Conductor's `POST /api/tasks/update-v2`, whose answer carries the next task
of the type when one is waiting (the slot runs it without another poll). Same functions, same
outcomes as the Kafka WorkerRunner; use it against `cairn dev` or the api service when workers
cannot reach Kafka. Its HTTP client is aiohttp (cairn/http_api.py says why).

Each task type has one poll loop that asks for as many tasks as it has free slots, so a worker
never holds tasks it cannot start. A result that cannot be delivered is retried with backoff; a
409 means the execution is no longer current (timed out, retried, workflow ended): the result is
dropped, as it would be by the decider.

While a function runs, the task is reported IN_PROGRESS (`POST /api/tasks`) every
`heartbeat_interval(responseTimeoutSeconds)` seconds and on each `heartbeat()` call, so the api's
responseTimeoutSeconds (counted from the poll) only times out tasks whose worker went silent.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from opentelemetry import trace
from tenacity import (
    AsyncRetrying,
    before_sleep_log,
    retry_if_exception_type,
    stop_after_delay,
    wait_exponential,
)

from cairn.auth import ApiKey
from cairn.http_api import ApiSession, ApiUnreachable, TokenRefused
from cairn.worker import WorkerSpec, execute, registered_workers
from shared import telemetry
from shared.models.messages import TaskMessage, TaskResult

log = logging.getLogger(__name__)
tracer = telemetry.tracer("cairn.worker")

LONG_POLL_MS = 5_000
# How long a finished task's result is retried while the api is unreachable or failing: longer
# than an api restart or rollout takes, so the work is not redone for want of a report.
RESULT_REPORT_BUDGET_S = 300.0
HEARTBEAT_TIMEOUT_S = 5.0


def task_from_conductor(body: dict[str, Any]) -> TaskMessage:
    """Conductor's Task JSON (as the poll returns it) as the message a worker function sees."""
    return TaskMessage(
        id=f"poll:{body['taskId']}:{body.get('pollCount', 0)}",
        task_id=body["taskId"],
        task_type=body["taskType"],
        task_def_name=body.get("taskDefName") or body["taskType"],
        reference_task_name=body.get("referenceTaskName", ""),
        workflow_instance_id=body["workflowInstanceId"],
        workflow_type=body.get("workflowType", ""),
        input_data=body.get("inputData") or {},
        retry_count=body.get("retryCount", 0),
        poll_count=body.get("pollCount", 0),
        scheduled_time=body.get("scheduledTime", 0),
        response_timeout_seconds=body.get("responseTimeoutSeconds", 0),
    )


def result_to_conductor(result: TaskResult) -> dict[str, Any]:
    body: dict[str, Any] = {
        "workflowInstanceId": result.workflow_instance_id,
        "taskId": result.task_id,
        "status": result.status.value,
        "outputData": result.output_data,
        "workerId": result.worker_id,
        "callbackAfterSeconds": result.callback_after_seconds,
    }
    if result.reason_for_incompletion is not None:
        body["reasonForIncompletion"] = result.reason_for_incompletion
    return body


class HttpWorkerRunner:
    """Runs up to `concurrency` tasks of each worker's type at once; `auto_heartbeat=False`
    leaves only the heartbeats the functions ask for with `heartbeat()`. With `api_key` (a
    worker key; `ApiKey.from_settings` reads CAIRN_API_KEY_ID/SECRET) every request carries a
    token from POST /api/token, renewed when the api answers 401."""

    def __init__(
        self,
        server: str,
        workers: Sequence[WorkerSpec] | None = None,
        concurrency: int = 10,
        worker_id: str | None = None,
        long_poll_ms: int = LONG_POLL_MS,
        auto_heartbeat: bool = True,
        api_key: ApiKey | None = None,
    ) -> None:
        self.server = server.rstrip("/")
        self.api_key = api_key
        self.workers = list(workers if workers is not None else registered_workers())
        if not self.workers:
            raise ValueError("no workers registered: decorate functions with @worker('task_type')")
        self.concurrency = concurrency
        self.worker_id = worker_id or f"{socket.gethostname()}-{os.getpid()}"
        self.long_poll_ms = long_poll_ms
        self.auto_heartbeat = auto_heartbeat

    async def run(self, stop: asyncio.Event) -> None:
        """Poll until `stop` is set, then finish in-flight tasks, report them, and return."""
        threads = ThreadPoolExecutor(self.concurrency * len(self.workers), thread_name_prefix="cairn-worker")
        connections = (self.concurrency + 1) * len(self.workers)
        try:
            async with ApiSession(self.server, self.api_key, connections=connections) as api:
                await asyncio.gather(*(self._poll_loop(api, spec, stop, threads) for spec in self.workers))
        finally:
            threads.shutdown(wait=False)

    async def _poll_loop(
        self, api: ApiSession, spec: WorkerSpec, stop: asyncio.Event, threads: ThreadPoolExecutor
    ) -> None:
        slots = asyncio.Semaphore(self.concurrency)
        running: set[asyncio.Task[None]] = set()
        failures = 0
        while not stop.is_set():
            await slots.acquire()
            free = 1
            while not slots.locked() and free < self.concurrency:
                await slots.acquire()
                free += 1
            try:
                tasks = await self._poll(api, spec.task_type, free, stop)
                failures = 0
            except (ApiUnreachable, TokenRefused, ValueError) as error:
                failures += 1
                delay = min(0.2 * 2 ** min(failures, 5), 5.0)
                log.warning("polling %s failed (%s); retrying in %.1fs", spec.task_type, error, delay)
                tasks = []
                await _sleep_unless(stop, delay)
            for _ in range(free - len(tasks)):
                slots.release()
            for body in tasks:
                job = asyncio.create_task(self._run_in_slot(api, spec, body, slots, threads, stop))
                running.add(job)
                job.add_done_callback(running.discard)
        if running:
            await asyncio.gather(*running)

    async def _poll(
        self, api: ApiSession, task_type: str, count: int, stop: asyncio.Event
    ) -> list[dict[str, Any]]:
        request = asyncio.create_task(
            api.request(
                "GET",
                f"/api/tasks/poll/batch/{task_type}",
                params={"count": count, "timeout": self.long_poll_ms, "workerid": self.worker_id},
                timeout_s=self.long_poll_ms / 1000 + 10.0,
            )
        )
        stopping = asyncio.create_task(stop.wait())
        await asyncio.wait({request, stopping}, return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        # A stop mid long-poll: the api may already have handed us tasks, so wait for them.
        response = await request
        if response.status_code == 204:
            return []
        if response.status_code in (401, 403):
            raise ValueError(f"the api refused the poll ({response.status_code}): {response.message()}")
        response.raise_for_status()
        tasks = response.json()
        if not isinstance(tasks, list):
            raise ValueError(f"poll answered {type(tasks).__name__}, expected a list")
        return tasks

    async def _run_in_slot(
        self,
        api: ApiSession,
        spec: WorkerSpec,
        body: dict[str, Any],
        slots: asyncio.Semaphore,
        threads: ThreadPoolExecutor,
        stop: asyncio.Event,
    ) -> None:
        """Run the task, and the next ones its reports brought back (update-v2), in one slot."""
        next_body: dict[str, Any] | None = body
        try:
            while next_body is not None:
                next_body = await self._run_one(api, spec, next_body, threads, stop)
        finally:
            slots.release()

    async def _run_one(
        self,
        api: ApiSession,
        spec: WorkerSpec,
        body: dict[str, Any],
        threads: ThreadPoolExecutor,
        stop: asyncio.Event,
    ) -> dict[str, Any] | None:
        """Run one task and report it; the next task of its type, when the report brought one."""
        try:
            task = task_from_conductor(body)
            with tracer.start_as_current_span(
                f"cairn.worker {spec.task_type}",
                kind=trace.SpanKind.CONSUMER,
                attributes={"cairn.workflow_id": task.workflow_instance_id, "cairn.task_id": task.task_id},
            ):
                result = await execute(
                    spec,
                    task,
                    self.worker_id,
                    send_heartbeat=lambda beat: self._send_heartbeat(api, beat),
                    auto_heartbeat=self.auto_heartbeat,
                    executor=threads,
                )
            return await self._report(api, result, poll_next=not stop.is_set())
        except Exception:
            log.exception("task %s could not be run or reported", body.get("taskId"))
            return None

    async def _send_heartbeat(self, api: ApiSession, beat: TaskResult) -> bool:
        """One attempt, no retries: the next beat is the retry. False on 409 (the execution timed
        out, was retried, or its workflow ended), which stops the beats for it."""
        response = await api.request(
            "POST", "/api/tasks", json_body=result_to_conductor(beat), timeout_s=HEARTBEAT_TIMEOUT_S
        )
        if response.status_code == 409:
            log.info("task %s is no longer current; heartbeats stopped: %s", beat.task_id, response.text)
            return False
        response.raise_for_status()
        return True

    async def _report(self, api: ApiSession, result: TaskResult, *, poll_next: bool) -> dict[str, Any] | None:
        """Deliver a finished task's result; with `poll_next`, through Conductor's update-v2, whose
        answer is the next task of the same type when one is waiting (saving a poll per task).

        The work is done and only the report is missing, so an api that is down or failing (a
        restart, a rollout, a database hiccup) is retried with backoff for up to
        RESULT_REPORT_BUDGET_S; the server's 409 says when the result no longer matters (the
        execution timed out or was superseded meanwhile). A next task handed out with an answer
        that was lost goes back to its queue when the api's hand-out confirmation time runs out."""
        path = "/api/tasks/update-v2" if poll_next else "/api/tasks"
        retrying = AsyncRetrying(
            retry=retry_if_exception_type((ApiUnreachable, _ServerFailed)),
            wait=wait_exponential(multiplier=0.2, max=5),
            stop=stop_after_delay(RESULT_REPORT_BUDGET_S),
            before_sleep=before_sleep_log(log, logging.WARNING),
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                response = await api.request("POST", path, json_body=result_to_conductor(result))
                if response.status_code == 409:
                    log.info(
                        "task %s is no longer current; result dropped: %s", result.task_id, response.text
                    )
                    return None
                if response.status_code >= 500:
                    raise _ServerFailed(
                        f"reporting task {result.task_id}: server answered {response.status_code}"
                    )
                if response.status_code >= 400:
                    raise ValueError(
                        f"reporting task {result.task_id}: the api answered {response.status_code}: "
                        f"{response.message()}"
                    )
                if poll_next and response.status_code == 200:
                    following = response.json()
                    return following if isinstance(following, dict) and following.get("taskId") else None
                return None
        return None


class _ServerFailed(Exception):
    """The api answered 5xx: worth another try, like a connection that failed."""


async def _sleep_unless(stop: asyncio.Event, seconds: float) -> None:
    try:
        await asyncio.wait_for(stop.wait(), seconds)
    except TimeoutError:
        pass
