"""Cairn on a Kafka that demands TLS and SASL, or TLS with client certificates, the way managed
clusters and Strimzi run it.

A private broker (deploy/local/up.sh with CAIRN_LOCAL_KAFKA_SECURITY=sasl_ssl: a SASL_SSL
listener with its own CA, SCRAM-SHA-512/256 and PLAIN users, and an SSL listener that requires a
client certificate signed by that CA, like Strimzi's `tls` authentication) proves that every Kafka
client Cairn opens — the services' producers and consumers, topic creation, a Kafka worker — takes the
CAIRN_KAFKA_* security settings, and that settings which cannot work stop a service at once with
a message naming what to fix, instead of retrying for CAIRN_STARTUP_RETRY_S.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.common import kafka_security
from shared.adapters.kafka_bus import KafkaBus
from shared.adapters.kafka_security import KafkaAccessError, KafkaSecurity
from shared.config import CairnSettings
from shared.ports.bus import Outgoing, Received
from tests.e2e.cluster import ROOT, Cluster, assert_stopped_cleanly
from tests.e2e.private_servers import PrivateServers
from tests.e2e.test_services_e2e import assert_all_completed_exactly, start_pipelines

pytestmark = [pytest.mark.integration, pytest.mark.e2e]


@pytest.fixture(scope="module")
def secure_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateServers]:
    servers = PrivateServers(tmp_path_factory.mktemp("secure-kafka"), kafka_security="sasl_ssl")
    try:
        servers.start_kafka()
        yield servers
    finally:
        servers.close()


def _settings(servers: PrivateServers, **changes: str) -> dict[str, str]:
    """The CAIRN_KAFKA_* variables up.sh printed for the secure listener, with `changes` (an
    empty value unsets a variable, as it does in the environment)."""
    return {**servers.kafka_settings, **changes}


def _cairn(arguments: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`cairn <arguments>` as its own process, as an operator runs it."""
    return subprocess.run(
        [sys.executable, "-m", "cairn", *arguments],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _security(variables: dict[str, str]) -> KafkaSecurity:
    fields = {name.removeprefix("CAIRN_").lower(): value for name, value in variables.items() if value}
    return kafka_security(CairnSettings(**fields))


async def _round_trip(bus: KafkaBus, topic: str, group: str) -> None:
    """Create `topic`, publish three records and consume them, all through `bus`."""
    received: list[Received] = []
    arrived = asyncio.Event()

    async def handler(batch: list[Received]) -> None:
        received.extend(batch)
        if len(received) >= 3:
            arrived.set()

    await bus.ensure_topics([topic])
    bus.subscribe([topic], group, handler)
    await bus.start()
    try:
        await bus.publish([Outgoing(topic, json.dumps({"i": i}).encode(), key=str(i)) for i in range(3)])
        await asyncio.wait_for(arrived.wait(), 60)
    finally:
        await bus.stop()
    assert sorted(json.loads(r.value)["i"] for r in received) == [0, 1, 2]


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"])
async def test_the_bus_round_trips_over_sasl_ssl(
    secure_kafka: PrivateServers, unique: str, mechanism: str
) -> None:
    variables = _settings(secure_kafka, CAIRN_KAFKA_SASL_MECHANISM=mechanism)
    assert variables["CAIRN_KAFKA_SECURITY_PROTOCOL"] == "SASL_SSL"
    bus = KafkaBus(
        secure_kafka.kafka_bootstrap, client_id="sec-test", partitions=2, security=_security(variables)
    )
    await _round_trip(bus, f"sec{unique}.{mechanism.lower()}", f"sec{unique}")


async def test_the_bus_round_trips_over_mutual_tls(secure_kafka: PrivateServers, unique: str) -> None:
    """Protocol SSL with a client certificate (no SASL): the listener requires the certificate."""
    variables = secure_kafka.kafka_mtls_settings
    assert variables["CAIRN_KAFKA_SECURITY_PROTOCOL"] == "SSL"
    bus = KafkaBus(
        variables["CAIRN_KAFKA_BOOTSTRAP"], client_id="mtls-test", partitions=2, security=_security(variables)
    )
    await bus.check_access()
    await _round_trip(bus, f"mtls{unique}.t", f"mtls{unique}")


async def test_mutual_tls_without_a_client_certificate_says_so(secure_kafka: PrivateServers) -> None:
    """The CA alone is not enough where the listener requires a client certificate. The broker
    rejects the handshake with a TLS alert (bad_certificate) that the client reads only once the
    handshake is over, on its first request, so aiokafka reports "Connection ... closed" (the
    ssl.SSLError is its __cause__). Waiting cannot fix a missing certificate: it must stop a
    service at once, naming the setting."""
    variables = {
        **secure_kafka.kafka_mtls_settings,
        "CAIRN_KAFKA_SSL_CERTFILE": "",
        "CAIRN_KAFKA_SSL_KEYFILE": "",
    }
    bus = KafkaBus(variables["CAIRN_KAFKA_BOOTSTRAP"], client_id="mtls-test", security=_security(variables))
    with pytest.raises(KafkaAccessError) as caught:
        await bus.check_access()
    refusal = caught.value
    assert not refusal.retryable, str(refusal)
    assert variables["CAIRN_KAFKA_BOOTSTRAP"] in str(refusal)
    assert "CAIRN_KAFKA_SSL_CERTFILE" in str(refusal), str(refusal)


async def test_settings_that_cannot_work_say_what_to_fix(secure_kafka: PrivateServers) -> None:
    async def refusal(**changes: str) -> KafkaAccessError:
        variables = _settings(secure_kafka, **changes)
        bus = KafkaBus(secure_kafka.kafka_bootstrap, client_id="sec-test", security=_security(variables))
        with pytest.raises(KafkaAccessError) as caught:
            await bus.check_access()
        return caught.value

    wrong_password = await refusal(CAIRN_KAFKA_SASL_PASSWORD="not-the-password")
    assert not wrong_password.retryable
    assert "refused the credentials of 'cairn' (SCRAM-SHA-512)" in str(wrong_password)
    assert "not-the-password" not in str(wrong_password)
    untrusted = await refusal(CAIRN_KAFKA_SSL_CAFILE="")
    assert not untrusted.retryable
    assert "certificate is not trusted" in str(untrusted) and "CAIRN_KAFKA_SSL_CAFILE" in str(untrusted)
    # A client without TLS on a TLS listener only sees the connection closed: it may as well be
    # a broker going down, so it is retried, with a hint at the protocol.
    plaintext = await refusal(
        CAIRN_KAFKA_SECURITY_PROTOCOL="PLAINTEXT",
        CAIRN_KAFKA_SASL_MECHANISM="",
        CAIRN_KAFKA_SASL_USERNAME="",
        CAIRN_KAFKA_SASL_PASSWORD="",
        CAIRN_KAFKA_SSL_CAFILE="",
    )
    assert plaintext.retryable and "CAIRN_KAFKA_SECURITY_PROTOCOL=PLAINTEXT" in str(plaintext)


def test_a_service_with_a_wrong_password_stops_at_once(
    secure_kafka: PrivateServers, mongo_url: str, unique: str
) -> None:
    """Not the 300 s a service waits for a cluster that is down: a refused password will not
    get better, and the operator needs the reason in the pod's last log line."""
    env = {
        **os.environ,
        **_settings(secure_kafka, CAIRN_KAFKA_SASL_PASSWORD="not-the-password"),
        "CAIRN_MONGO_URL": mongo_url,
        "CAIRN_MONGO_DB": f"sec_{unique}",
        "CAIRN_TOPIC_PREFIX": f"sec{unique}.",
        "CAIRN_STARTUP_RETRY_S": "300",
    }
    result = _cairn(["run", "decider"], env)
    assert result.returncode == 2, result.stderr[-3000:]
    last = result.stderr.strip().splitlines()[-1]
    assert "cairn decider cannot start:" in last and "refused the credentials of 'cairn'" in last, last
    assert "Traceback" not in result.stderr and "not-the-password" not in result.stderr


async def test_services_and_a_kafka_worker_run_workflows_over_sasl_ssl(
    secure_kafka: PrivateServers, mongo_url: str, unique: str, tmp_path: Path
) -> None:
    variables = _settings(secure_kafka)
    cluster = Cluster(
        secure_kafka.kafka_bootstrap,
        mongo_url,
        unique,
        tmp_path,
        kafka_security=_security(variables),
        **variables,
    )
    await cluster.start()
    try:
        ids = await start_pipelines(cluster, count=10)
        # The CLI talking straight to MongoDB and Kafka (no api) takes the same settings.
        cli_env = {name: value for name, value in cluster.env.items() if name != "CAIRN_SERVER"}
        cli = ["start", "e2e_pipeline", "--json", "--id", f"{ids[0]}-cli"]
        started = _cairn([*cli, "--input", json.dumps({"n": 10, "add": 2, "label": "L10"})], cli_env)
        assert started.returncode == 0, started.stderr[-3000:]
        ids.append(json.loads(started.stdout)["workflowId"])
        await assert_all_completed_exactly(cluster, ids)
    finally:
        codes = await cluster.stop()
    assert_stopped_cleanly(codes, cluster.diagnostics)
    for name in cluster.processes:
        assert variables["CAIRN_KAFKA_SASL_PASSWORD"] not in cluster[name].log_path.read_text()
