"""Bus port on Apache Kafka through FastStream's KafkaBroker (aiokafka underneath).

Every subscription is a batch subscriber with manual acknowledgement: offsets are committed only
after the handler returned, i.e. after its effects are durable; if the handler raises, each
partition is sought back to the batch's first record and the batch is delivered again. Ack and
nack happen here, inside one try block, because FastStream's consume loop does not survive an
exception escaping it (a commit refused after a rebalance would otherwise leave a process that
looks alive and consumes nothing); a refused commit only means the batch is delivered again. Bodies
are handed over as raw bytes — parsing (and dead-lettering what does not parse) is the caller's
job, so a malformed message can never wedge the consumer inside the framework.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError
from faststream import AckPolicy, Context
from faststream.kafka import KafkaBroker
from faststream.kafka.message import KafkaMessage

from shared.ports.bus import BatchHandler, Outgoing, Received

log = logging.getLogger(__name__)


async def _raw_decoder(message: Any) -> None:
    """Skip FastStream's body decoding: handlers parse raw bytes themselves."""
    return None


async def _settle(action: Any, what: str) -> None:
    """Ack or nack without ever raising into FastStream's consume loop."""
    try:
        await action()
    except Exception:
        log.warning(
            "could not %s offsets (a rebalance?); the batch may be delivered again", what, exc_info=True
        )


def _received(record: Any) -> Received:
    headers = {name: value.decode("utf-8", "replace") for name, value in (record.headers or ())}
    key = record.key.decode("utf-8", "replace") if isinstance(record.key, bytes) else record.key
    return Received(
        topic=record.topic,
        value=record.value or b"",
        key=key,
        headers=headers,
        partition=record.partition,
        offset=record.offset,
    )


class KafkaBus:
    def __init__(
        self,
        bootstrap: str,
        *,
        client_id: str = "cairn",
        partitions: int = 4,
        fetch_max_wait_ms: int = 10,
        batch_timeout_ms: int = 20,
    ) -> None:
        self._bootstrap = bootstrap
        self._partitions = partitions
        self._fetch_max_wait_ms = fetch_max_wait_ms
        self._batch_timeout_ms = batch_timeout_ms
        self._broker = KafkaBroker(
            bootstrap,
            client_id=client_id,
            acks="all",
            linger_ms=1,
            logger=logging.getLogger("cairn.kafka"),  # through the service's logging setup
            log_level=logging.DEBUG,  # per-message access logs; errors still log as errors
        )
        self._started = False
        self._connecting = asyncio.Lock()  # concurrent first publishes connect once

    def subscribe(
        self, topics: Sequence[str], group: str, handler: BatchHandler, *, max_batch: int = 100
    ) -> None:
        subscriber = self._broker.subscriber(
            *topics,
            group_id=group,
            batch=True,
            max_records=max_batch,
            batch_timeout_ms=self._batch_timeout_ms,
            fetch_max_wait_ms=self._fetch_max_wait_ms,
            auto_offset_reset="earliest",
            ack_policy=AckPolicy.MANUAL,
            decoder=_raw_decoder,
        )
        failures = 0

        async def on_batch(body: Any, message: KafkaMessage = Context("message")) -> None:
            nonlocal failures
            raw = message.raw_message
            records = raw if isinstance(raw, tuple) else (raw,)
            try:
                await handler([_received(record) for record in records])
            except Exception:
                failures += 1
                # Back off before the batch is redelivered, so an outage of the store is not
                # turned into a hot loop.
                delay = min(0.1 * 2 ** min(failures, 6), 5.0)
                log.exception("handler for %s failed; batch will be redelivered in %.1fs", topics, delay)
                await asyncio.sleep(delay)
                await _settle(message.nack, "rewind")
                return
            failures = 0
            await _settle(message.ack, "commit")

        subscriber(on_batch)

    async def start(self) -> None:
        await self._broker.start()
        self._started = True

    async def stop(self) -> None:
        if self._started:
            self._started = False
            await self._broker.stop()

    async def publish(self, messages: Sequence[Outgoing]) -> None:
        if not messages:
            return
        if not self._started:
            async with self._connecting:
                if not self._started:
                    await self._broker.connect()
                    self._started = True
        futures = [
            await self._broker.publish(
                message.value,
                message.topic,
                key=message.key.encode() if message.key is not None else None,
                headers=message.headers or None,
                no_confirm=True,
            )
            for message in messages
        ]
        await asyncio.gather(*futures)

    async def ensure_topics(self, topics: Sequence[str]) -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=self._bootstrap)
        await admin.start()
        try:
            existing = set(await admin.list_topics())
            missing = [name for name in dict.fromkeys(topics) if name not in existing]
            if missing:
                try:
                    await admin.create_topics(
                        [
                            NewTopic(name, num_partitions=self._partitions, replication_factor=1)
                            for name in missing
                        ]
                    )
                except TopicAlreadyExistsError:
                    pass
        finally:
            await admin.close()
