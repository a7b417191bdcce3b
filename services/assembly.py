"""Assembling services onto adapters: one service per process in production (`cairn run X`),
or all of them in one process on shared adapters (`cairn dev`).

Each service is a component: it subscribes its handlers on the bus, then runs a loop until the
stop event (or just waits), then releases what it holds. The order of a stop is: loops end (the
api stops accepting requests), the bus finishes in-flight batches and closes, components release
their resources, the store closes.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

from services.clock import now_ms
from services.runtime import StartupError
from services.system_worker import TASK_TYPES as SYSTEM_TASK_TYPES
from shared.config import CairnSettings
from shared.guard import GuardedBus
from shared.integrations import Integrations
from shared.ports.bus import Bus
from shared.ports.store import Store

log = logging.getLogger("cairn")

SERVICES = ("api", "decider", "scheduler", "timer", "sweeper", "system-worker", "events")


@dataclass
class Component:
    name: str
    loop: Callable[[asyncio.Event], Coroutine[Any, Any, None]] | None = None
    """Runs until the stop event is set; None: the component only handles bus messages."""
    drains: list[Callable[[], Awaitable[None]]] = field(default_factory=list)
    """Run before the bus stops: release batches that only this component could finish."""
    closers: list[Callable[[], Awaitable[None]]] = field(default_factory=list)
    """Run after the bus stopped."""


def _integrations(settings: CairnSettings, *, with_provider_variables: bool) -> Integrations:
    """The AI integrations of the configuration (shared/integrations.py); a bad file or JSON
    stops the service with one line naming it."""
    from shared.integrations import IntegrationError, load_integrations

    environ = os.environ if with_provider_variables else {}
    try:
        return load_integrations(
            settings.ai_integrations_file, settings.ai_integrations, environ, settings.ai_prices
        )
    except IntegrationError as error:
        raise StartupError(str(error)) from None


def _decider(store: Store, bus: Bus, settings: CairnSettings, listening: asyncio.Event) -> Component:
    from services.decider.faults import DeciderFaults
    from services.decider.handler import DeciderHandler
    from shared.adapters.sqlite_outbox import atomic_outbox
    from shared.core.decide import Limits
    from shared.core.scripting import ScriptLimits
    from shared.sandbox import PooledSandbox

    script_limits = ScriptLimits(
        timeout_ms=settings.script_timeout_ms, memory_bytes=settings.script_memory_mb * 1024 * 1024
    )
    prices = _integrations(settings, with_provider_variables=False).prices
    sandbox = PooledSandbox(script_limits, settings.jq_workers)  # jq helpers start on first use
    handler = DeciderHandler(
        store,
        bus,
        settings.topics,
        now_ms,
        limits=Limits(
            max_steps=settings.decision_max_steps,
            payload=settings.payload_limits,
            turn_timeout_s=settings.code_turn_timeout_s,
        ),
        sandbox=sandbox,
        prices=prices,
        outbox=atomic_outbox(store, bus),
        faults=DeciderFaults(
            settings.topics,
            freeze_marker=settings.fault_freeze_marker,
            kill_on_command=settings.fault_kill_before_command_commit,
            kill_on_result=settings.fault_kill_before_result_commit,
        ),
    )
    for _ in range(settings.decider_consumers):  # one handler: its cache and its jq helpers are shared
        bus.subscribe(
            settings.topics.decider_inbound,
            settings.topics.group("decider"),
            handler.handle_batch,
            max_batch=settings.decider_max_batch,
        )
    return Component("decider", closers=[handler.aclose, sandbox.aclose])


def _scheduler(store: Store, bus: Bus, settings: CairnSettings, listening: asyncio.Event) -> Component:
    from services.scheduler.handler import SchedulerHandler

    handler = SchedulerHandler(bus, settings.topics)
    topics = settings.topics
    bus.subscribe([topics.task_dispatch], topics.group("scheduler"), handler.handle_batch, max_batch=500)
    return Component("scheduler")


def _timer(store: Store, bus: Bus, settings: CairnSettings, listening: asyncio.Event) -> Component:
    from services.timer.handler import TimerHandler

    owner = f"{socket.gethostname()}:{os.getpid()}"
    handler = TimerHandler(store, bus, settings.topics, now_ms, owner, int(settings.timer_lease_s * 1000))
    topics = settings.topics
    bus.subscribe([topics.timer_request], topics.group("timer"), handler.handle_requests, max_batch=500)

    async def loop(stop: asyncio.Event) -> None:
        await handler.run_firing_loop(stop, settings.timer_poll_interval_s)

    return Component("timer", loop=loop)


def _sweeper(store: Store, bus: Bus, settings: CairnSettings, listening: asyncio.Event) -> Component:
    from services.sweeper.handler import Sweeper

    sweeper = Sweeper(
        store,
        bus,
        settings.topics,
        now_ms,
        int(settings.sweeper_outbox_grace_s * 1000),
        int(settings.sweeper_stale_after_s * 1000),
        int(settings.sweeper_stale_interval_s * 1000),
        retention_ms=int(settings.retention_days * 86_400_000),
        housekeeping_interval_ms=int(settings.sweeper_housekeeping_interval_s * 1000),
    )

    async def loop(stop: asyncio.Event) -> None:
        await sweeper.run(stop, settings.sweeper_interval_s)

    return Component("sweeper", loop=loop)


def _api(store: Store, bus: Bus, settings: CairnSettings, listening: asyncio.Event) -> Component:
    from services.api.app import create_app
    from services.api.auth import api_auth, describe, is_loopback
    from services.api.context import ApiContext
    from services.api.dispatch import TaskDispatcher
    from services.api.server import serve

    auth = api_auth(settings)
    exposed = auth is None and not is_loopback(settings.api_host)
    log.log(logging.WARNING if exposed else logging.INFO, "api authentication %s", describe(auth, settings))
    dispatcher = TaskDispatcher(
        bus,
        store,
        settings.topics,
        now_ms,
        idle_close_s=settings.api_poll_idle_close_s,
        handout_confirm_s=settings.api_handout_confirm_s,
        kill_after_claim=settings.fault_kill_after_claim,
        max_task_types=settings.api_max_polled_task_types,
        started_report_delay_s=settings.api_started_report_delay_s,
        consumers=settings.api_dispatch_consumers,
    )
    ctx = ApiContext(
        store,
        bus,
        settings.topics,
        now_ms,
        dispatcher,
        auth=auth,
        payload_limits=settings.payload_limits,
        start_visible_within_s=settings.api_start_visible_s,
    )
    app = create_app(ctx, max_request_bytes=settings.api_max_request_bytes)

    async def loop(stop: asyncio.Event) -> None:
        await serve(app, settings.api_host, settings.api_port, stop, listening)

    return Component("api", loop=loop, drains=[dispatcher.aclose])


def _system_worker(store: Store, bus: Bus, settings: CairnSettings, listening: asyncio.Event) -> Component:
    from services.system_worker.handler import SystemWorker
    from shared.secrets import SecretError, SecretStore, install_log_redaction

    try:
        secrets = SecretStore.from_sources(settings.secrets_file, settings.secrets_dir)
    except SecretError as error:
        raise StartupError(str(error)) from None
    integrations = _integrations(settings, with_provider_variables=True)
    install_log_redaction(secrets)
    worker = SystemWorker(
        bus,
        settings.topics,
        concurrency=settings.worker_concurrency,
        integrations=integrations,
        secrets=secrets,
        max_retry_after_s=settings.ai_max_retry_after_s,
    )
    worker.attach()
    return Component("system-worker", closers=[worker.aclose])


Builder = Callable[[Store, Bus, CairnSettings, asyncio.Event], Component]


def _events(store: Store, bus: Bus, settings: CairnSettings, listening: asyncio.Event) -> Component:
    from services.events.handler import EventsHandler
    from services.events.service import EventSources
    from shared.core.scripting import ScriptLimits
    from shared.sandbox import PooledSandbox

    limits = ScriptLimits(
        timeout_ms=settings.script_timeout_ms, memory_bytes=settings.script_memory_mb * 1024 * 1024
    )
    sandbox = PooledSandbox(limits, 1)  # conditions are JavaScript: the jq helper never starts
    handler = EventsHandler(store, bus, settings.topics, sandbox, now_ms, settings.payload_limits)
    sources = EventSources(store, bus, settings.topics, handler)

    async def loop(stop: asyncio.Event) -> None:
        await sources.run(stop, settings.events_refresh_s)

    return Component("events", loop=loop, drains=[sources.close], closers=[sandbox.aclose])


BUILDERS: dict[str, Builder] = {
    "api": _api,
    "decider": _decider,
    "scheduler": _scheduler,
    "timer": _timer,
    "sweeper": _sweeper,
    "system-worker": _system_worker,
    "events": _events,
}


async def run_services(
    services: Sequence[str],
    store: Store,
    bus: Bus,
    settings: CairnSettings,
    stop: asyncio.Event,
    listening: asyncio.Event | None = None,
) -> None:
    """Run `services` on one store and bus until `stop`; a crashed loop stops the others too,
    and its error is raised once everything has been released. `listening` is set once the api
    (if it is among them) accepts requests."""
    listening = listening or asyncio.Event()
    unknown = [name for name in services if name not in BUILDERS]
    if unknown:
        raise ValueError(f"unknown service(s) {', '.join(unknown)}; choose from {', '.join(SERVICES)}")
    # Every consumer behind the poison guard: a message its handler keeps failing on is
    # dead-lettered, an outage is waited out (shared/guard.py).
    bus = GuardedBus(bus, settings.topics.dead_letter, settings.fault_poison_marker)
    await bus.ensure_topics([*settings.topics.fixed, *map(settings.topics.tasks, SYSTEM_TASK_TYPES)])
    components = [BUILDERS[name](store, bus, settings, listening) for name in services]
    await bus.start()
    failure: BaseException | None = None
    try:
        loops: list[asyncio.Task[Any]] = [
            asyncio.create_task(c.loop(stop), name=c.name) for c in components if c.loop
        ]
        loops.append(asyncio.create_task(stop.wait(), name="stop"))
        done, _ = await asyncio.wait(loops, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            if task.get_name() != "stop" and task.exception() is not None:
                failure = task.exception()
                if not isinstance(failure, StartupError):  # reported once, by the runtime
                    log.error("%s failed: %s", task.get_name(), failure)
        stop.set()
        results = await asyncio.gather(*loops, return_exceptions=True)
        failure = failure or next((r for r in results if isinstance(r, BaseException)), None)
    finally:
        for component in components:
            for drain in component.drains:
                await drain()
        await bus.stop()
        for component in components:
            for close in component.closers:
                await close()
    if failure is not None:
        raise failure


async def run_production_service(service: str, settings: CairnSettings, stop: asyncio.Event) -> None:
    """`cairn run <service>`: one service on Kafka and MongoDB."""
    from services.common import mongo_store, reachable_kafka_bus

    if service == "api":
        from services.api.auth import api_auth

        api_auth(settings)  # an unusable keys file or an open public address: refused before waiting
    store = await mongo_store(settings, stop)
    try:
        bus = await reachable_kafka_bus(settings, f"cairn-{service}", stop)
        await run_services([service], store, bus, settings, stop)
    finally:
        await store.close()
