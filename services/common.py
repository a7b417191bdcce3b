"""Adapter construction shared by the composition roots (the only place adapters are imported)."""

from __future__ import annotations

import asyncio
import logging
import socket

from pydantic import SecretStr
from pymongo.errors import PyMongoError
from tenacity import (
    AsyncRetrying,
    RetryError,
    before_sleep_log,
    retry_if_exception,
    retry_if_exception_type,
    stop_after_delay,
    wait_exponential,
)
from tenacity.retry import RetryBaseT

from services.runtime import StartupError, startup_sleep
from shared.adapters.kafka_bus import KafkaBus
from shared.adapters.kafka_security import KafkaAccessError, KafkaSecurity, KafkaSecurityError
from shared.adapters.mongo_store import MongoStore
from shared.config import CairnSettings
from shared.ports.bus import Bus
from shared.ports.store import Store

log = logging.getLogger("cairn")

DEAD_LETTER_RETENTION_S = 7 * 86_400.0
"""How long `cairn dev` keeps dead letters: as long as Kafka keeps a topic by default."""


def kafka_security(settings: CairnSettings) -> KafkaSecurity:
    """The TLS/SASL options of every Kafka client, from the CAIRN_KAFKA_* settings."""
    return KafkaSecurity(
        protocol=settings.kafka_security_protocol,
        sasl_mechanism=settings.kafka_sasl_mechanism,
        username=settings.kafka_sasl_username,
        password=_secret(settings.kafka_sasl_password),
        ssl_cafile=settings.kafka_ssl_cafile,
        ssl_certfile=settings.kafka_ssl_certfile,
        ssl_keyfile=settings.kafka_ssl_keyfile,
        ssl_key_password=_secret(settings.kafka_ssl_key_password),
        ssl_check_hostname=settings.kafka_ssl_check_hostname,
    )


def _secret(value: SecretStr | None) -> str | None:
    return value.get_secret_value() if value is not None else None


def instance_id(settings: CairnSettings) -> str | None:
    """CAIRN_INSTANCE_ID with `{hostname}` filled in: docker compose gives each container (and each
    replica of a scaled service) its own host name, kept across restarts of the container."""
    if not settings.instance_id:
        return None
    return settings.instance_id.replace("{hostname}", socket.gethostname())


def kafka_bus(settings: CairnSettings, client_id: str) -> KafkaBus:
    """A service's bus; its consumers are static group members when CAIRN_INSTANCE_ID is set."""
    return KafkaBus(
        settings.kafka_bootstrap,
        client_id=client_id,
        partitions=settings.kafka_partitions,
        replication_factor=settings.kafka_replication_factor,
        fetch_max_wait_ms=settings.kafka_fetch_max_wait_ms,
        security=kafka_security(settings),
        instance_id=instance_id(settings),
        session_timeout_ms=settings.kafka_session_timeout_ms,
    )


def _while_starting(settings: CairnSettings, stop: asyncio.Event | None, retry: RetryBaseT) -> AsyncRetrying:
    """Attempts at reaching a server while a service starts: exponential backoff up to 15 s,
    for `startup_retry_s` in all, each wait logged and cut short by a stop request."""
    return AsyncRetrying(
        retry=retry,
        wait=wait_exponential(multiplier=0.5, max=15),
        stop=stop_after_delay(settings.startup_retry_s),
        before_sleep=before_sleep_log(log, logging.WARNING),
        sleep=startup_sleep(stop),
    )


async def reachable_kafka_bus(
    settings: CairnSettings, client_id: str, stop: asyncio.Event | None = None
) -> KafkaBus:
    """A service's bus, once Kafka answered as configured. A cluster that is down is waited for,
    with backoff, for `startup_retry_s` (as MongoDB is); settings that cannot work (a refused
    password, an untrusted certificate, a missing TLS file) stop the start at once with a
    StartupError naming the setting, because waiting cannot fix them."""
    try:
        bus = kafka_bus(settings, client_id)
    except KafkaSecurityError as error:
        raise StartupError(str(error)) from None
    retryable = retry_if_exception(lambda error: isinstance(error, KafkaAccessError) and error.retryable)
    try:
        async for attempt in _while_starting(settings, stop, retryable):
            with attempt:
                await bus.check_access()
    except KafkaAccessError as error:
        raise StartupError(str(error)) from None
    except RetryError as error:
        raise StartupError(
            f"{error.last_attempt.exception()}; gave up after {settings.startup_retry_s:.0f}s "
            "(CAIRN_STARTUP_RETRY_S)"
        ) from None
    return bus


async def mongo_store(settings: CairnSettings, stop: asyncio.Event | None = None) -> MongoStore:
    """The store, opened. A database that is down or wedged when a service (re)starts is waited
    for, with backoff, for `startup_retry_s`: under a supervisor, exiting at once turns a short
    outage into a crash loop, and under the chaos tests it killed restarted services."""
    store = MongoStore(
        settings.mongo_url,
        settings.mongo_db,
        timeout_ms=settings.mongo_timeout_ms,
        fence_retention_ms=int(settings.mongo_fence_retention_s * 1000),
    )
    try:
        async for attempt in _while_starting(settings, stop, retry_if_exception_type(PyMongoError)):
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
    """`cairn dev`'s bus: members keep their ids across restarts (the caller holds the state
    file's lock, so no other process has them)."""
    from shared.adapters.embedded_bus import EmbeddedBus

    return EmbeddedBus(
        path,
        partitions=settings.kafka_partitions,
        client_id="cairn-dev",
        kept_longer={settings.topics.dead_letter: DEAD_LETTER_RETENTION_S},
        stable_members=True,
        group_retention_s=settings.bus_group_retention_s,
        synchronous=settings.sqlite_synchronous,
    )


async def sqlite_store(path: str, settings: CairnSettings) -> Store:
    from shared.adapters.sqlite_store import SqliteStore

    store = SqliteStore(path, settings.sqlite_synchronous)
    await store.open()
    return store
