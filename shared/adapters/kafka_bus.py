"""Bus port on Apache Kafka through FastStream's KafkaBroker (aiokafka underneath).

Every subscription is a batch subscriber with manual acknowledgement: offsets are committed only
after the handler returned, i.e. after its effects are durable (behind the consume loop, in
order: kafka_offsets); if the handler raises, each partition is sought back to the batch's first
record and the batch is delivered again. Commit and nack happen here, never raising, because
FastStream's consume loop does not survive an exception escaping it (a commit refused after a
rebalance would otherwise leave a process that looks alive and consumes nothing); a refused
commit only means the batch is delivered again. Bodies
are handed over as raw bytes — parsing (and dead-lettering what does not parse) is the caller's
job, so a malformed message can never wedge the consumer inside the framework.

Subscriptions added while the broker runs (`add_subscription`) are FastStream subscribers
registered as non-persistent and started on their own (`subscriber.start()`); `close()` stops
just that subscriber: FastStream waits for its in-flight batch, then stops its aiokafka consumer,
which leaves the group, so the broker hands its partitions to the remaining members at once.

With an `instance_id` every consumer is a static member (shared/adapters/kafka_membership.py): a
process SIGKILLed and restarted gets its partitions back at once instead of after a session
timeout and a rebalance; a graceful stop or close still leaves the group explicitly.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from aiokafka.errors import KafkaConnectionError, TopicAlreadyExistsError
from faststream import AckPolicy, Context
from faststream.kafka import KafkaBroker
from faststream.kafka.message import KafkaMessage
from faststream.kafka.subscriber.usecase import BatchSubscriber

from shared.adapters.kafka_fetch import fetch_without_idle_sleep
from shared.adapters.kafka_membership import (
    FencingAlarm,
    InstanceIds,
    install_alarm,
    leave_static,
    remove_alarm,
)
from shared.adapters.kafka_offsets import OffsetCommits
from shared.adapters.kafka_security import KafkaSecurity, explain_bootstrap_failure
from shared.ports.bus import BatchHandler, Outgoing, Received, Subscription

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


async def _pause(seconds: float, closing: asyncio.Event) -> None:
    """Back off before a redelivery, but not past a close: shutdown is not held up by a backoff."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await closing.wait()


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


class _KafkaSubscription:
    """A subscriber added at run time; closing it stops only its consumer."""

    def __init__(
        self,
        bus: KafkaBus,
        subscriber: BatchSubscriber,
        commits: OffsetCommits,
        group: str,
        instance_id: str | None,
    ) -> None:
        self._bus = bus
        self._subscriber = subscriber
        self.commits = commits
        self.group = group
        self.instance_id = instance_id
        self._closed = False

    async def close(self) -> None:
        """Finish the in-flight batch (FastStream's graceful wait), then stop the consumer: it
        leaves the group, and the other members are assigned its partitions."""
        if self._closed:
            return
        self._closed = True
        self.commits.closing.set()
        try:
            await self.commits.drain()  # the offsets of batches handled so far go with it
            await self._subscriber.stop()
            if self.instance_id is not None:  # a static member does not leave by itself
                await self._bus._leave({self.group: [self.instance_id]})
        finally:
            self._bus._forget(self)


TOPIC_ALREADY_EXISTS = 36


def _raise_refused_topics(response: Any) -> None:
    """The broker answers a topic creation per topic, without raising: a refusal (a replication
    factor above the broker count, a bad config) would otherwise pass silently and the services
    would run on topics that do not exist."""
    refused = [
        f"{entry[0]}: {entry[2] if len(entry) > 2 and entry[2] else 'error code ' + str(entry[1])}"
        for entry in response.topic_errors
        if entry[1] not in (0, TOPIC_ALREADY_EXISTS)
    ]
    if refused:
        raise RuntimeError(
            "Kafka refused to create topics: "
            + "; ".join(refused)
            + " (check CAIRN_KAFKA_PARTITIONS and CAIRN_KAFKA_REPLICATION_FACTOR against the cluster)"
        )


class KafkaBus:
    def __init__(
        self,
        bootstrap: str,
        *,
        client_id: str = "cairn",
        partitions: int = 4,
        replication_factor: int = 1,
        fetch_max_wait_ms: int = 10,
        batch_timeout_ms: int = 100,
        security: KafkaSecurity | None = None,
        instance_id: str | None = None,
        session_timeout_ms: int = 10_000,
    ) -> None:
        """`instance_id`: this replica's stable name (CAIRN_INSTANCE_ID); given, every consumer is
        a static member, so a restart under the same name resumes at once. Two live processes must
        never share it. `session_timeout_ms`: how long a member that stopped heartbeating (a crash)
        keeps its partitions before the rest of the group takes them over."""
        self._bootstrap = bootstrap
        self._client_id = client_id
        self._security = security or KafkaSecurity()
        self._partitions = partitions
        self._replication_factor = replication_factor
        self._fetch_max_wait_ms = fetch_max_wait_ms
        self._batch_timeout_ms = batch_timeout_ms
        self._broker = KafkaBroker(
            bootstrap,
            client_id=client_id,
            acks="all",
            linger_ms=1,
            security=self._security.broker_security(),
            logger=logging.getLogger("cairn.kafka"),  # through the service's logging setup
            log_level=logging.DEBUG,  # per-message access logs; errors still log as errors
        )
        self._started = False  # connected (publishing may connect without consuming)
        self._consuming = False  # subscribers started
        self._connecting = asyncio.Lock()  # concurrent first publishes connect once
        self._dynamic: set[_KafkaSubscription] = set()
        # One per subscriber: its offset commits, and its closing event, which cuts its backoff short
        self._commits: list[OffsetCommits] = []
        self._session_timeout_ms = session_timeout_ms
        self._instance_ids = InstanceIds(instance_id) if instance_id else None
        self._static: dict[str, list[str]] = {}  # group -> instance ids of the persistent subscribers
        self._alarm = FencingAlarm(instance_id, session_timeout_ms) if instance_id else None

    def subscribe(
        self, topics: Sequence[str], group: str, handler: BatchHandler, *, max_batch: int = 100
    ) -> None:
        """Register a batch subscriber; it starts with the broker."""
        self._register(topics, group, handler, max_batch, persistent=True)

    async def add_subscription(
        self, topics: Sequence[str], group: str, handler: BatchHandler, *, max_batch: int = 100
    ) -> Subscription:
        """Join `group` now (or with `start`, if the bus is not consuming yet)."""
        subscriber, commits, instance_id = self._register(topics, group, handler, max_batch, persistent=False)
        subscription = _KafkaSubscription(self, subscriber, commits, group, instance_id)
        # The broker holds non-persistent subscribers weakly; the bus keeps them until closed.
        self._dynamic.add(subscription)
        if self._consuming:
            await subscriber.start()
        return subscription

    def _register(
        self, topics: Sequence[str], group: str, handler: BatchHandler, max_batch: int, *, persistent: bool
    ) -> tuple[BatchSubscriber, OffsetCommits, str | None]:
        instance_id = self._instance_ids.claim(group) if self._instance_ids else None
        if instance_id is not None and persistent:
            self._static.setdefault(group, []).append(instance_id)
        subscriber = self._broker.subscriber(  # its fetch: kafka_fetch (no sleep when idle)
            *topics,
            group_id=group,
            batch=True,
            max_records=max_batch,
            batch_timeout_ms=self._batch_timeout_ms,
            fetch_max_wait_ms=self._fetch_max_wait_ms,
            auto_offset_reset="earliest",
            ack_policy=AckPolicy.MANUAL,
            # Range, not aiokafka's round-robin default: with every topic of a subscription
            # partitioned alike, a member gets the same partition numbers of each, so all of a
            # workflow's topics (keyed by its id) reach the same decider.
            partition_assignment_strategy=(RangePartitionAssignor,),
            decoder=_raw_decoder,
            persistent=persistent,
            group_instance_id=instance_id,
            session_timeout_ms=self._session_timeout_ms,
            heartbeat_interval_ms=min(3000, self._session_timeout_ms // 3),
        )
        fetch_without_idle_sleep(subscriber)
        commits = OffsetCommits(asyncio.Event())
        self._commits.append(commits)
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
                await _pause(delay, commits.closing)
                await _settle(message.nack, "rewind")
                return
            failures = 0
            await commits.commit(message.consumer, records)  # behind the loop: kafka_offsets

        subscriber(on_batch)
        return subscriber, commits, instance_id

    def _forget(self, subscription: _KafkaSubscription) -> None:
        self._dynamic.discard(subscription)
        if subscription.commits in self._commits:
            self._commits.remove(subscription.commits)
        if self._instance_ids and subscription.instance_id:
            self._instance_ids.release(subscription.group, subscription.instance_id)

    async def _leave(self, members: dict[str, list[str]]) -> None:
        """Static members leave explicitly (aiokafka does not), so a graceful stop hands their
        partitions over at once. Bounded and never raising: at worst the session times out."""
        members = {group: ids for group, ids in members.items() if ids}
        if not members:
            return
        try:
            async with asyncio.timeout(10):
                async with self._admin() as admin:
                    for group, ids in members.items():
                        await leave_static(admin, group, ids)
        except Exception as error:
            log.warning(
                "could not leave %s (%s): its partitions move once the session times out (%d ms)",
                ", ".join(members),
                error,
                self._session_timeout_ms,
            )

    async def start(self) -> None:
        for commits in self._commits:
            commits.closing.clear()
        if self._alarm is not None:
            install_alarm(self._alarm)
        await self._broker.start()
        self._started = True
        self._consuming = True

    async def stop(self) -> None:
        for commits in self._commits:
            commits.closing.set()
        await asyncio.gather(*(commits.drain() for commits in self._commits))
        self._consuming = False
        if self._started:
            self._started = False
            await self._broker.stop()  # stops the dynamic subscribers too, while still referenced
            dynamic = [s for s in self._dynamic if s.instance_id is not None]
            leaving = {group: list(ids) for group, ids in self._static.items()}
            for subscription in dynamic:
                leaving.setdefault(subscription.group, []).append(subscription.instance_id)  # type: ignore[arg-type]
            await self._leave(leaving)
        for subscription in list(self._dynamic):
            self._forget(subscription)
        if self._alarm is not None:
            remove_alarm(self._alarm)

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
        async with self._admin() as admin:
            existing = set(await admin.list_topics())
            missing = [name for name in dict.fromkeys(topics) if name not in existing]
            if not missing:
                return
            try:
                response = await admin.create_topics(
                    [NewTopic(name, self._partitions, self._replication_factor) for name in missing]
                )
            except TopicAlreadyExistsError:
                return
            _raise_refused_topics(response)

    async def peek(self, topic: str, limit: int) -> list[Received]:
        """A consumer without a group, assigned every partition: the last `limit` records of each
        partition up to its end offset, merged by timestamp, the newest `limit` of them kept."""
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self._bootstrap,
            client_id=f"{self._client_id}-peek",
            enable_auto_commit=False,
            **self._security.client_options(),
        )
        await consumer.start()
        try:
            partitions = [TopicPartition(topic, p) for p in await self._partition_ids(topic)]
            if not partitions:
                return []
            consumer.assign(partitions)
            ends = await consumer.end_offsets(partitions)
            starts = await consumer.beginning_offsets(partitions)
            records: list[Any] = []
            for partition in partitions:
                first = max(starts[partition], ends[partition] - limit)
                if first >= ends[partition]:
                    continue
                consumer.seek(partition, first)
                while await consumer.position(partition) < ends[partition]:
                    batch = await consumer.getmany(partition, timeout_ms=1000)
                    got = batch.get(partition, [])
                    if not got:
                        break
                    records.extend(r for r in got if r.offset < ends[partition])
            records.sort(key=lambda record: (record.timestamp, record.partition, record.offset))
            return [_received(record) for record in records[-limit:]]
        finally:
            await consumer.stop()

    async def _partition_ids(self, topic: str) -> list[int]:
        async with self._admin() as admin:
            described = await admin.describe_topics([topic])
        for entry in described:
            if entry.get("topic") == topic and not entry.get("error_code"):
                return sorted(p["partition"] for p in entry.get("partitions", []))
        return []

    async def check_access(self) -> None:
        """Connect once the way every client of this bus will (TLS, SASL) and list the topics:
        raises KafkaAccessError saying what to fix, or whether the cluster is merely down."""
        async with self._admin() as admin:
            await admin.list_topics()

    @contextlib.asynccontextmanager
    async def _admin(self) -> AsyncIterator[AIOKafkaAdminClient]:
        admin = AIOKafkaAdminClient(
            bootstrap_servers=self._bootstrap,
            client_id=f"{self._client_id}-admin",
            **self._security.client_options(),
        )
        try:
            await admin.start()
        except KafkaConnectionError:
            with contextlib.suppress(Exception):
                await admin.close()
            raise await explain_bootstrap_failure(self._bootstrap, self._security) from None
        try:
            yield admin
        finally:
            await admin.close()
