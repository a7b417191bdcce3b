"""docker-compose.yml's Kafka against the real thing (issue 5). No Docker engine runs here, so the
`kafka` service is booted as a real broker of the image's version from the jars deploy/local/up.sh
installs: its KAFKA_* environment rendered into server.properties and its storage formatted by the
image's own code (kafka.docker.KafkaDockerWrapper, what the image's launch script runs), with only
the container addresses mapped to 127.0.0.1 (tests/deploy/compose_kafka.py says exactly what the
image does and what is changed here). Then the compose healthcheck and the kafka-topics job run as
written against it, and a task topic is auto-created the way Cairn's tasks.<type> topics are.

tests/deploy/test_compose.py keeps the file in step with the code; this checks that what it
configures works. Java and the jars missing: skipped locally, failed under CI=true (tests/needs.py).
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from typing import Any

import pytest
import yaml

from shared.topics import Topics
from tests.deploy.compose_kafka import (
    COMPOSE,
    IMAGE_BIN,
    IMAGE_DEFAULT_CLUSTER_ID,
    TOOL_CLASSES,
    ComposeBroker,
    ComposeError,
    Finished,
    base_environment,
    command_argv,
    duration_s,
    healthcheck_argv,
    image_environment,
    image_server_properties,
    image_version,
    kafka_install,
    localize_script,
    property_name,
    read_properties,
    run,
    scripts_used,
    service_environment,
    stand_in_bin,
)

pytestmark = pytest.mark.timeout(300)

# A broker reports a property it does not know (a misspelt KAFKA_* variable: it boots fine, logs
# nothing, and the setting is silently ignored) as sensitive, with no value, like a password.
SECRET_NAME = re.compile(r"password|jaas\.config|\.key$|certificate")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(data, dict), "docker-compose.yml is not a YAML mapping"
    return data


@pytest.fixture(scope="module")
def partitions(compose: dict[str, Any]) -> int:
    return int(compose["x-cairn-partitions"])


@pytest.fixture(scope="module")
def broker(
    compose: dict[str, Any], tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> ComposeBroker:
    """One broker for the module (a boot is 15-30 s), stopped by a finalizer registered before it
    starts, so a half-started one is stopped too."""
    directory = tmp_path_factory.mktemp("compose-kafka")
    install = kafka_install(image_version(compose["services"]["kafka"]), directory / "install")
    broker = ComposeBroker(compose, install, directory / "broker")
    request.addfinalizer(broker.stop)
    broker.start()
    return broker


def _failure(what: str, result: Finished, broker: ComposeBroker) -> str:
    return f"{what}\n{result.report()}\n{broker.log_tail(40)}"


def _job_output(result: Finished) -> str:
    """The job's output without TopicCommand's warning about '.' in topic names (one per topic)."""
    return "\n".join(line for line in result.stdout.splitlines() if "limitations in metric names" not in line)


def _topic_partitions(bootstrap: str, topics: list[str]) -> dict[str, int | str]:
    """Partition count of each topic, or the error the broker gave for it."""
    from aiokafka.admin import AIOKafkaAdminClient

    async def describe() -> dict[str, int | str]:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15000)
        await admin.start()
        try:
            described = await admin.describe_topics(topics)
        finally:
            await admin.close()
        return {
            str(t["topic"]): len(t["partitions"]) if t["error_code"] == 0 else f"error {t['error_code']}"
            for t in described
        }

    return asyncio.run(asyncio.wait_for(describe(), 60))


def _broker_configs(bootstrap: str, node_id: str) -> dict[str, dict[str, Any]]:
    """The broker's configuration as it reports it (DescribeConfigs): name -> {config_value,
    is_sensitive, config_source, ...}."""
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    async def describe() -> dict[str, dict[str, Any]]:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15000)
        await admin.start()
        try:
            responses = await admin.describe_configs([ConfigResource(ConfigResourceType.BROKER, node_id)])
        finally:
            await admin.close()
        entries: dict[str, dict[str, Any]] = {}
        for response in responses:
            for resource in response.to_object()["resources"]:
                for entry in resource["config_entries"]:
                    name = entry.get("config_names", entry.get("config_name"))  # aiokafka's spelling
                    entries[str(name)] = entry
        return entries

    return asyncio.run(asyncio.wait_for(describe(), 60))


def _produce_first_message(bootstrap: str, topic: str) -> int:
    """Send one message to a topic that does not exist yet (the broker creates it on the
    producer's metadata request) and return the partition count the producer then sees."""
    from aiokafka import AIOKafkaProducer

    async def produce() -> int:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, request_timeout_ms=15000)
        await producer.start()
        try:
            await producer.send_and_wait(topic, b"first use")
            return len(await producer.partitions_for(topic))
        finally:
            await producer.stop()

    return asyncio.run(asyncio.wait_for(produce(), 60))


def test_environment_to_property_rules() -> None:
    """The image's rules (KafkaDockerWrapper 4.1.1, docker/examples/README.md's examples):
    `_` -> `.`, `__` -> `_`, `___` -> `-`, JVM/logging variables excluded, CLUSTER_ID defaulted."""
    assert property_name("KAFKA_ABC_DEF") == "abc.def"
    assert property_name("KAFKA_ABC__DEF") == "abc_def"
    assert property_name("KAFKA_ABC___DEF") == "abc-def"
    assert property_name("KAFKA_LISTENER_SECURITY_PROTOCOL_MAP") == "listener.security.protocol.map"
    for excluded in ("KAFKA_HEAP_OPTS", "KAFKA_OPTS", "KAFKA_JMX_OPTS", "KAFKA_LOG4J_LOGGERS"):
        assert property_name(excluded) is None, excluded
    assert property_name("CLUSTER_ID") is None and property_name("PARTITIONS") is None
    env = image_environment(
        {"KAFKA_PROCESS_ROLES": "broker", "KAFKA_ADVERTISED_LISTENERS": "PLAINTEXT://kafka:9092"}
    )
    assert env["CLUSTER_ID"] == IMAGE_DEFAULT_CLUSTER_ID
    assert env["KAFKA_LISTENERS"] == "PLAINTEXT://0.0.0.0:9092"
    with pytest.raises(ComposeError):
        image_environment({"KAFKA_PROCESS_ROLES": "controller", "KAFKA_ADVERTISED_LISTENERS": "X://a:1"})
    assert duration_s("1m30s", 0) == 90 and duration_s(None, 7) == 7


def test_image_renders_server_properties_by_those_rules(broker: ComposeBroker) -> None:
    """The server.properties the image's own wrapper wrote is the rules' rendering of the
    environment: the rules above are the image's, and the broker runs on the image's file."""
    written = read_properties(broker.properties_path)
    expected = image_server_properties(broker.local.env)
    assert written == expected, (
        f"KafkaDockerWrapper wrote {written}\nthe rules give {expected}\n"
        f"(tests/deploy/compose_kafka.py no longer describes the image)"
    )
    in_container = image_server_properties(broker.container_env)
    changed = {key for key in written if written[key] != in_container.get(key)}
    assert changed <= {"listeners", "advertised.listeners", "controller.quorum.voters", "log.dirs"}, (
        f"only addresses and log.dirs may differ from the container's file; also {sorted(changed)}"
    )


def test_broker_runs_with_every_compose_setting(broker: ComposeBroker) -> None:
    """Kafka runs, and its configuration (DescribeConfigs) holds every setting of the kafka
    service as given: a misspelt variable, which Kafka ignores without a word, fails here."""
    assert broker.process is not None and broker.process.poll() is None, broker.log_tail()
    written = read_properties(broker.properties_path)
    effective = _broker_configs(broker.bootstrap, written["node.id"])
    wrong = {}
    for key, value in written.items():
        entry = effective.get(key)
        if entry is None:
            wrong[key] = "not reported by the broker"
        elif entry["is_sensitive"] and entry["config_value"] is None:
            if not SECRET_NAME.search(key):
                wrong[key] = "unknown to Kafka (reported as an opaque, sensitive value): a misspelt variable?"
        elif entry["config_value"] != value:
            wrong[key] = f"in effect: {entry['config_value']!r}, given: {value!r}"
    assert not wrong, (
        "the broker does not run with these settings of the kafka service:\n"
        + "\n".join(f"  {key}: {why}" for key, why in sorted(wrong.items()))
        + f"\n{broker.describe()}"
    )


def test_kafka_healthcheck_passes(broker: ComposeBroker, compose: dict[str, Any]) -> None:
    """The compose healthcheck, as written (with the image's script replaced by one running the
    same class), passes: what every Cairn service and the topic job wait for."""
    healthcheck = compose["services"]["kafka"]["healthcheck"]
    argv = healthcheck_argv(healthcheck["test"])
    bin_dir = stand_in_bin(broker.install, broker.directory / "bin", scripts_used(*argv))
    reachable = broker.addresses.kafka_hosts | {"localhost", "127.0.0.1"}  # it runs in the kafka container
    argv = [localize_script(part, broker.addresses, reachable, bin_dir, "kafka healthcheck") for part in argv]
    # The engine's timeout, with room for a JVM start on a loaded machine.
    timeout = max(duration_s(healthcheck.get("timeout"), 30), 60)
    result = run(argv, base_environment(), timeout)
    if result.returncode != 0:
        # The healthcheck discards the tool's output; run the tool once more to show it.
        direct = run(
            [str(bin_dir / "kafka-broker-api-versions.sh"), "--bootstrap-server", broker.bootstrap],
            base_environment(),
            60,
        )
        pytest.fail(
            _failure(f"the kafka healthcheck failed:\n{result.report()}\nthe tool itself:", direct, broker)
        )


def test_topic_job_creates_every_topic_with_the_partition_count(
    broker: ComposeBroker, compose: dict[str, Any], partitions: int
) -> None:
    """The kafka-topics job, as written, exits 0, and every topic it lists then exists with
    x-cairn-partitions partitions."""
    job = compose["services"]["kafka-topics"]
    env = service_environment(job)
    argv = command_argv(job)
    bin_dir = stand_in_bin(broker.install, broker.directory / "bin", scripts_used(*argv))
    reachable = set(broker.addresses.kafka_hosts)  # it runs in its own container
    argv = [
        localize_script(part, broker.addresses, reachable, bin_dir, "kafka-topics command") for part in argv
    ]
    started = time.monotonic()
    result = run(argv, {**base_environment(), **env}, 240)
    assert result.returncode == 0, _failure("the kafka-topics job failed:", result, broker)
    topics = env["TOPICS"].split()
    counts = _topic_partitions(broker.bootstrap, topics)
    wrong = {topic: counts.get(topic, "missing") for topic in topics if counts.get(topic) != partitions}
    assert not wrong, (
        f"after the kafka-topics job ({time.monotonic() - started:.0f} s) these topics lack "
        f"x-cairn-partitions={partitions} partitions: {wrong}\n--- job output:\n{_job_output(result)}"
    )
    assert IMAGE_BIN not in " ".join(argv)


def test_task_topic_created_on_first_use_gets_the_partition_count(
    broker: ComposeBroker, compose: dict[str, Any], partitions: int
) -> None:
    """A tasks.<type> topic is created by the broker the first time it is used (Cairn creates
    only the fixed topics), with the partition count every other Cairn topic has."""
    prefix = service_environment(compose["services"]["decider"]).get("CAIRN_TOPIC_PREFIX", "cairn.")
    topic = Topics(prefix).tasks(f"probe{uuid.uuid4().hex[:8]}")
    try:
        count = _produce_first_message(broker.bootstrap, topic)
    except Exception as error:  # any failure: say what it likely means, with the broker's side
        pytest.fail(
            f"could not produce the first message to {topic} ({error!r}): does the broker create "
            f"topics on first use (KAFKA_AUTO_CREATE_TOPICS_ENABLE)?\n"
            f"{broker.describe()}\n{broker.log_tail(20)}"
        )
    assert count == partitions, (
        f"{topic} was auto-created with {count} partitions, x-cairn-partitions is {partitions} "
        f"(KAFKA_NUM_PARTITIONS)\n{broker.describe()}"
    )


def test_stand_ins_cover_what_compose_runs(compose: dict[str, Any]) -> None:
    """Every /opt/kafka/bin script the compose file runs has a stand-in here (the same tool
    class), so no command is skipped or checked only in part."""
    services = compose["services"]
    texts = [
        *healthcheck_argv(services["kafka"]["healthcheck"]["test"]),
        *command_argv(services["kafka-topics"]),
    ]
    used = scripts_used(*texts)
    assert used, "compose runs no /opt/kafka/bin script: this check has nothing to run"
    assert used <= set(TOOL_CLASSES), f"no stand-in for {sorted(used - set(TOOL_CLASSES))}"
