"""`cairn dev`: every service in one process. By default on the embedded adapters (SQLite store
and SQLite-backed bus in one state file), so a new user needs no Kafka and no MongoDB; with Kafka
and/or MongoDB addresses the same process runs on real servers."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from services.assembly import SERVICES, run_services
from services.common import embedded_bus, kafka_bus, mongo_store, sqlite_store
from services.runtime import StartupError
from shared.config import CairnSettings
from shared.ports.bus import Bus
from shared.ports.store import Store

log = logging.getLogger("cairn")


@dataclass(frozen=True)
class DevPlan:
    """Where `cairn dev` keeps state: the state file, or real servers when given."""

    db_path: Path
    kafka: str | None = None
    mongo: str | None = None

    def describe(self) -> list[tuple[str, str]]:
        store = f"MongoDB {self.mongo}" if self.mongo else f"{self.db_path} (SQLite)"
        bus = f"Kafka {self.kafka}" if self.kafka else f"{self.db_path} (embedded bus)"
        return [("store", store), ("bus", bus)]


EMBEDDED_BUS_TUNING = {"api_dispatch_consumers": 2, "api_started_report_delay_s": 0.1}
"""What `cairn dev` on its own bus sets unless the environment does: the api's started report
waits up to 0.1 s for the task's result (one decision per step instead of two), and two members
per polled type keep that wait from holding up the type's other partitions. Measured on the
embedded bus (benchmarks/README.md, issue 16, fourth part); not on Kafka, where each member is a
consumer of its own, so the services keep 1 and 0."""


def tuned_for_the_embedded_bus(plan: DevPlan, settings: CairnSettings) -> CairnSettings:
    """`settings` with EMBEDDED_BUS_TUNING where the bus is the embedded one and the value was
    not set (a CAIRN_… variable, or an explicit argument, wins)."""
    if plan.kafka:
        return settings
    unset = {
        name: value for name, value in EMBEDDED_BUS_TUNING.items() if name not in settings.model_fields_set
    }
    return settings.model_copy(update=unset)


async def _adapters(plan: DevPlan, settings: CairnSettings) -> tuple[Store, Bus]:
    if plan.mongo:
        store: Store = await mongo_store(settings.model_copy(update={"mongo_url": plan.mongo}))
    else:
        store = await sqlite_store(str(plan.db_path), settings)
    if plan.kafka:
        bus: Bus = kafka_bus(settings.model_copy(update={"kafka_bootstrap": plan.kafka}), "cairn-dev")
    else:
        bus = embedded_bus(str(plan.db_path), settings)
    return store, bus


async def _announce_when_listening(listening: asyncio.Event, announce: Callable[[], None]) -> None:
    await listening.wait()
    announce()


@contextlib.contextmanager
def _state_file_lock(path: Path) -> Iterator[None]:
    """One `cairn dev` per state file: its bus members keep their ids across restarts, which is
    right only if no other process uses them. The lock goes with the process, kill -9 included."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{path}.lock", "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise StartupError(
                f"another `cairn dev` is running on {path}; stop it, or give this one its own file with --db"
            ) from None
        yield


async def run_dev(
    plan: DevPlan, settings: CairnSettings, stop: asyncio.Event, announce: Callable[[], None]
) -> None:
    from services.api.auth import api_auth

    api_auth(settings)  # refuse an open public address (or a bad keys file) before opening anything
    settings = tuned_for_the_embedded_bus(plan, settings)
    lock = _state_file_lock(plan.db_path) if not (plan.kafka and plan.mongo) else contextlib.nullcontext()
    with lock:
        await _run_dev(plan, settings, stop, announce)


async def _run_dev(
    plan: DevPlan, settings: CairnSettings, stop: asyncio.Event, announce: Callable[[], None]
) -> None:
    store, bus = await _adapters(plan, settings)
    listening = asyncio.Event()
    announcing = asyncio.create_task(_announce_when_listening(listening, announce))
    try:
        await run_services(SERVICES, store, bus, settings, stop, listening)
    finally:
        announcing.cancel()
        await store.close()
