"""Topic creation on a real broker: the configured replication factor is what is asked for, and a
refusal is an error that names the topic and the settings, not a silent no-op."""

from __future__ import annotations

import pytest
from aiokafka.admin import AIOKafkaAdminClient

from shared.adapters.kafka_bus import KafkaBus

pytestmark = pytest.mark.integration


async def topic_names(bootstrap: str) -> set[str]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        return set(await admin.list_topics())
    finally:
        await admin.close()


async def test_a_replication_factor_the_cluster_cannot_meet_is_a_clear_error(
    kafka_bootstrap: str, unique: str
) -> None:
    topic = f"rf{unique}.too.many.replicas"
    bus = KafkaBus(kafka_bootstrap, replication_factor=2)  # the test cluster has one broker
    with pytest.raises(RuntimeError) as refused:
        await bus.ensure_topics([topic])
    message = str(refused.value)
    assert topic in message and "CAIRN_KAFKA_REPLICATION_FACTOR" in message
    assert "eplication factor" in message, message  # the broker's own reason
    assert topic not in await topic_names(kafka_bootstrap)


async def test_topics_are_created_with_the_configured_factor(kafka_bootstrap: str, unique: str) -> None:
    topic = f"rf{unique}.one.replica"
    await KafkaBus(kafka_bootstrap, partitions=3, replication_factor=1).ensure_topics([topic])
    assert topic in await topic_names(kafka_bootstrap)
