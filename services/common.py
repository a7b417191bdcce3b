"""Adapter construction shared by the composition roots (the only place adapters are imported)."""

from __future__ import annotations

import logging

from pymongo.errors import PyMongoError
from tenacity import (
    AsyncRetrying,
    RetryError,
    before_sleep_log,
    retry_if_exception_type,
    stop_after_delay,
    wait_exponential,
)

from services.runtime import StartupError
from shared.adapters.kafka_bus import KafkaBus
from shared.adapters.mongo_store import MongoStore
from shared.config import CairnSettings
from shared.ports.bus import Bus
from shared.ports.store import Store

log = logging.getLogger("cairn")


def kafka_bus(settings: CairnSettings, client_id: str) -> KafkaBus:
    return KafkaBus(
        settings.kafka_bootstrap,
        client_id=client_id,
        partitions=settings.kafka_partitions,
        replication_factor=settings.kafka_replication_factor,
        fetch_max_wait_ms=settings.kafka_fetch_max_wait_ms,
    )


async def service_bus(settings: CairnSettings, client_id: str) -> KafkaBus:
    """A service's bus, with Cairn's fixed topics created (at the configured partition count)."""
    bus = kafka_bus(settings, client_id)
    await bus.ensure_topics(settings.topics.fixed)
    return bus


async def mongo_store(settings: CairnSettings) -> MongoStore:
    """The store, opened. A database that is down or wedged when a service (re)starts is waited
    for, with backoff, for `startup_retry_s`: under a supervisor, exiting at once turns a short
    outage into a crash loop, and under the chaos tests it killed restarted services."""
    store = MongoStore(settings.mongo_url, settings.mongo_db, timeout_ms=settings.mongo_timeout_ms)
    retrying = AsyncRetrying(
        retry=retry_if_exception_type(PyMongoError),
        wait=wait_exponential(multiplier=0.5, max=15),
        stop=stop_after_delay(settings.startup_retry_s),
        before_sleep=before_sleep_log(log, logging.WARNING),
    )
    try:
        async for attempt in retrying:
            with attempt:
                await store.open()
    except RetryError as error:
        await store.close()
        raise StartupError(
            f"MongoDB at {settings.mongo_url} did not answer for {settings.startup_retry_s:.0f}s "
            f"({error.last_attempt.exception()}); check CAIRN_MONGO_URL and that the server is up"
        ) from None
    return store


def embedded_bus(path: str, settings: CairnSettings) -> Bus:
    from shared.adapters.embedded_bus import EmbeddedBus

    return EmbeddedBus(path, partitions=settings.kafka_partitions, client_id="cairn-dev")


async def sqlite_store(path: str) -> Store:
    from shared.adapters.sqlite_store import SqliteStore

    store = SqliteStore(path)
    await store.open()
    return store
