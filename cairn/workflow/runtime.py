"""WorkflowRuntime: hosts an app's orchestrators and activities, as Dapr's does.

`start()` runs, on a thread of its own, Cairn workers: one for the app's orchestrator turns (task
type `orchestrations.<app>`: replay and answer) and one per activity (task type = the activity's
name), so activities get Cairn's at-least-once delivery, heartbeats and response timeouts like
any worker task. They long-poll the api (cairn/http_worker.py), or consume from Kafka like a
Kafka worker when CAIRN_KAFKA_BOOTSTRAP is set (CAIRN_WORKFLOW_TRANSPORT). It then tells the api
which workflows the app hosts (registered as code definitions) and that a runtime of the app is
there, which gives STALLED instances another turn with this code.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import threading
import traceback
from collections.abc import Callable
from typing import Any

import httpx

from cairn.auth import ApiKey
from cairn.http_worker import HttpWorkerRunner
from cairn.worker import FailedWithOutput, WorkerSpec
from cairn.workflow._context import WorkflowActivityContext, call_user
from cairn.workflow._executor import execute_turn
from cairn.workflow._registry import Function, Registry
from cairn.workflow._serialization import decode, encode
from cairn.workflow.client import app_name, http_client, server_url
from shared.config import CairnSettings
from shared.models.history import turn_task_type
from shared.models.messages import TaskMessage

log = logging.getLogger("cairn.workflow")

DEFAULT_CONCURRENCY = 16
READY_TIMEOUT_S = 30.0
LONG_POLL_MS = 1_000
"""Shorter than a worker's: `shutdown()` waits for the polls in flight (the api may be handing
them tasks), and Dapr programs shut their runtime down and start another within a second."""


def _registered_name(fn: Function, name: str | None) -> str:
    chosen = name or getattr(fn, "_dapr_alternate_name", None) or fn.__name__
    existing = getattr(fn, "_dapr_alternate_name", None)
    if name and existing and existing != name:
        raise ValueError(f"Workflow {fn.__name__} already has an alternate name {existing}")
    fn.__dict__["_dapr_alternate_name"] = chosen
    return chosen


def _shim(fn: Function, name: str) -> Callable[[], Function]:
    """What Dapr's decorators return: a reference to pass to call_activity and friends (calling
    it directly is a TypeError, as in Dapr)."""

    def innerfn() -> Function:
        return fn

    innerfn.__dict__["_dapr_alternate_name"] = name
    innerfn.__wrapped__ = fn  # type: ignore[attr-defined]  # what testing.replay runs
    innerfn.__signature__ = inspect.signature(fn)  # type: ignore[attr-defined]
    innerfn.__name__ = fn.__name__
    return innerfn


def _action_id(task: TaskMessage) -> int:
    suffix = task.reference_task_name.rsplit("_", 1)[-1]
    return int(suffix) if suffix.isdigit() else 0


def activity_spec(name: str, fn: Function) -> WorkerSpec:
    """A Cairn worker for an activity: the input unwrapped, the result wrapped, a failure sent
    with its type and stack trace (what the orchestrator's TaskFailedError carries)."""

    def failed(error: Exception) -> FailedWithOutput:
        trace = "".join(traceback.format_tb(error.__traceback__))
        return FailedWithOutput(str(error), {"errorType": type(error).__name__, "stackTrace": trace})

    def context(task: TaskMessage) -> WorkflowActivityContext:
        return WorkflowActivityContext(task.workflow_instance_id, _action_id(task), task.task_id)

    if inspect.iscoroutinefunction(fn):

        async def run_async(input_data: dict[str, Any], task: TaskMessage) -> dict[str, Any]:
            try:
                value = await call_user(fn, context(task), decode(input_data.get("input")))
            except Exception as error:
                raise failed(error) from error
            return {"result": encode(value)}

        return WorkerSpec(name, run_async)

    def run(input_data: dict[str, Any], task: TaskMessage) -> dict[str, Any]:
        try:
            value = call_user(fn, context(task), decode(input_data.get("input")))
        except Exception as error:
            raise failed(error) from error
        return {"result": encode(value)}

    return WorkerSpec(name, run)


class WorkflowRuntime:
    def __init__(
        self,
        host: str | None = None,
        port: str | None = None,
        logger_options: Any = None,
        interceptors: Any = None,
        maximum_concurrent_activity_work_items: int | None = None,
        maximum_concurrent_orchestration_work_items: int | None = None,
        maximum_thread_pool_workers: int | None = None,
        worker_ready_timeout: float | None = None,
        **_: Any,
    ) -> None:
        self._server = server_url()
        self._app = app_name()
        self._registry = Registry()
        self._concurrency = maximum_concurrent_activity_work_items or DEFAULT_CONCURRENCY
        self._ready_timeout = worker_ready_timeout or READY_TIMEOUT_S
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._kafka = False

    # ---- registration ------------------------------------------------------------------------

    def register_workflow(self, fn: Function, *, name: str | None = None) -> None:
        self._registry.add_workflow(_registered_name(fn, name), fn)

    def register_versioned_workflow(
        self, fn: Function, *, name: str, version_name: str | None = None, is_latest: bool
    ) -> None:
        fn.__dict__["_dapr_alternate_name"] = name
        self._registry.add_versioned_workflow(name, version_name or fn.__name__, fn, is_latest=is_latest)

    def register_activity(self, fn: Function, *, name: str | None = None) -> None:
        self._registry.add_activity(_registered_name(fn, name), fn)

    def workflow(self, __fn: Function | None = None, *, name: str | None = None) -> Any:
        def register(fn: Function) -> Callable[[], Function]:
            self.register_workflow(fn, name=name)
            return _shim(fn, fn.__dict__["_dapr_alternate_name"])

        return register(__fn) if __fn is not None else register

    def activity(self, __fn: Function | None = None, *, name: str | None = None) -> Any:
        def register(fn: Function) -> Callable[[], Function]:
            self.register_activity(fn, name=name)
            return _shim(fn, fn.__dict__["_dapr_alternate_name"])

        return register(__fn) if __fn is not None else register

    def versioned_workflow(self, *, name: str, version_name: str | None = None, is_latest: bool) -> Any:
        def register(fn: Function) -> Callable[[], Function]:
            self.register_versioned_workflow(fn, name=name, version_name=version_name, is_latest=is_latest)
            return _shim(fn, name)

        return register

    # ---- running -----------------------------------------------------------------------------

    def start(self) -> None:
        """Start taking this app's turns and activities (from the api, or from Kafka: see
        CAIRN_WORKFLOW_TRANSPORT); returns once the api answers, or Kafka does."""
        if self._thread is not None:
            return
        settings = CairnSettings()
        self._kafka = settings.workflow_transport == "kafka" or (  # as `cairn worker` chooses
            settings.workflow_transport == "auto"
            and settings.server is None
            and "CAIRN_KAFKA_BOOTSTRAP" in os.environ
        )
        announce = not self._kafka or settings.server is not None
        if announce:
            self._wait_for_server()
        ready = threading.Event()
        self._thread = threading.Thread(
            target=self._serve, args=(ready,), name="cairn-workflow-runtime", daemon=True
        )
        self._thread.start()
        ready.wait()
        if not announce:
            log.info("no CAIRN_SERVER: stalled instances of %s try again on their next event", self._app)
            return
        names = sorted({*self._registry.workflows, *self._registry.versioned})
        with http_client(self._server) as client:  # register the names; STALLED ones try again
            response = client.post(f"/api/workflow/code/{self._app}/runtimes", json={"workflows": names})
            if response.is_success and response.json().get("woken"):
                log.info("gave %d stalled instance(s) another turn", len(response.json()["woken"]))

    def _wait_for_server(self) -> None:
        deadline = self._ready_timeout
        waited = 0.0
        with httpx.Client(base_url=self._server, timeout=2.0) as client:
            while True:
                try:
                    if client.get("/health").status_code < 500:
                        return
                except httpx.HTTPError:
                    pass
                if waited >= deadline:
                    raise RuntimeError(
                        "WorkflowRuntime worker and its stream are not ready: no Cairn api at "
                        f"{self._server} (start one with `cairn dev`, or set CAIRN_SERVER)"
                    )
                threading.Event().wait(0.2)
                waited += 0.2

    def _specs(self) -> list[WorkerSpec]:
        registry = self._registry
        strict = CairnSettings().workflow_strict
        turns = WorkerSpec(
            turn_task_type(self._app), lambda item: execute_turn(registry, item, strict=strict)
        )
        return [turns, *(activity_spec(name, fn) for name, fn in sorted(registry.activities.items()))]

    def _serve(self, ready: threading.Event) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        self._stop = asyncio.Event()
        loop.call_soon(ready.set)
        try:
            loop.run_until_complete(self._run_kafka() if self._kafka else self._run_http())
        finally:
            loop.close()

    async def _run_http(self) -> None:
        assert self._stop is not None
        runner = HttpWorkerRunner(
            self._server,
            self._specs(),
            concurrency=self._concurrency,
            long_poll_ms=LONG_POLL_MS,
            api_key=ApiKey.from_settings(CairnSettings()),
        )
        await runner.run(self._stop)

    async def _run_kafka(self) -> None:
        """Turns and activities consumed from Kafka (`orchestrations.<app>`, `tasks.<activity>`),
        results published to `task.result`, as a Kafka worker does."""
        from cairn.worker import WorkerRunner
        from services.common import reachable_kafka_bus
        from shared.guard import GuardedBus

        assert self._stop is not None
        settings = CairnSettings()
        kafka = await reachable_kafka_bus(settings, f"cairn-workflow-{self._app}", self._stop)
        bus = GuardedBus(kafka, settings.topics.dead_letter, settings.fault_poison_marker)
        await WorkerRunner(bus, settings.topics, self._specs(), self._concurrency).run(self._stop)

    def shutdown(self) -> None:
        """Stop polling; what runs finishes and is reported."""
        if self._thread is None or self._loop is None or self._stop is None:
            return
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=30)
        self._thread = None

    def wait_for_ready(self, timeout: float = 30.0) -> bool:
        return self._thread is not None and self._thread.is_alive()
