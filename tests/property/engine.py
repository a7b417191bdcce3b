"""Cairn's real services in one event loop, on one SQLite file, with a fault-injecting bus.

The decider, scheduler, timer and sweeper are assembled by services/assembly.py exactly as
`cairn dev` assembles them (minus the api: nothing here polls over HTTP); the workers are the SDK's
WorkerRunner on the same bus. Only the bus is wrapped (shared/adapters/faults.py), so what a test
finds here is what the engine does when its messages are dropped, duplicated, delayed or
redelivered. The sweeper runs on short intervals so repairs take seconds, not minutes.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from cairn.client import CairnClient
from cairn.worker import WorkerRunner, WorkerSpec
from services.assembly import run_services
from shared.adapters.embedded_bus import EmbeddedBus
from shared.adapters.faults import FaultPlan, FaultyBus
from shared.adapters.sqlite_store import SqliteStore
from shared.config import CairnSettings
from shared.topics import Topics

SERVICES = ("decider", "scheduler", "timer", "sweeper")


def fast_settings() -> CairnSettings:
    """Short sweeper intervals: an outbox left unsent for 1 s is republished, a RUNNING workflow
    with no commit for 1 s is re-decided (scanned every 0.5 s), so a lost message costs ~1.5 s."""
    return CairnSettings(
        sweeper_interval_s=0.2,
        sweeper_outbox_grace_s=1.0,
        sweeper_stale_after_s=1.0,
        sweeper_stale_interval_s=0.5,
        timer_poll_interval_s=0.1,
        kafka_partitions=2,
    )


@dataclass
class Engine:
    """A running engine: its store (to observe), its faulty bus and a client on that bus."""

    store: SqliteStore
    bus: FaultyBus
    topics: Topics
    path: Path
    services: asyncio.Task[None]

    @property
    def client(self) -> CairnClient:
        """Starts and signals go through the faulty bus too."""
        return CairnClient(self.bus, self.topics)

    def check_alive(self) -> None:
        """Raise the services' error at once if one of their loops crashed."""
        if self.services.done():
            self.services.result()
            raise AssertionError("the services stopped on their own")

    def dead_letters(self) -> list[bytes]:
        """Messages the engine gave up on: a healthy run has none."""
        with contextlib.closing(sqlite3.connect(self.path)) as connection:
            rows = connection.execute(
                "SELECT value FROM bus_messages WHERE topic = ?", (self.topics.dead_letter,)
            ).fetchall()
        return [value for (value,) in rows]


@contextlib.asynccontextmanager
async def running_engine(
    path: Path, plan: FaultPlan, workers: Sequence[WorkerSpec], settings: CairnSettings | None = None
) -> AsyncIterator[Engine]:
    """Start the services and the workers on `path`; stop them (and surface a crash) on exit."""
    settings = settings or fast_settings()
    store = SqliteStore(str(path))
    await store.open()
    inner = EmbeddedBus(str(path), partitions=settings.kafka_partitions, client_id="cairn-property")
    bus = FaultyBus(inner, plan)
    WorkerRunner(bus, settings.topics, workers, concurrency=16, worker_id="property-worker").attach()
    stop = asyncio.Event()
    services = asyncio.create_task(run_services(SERVICES, store, bus, settings, stop), name="services")
    try:
        yield Engine(store, bus, settings.topics, path, services)
    finally:
        stop.set()
        try:
            await services
        finally:
            await store.close()
