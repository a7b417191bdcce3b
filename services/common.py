"""Adapter construction shared by the composition roots (the only place adapters are imported)."""

from __future__ import annotations

from shared.adapters.kafka_bus import KafkaBus
from shared.adapters.mongo_store import MongoStore
from shared.config import CairnSettings
from shared.ports.bus import Bus
from shared.ports.store import Store


def kafka_bus(settings: CairnSettings, client_id: str) -> KafkaBus:
    return KafkaBus(
        settings.kafka_bootstrap,
        client_id=client_id,
        partitions=settings.kafka_partitions,
        fetch_max_wait_ms=settings.kafka_fetch_max_wait_ms,
    )


async def service_bus(settings: CairnSettings, client_id: str) -> KafkaBus:
    """A service's bus, with Cairn's fixed topics created (at the configured partition count)."""
    bus = kafka_bus(settings, client_id)
    await bus.ensure_topics(settings.topics.fixed)
    return bus


async def mongo_store(settings: CairnSettings) -> MongoStore:
    store = MongoStore(settings.mongo_url, settings.mongo_db)
    await store.open()
    return store


def embedded_bus(path: str, settings: CairnSettings) -> Bus:
    from shared.adapters.embedded_bus import EmbeddedBus

    return EmbeddedBus(path, partitions=settings.kafka_partitions, client_id="cairn-dev")


async def sqlite_store(path: str) -> Store:
    from shared.adapters.sqlite_store import SqliteStore

    store = SqliteStore(path)
    await store.open()
    return store
