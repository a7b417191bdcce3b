"""docker-compose.yml and docker-compose.scale.yml: valid for Compose, and in step with the code —
the Cairn services are exactly those `cairn run` knows, the topic job creates exactly
Topics.fixed, every CAIRN_* variable is a CairnSettings field, partitions are set in one place."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from services.assembly import SERVICES
from shared.config import CairnSettings
from shared.topics import Topics
from tests.deploy.tools import ROOT, require_tool

COMPOSE = ROOT / "docker-compose.yml"
SCALE = ROOT / "docker-compose.scale.yml"
COLLECTOR = ROOT / "deploy" / "otel-collector.yaml"


def _load(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text())
    assert isinstance(data, dict), f"{path.name} is not a YAML mapping"
    return data


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return _load(COMPOSE)


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]


def _environment(service: dict[str, Any]) -> dict[str, Any]:
    env = service.get("environment") or {}
    if isinstance(env, list):  # KEY=VALUE form
        env = dict(item.split("=", 1) if "=" in item else (item, None) for item in env)
    return env


def _cairn_services(services: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The services built from deploy/Dockerfile: Cairn's own."""
    return {
        name: service
        for name, service in services.items()
        if isinstance(service.get("build"), dict)
        and service["build"].get("dockerfile") == "deploy/Dockerfile"
    }


@pytest.mark.parametrize("files", [[COMPOSE], [COMPOSE, SCALE]], ids=["compose", "compose+scale"])
def test_docker_compose_config_is_valid(files: list[Path]) -> None:
    tool = require_tool("docker-compose", "apt-get install docker-compose (scripts/setup.sh does, as root)")
    arguments = [part for path in files for part in ("-f", str(path))]
    result = subprocess.run(
        [tool, *arguments, "config", "-q"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, (
        f"docker-compose config rejected {[p.name for p in files]}:\n{result.stderr}"
    )


def test_cairn_services_are_exactly_the_services_the_code_defines(services: dict[str, Any]) -> None:
    cairn = _cairn_services(services)
    commands = {name: service.get("command") for name, service in cairn.items()}
    for name, command in commands.items():
        assert command == ["run", name], f"service {name} must run `cairn run {name}`, not {command}"
    assert sorted(cairn) == sorted(SERVICES), (
        f"compose runs {sorted(cairn)}; `cairn run` knows {sorted(SERVICES)} (services/assembly.py)"
    )


def test_topic_job_creates_exactly_the_fixed_topics(services: dict[str, Any]) -> None:
    job = services["kafka-topics"]
    created = str(_environment(job)["TOPICS"]).split()
    prefix = _environment(services["decider"]).get("CAIRN_TOPIC_PREFIX", CairnSettings().topic_prefix)
    expected = Topics(prefix).fixed
    assert len(created) == len(set(created)), f"a topic is listed twice: {created}"
    missing, unknown = sorted(set(expected) - set(created)), sorted(set(created) - set(expected))
    assert not missing and not unknown, (
        f"kafka-topics creates {created}; Topics.fixed is {expected} "
        f"(missing {missing}, not Cairn's {unknown})"
    )


def test_every_cairn_variable_is_a_setting(services: dict[str, Any]) -> None:
    fields = {f"CAIRN_{name.upper()}" for name in CairnSettings.model_fields}
    for name, service in services.items():
        for variable in _environment(service):
            if variable.startswith("CAIRN_"):
                assert variable in fields, (
                    f"service {name} sets {variable}, which is not a CairnSettings field (shared/config.py)"
                )
        for variable, value in _environment(service).items():
            if variable in fields and value is not None:
                CairnSettings.model_validate({variable.removeprefix("CAIRN_").lower(): value})


def test_cairn_services_share_one_environment_and_wait_for_their_servers(services: dict[str, Any]) -> None:
    cairn = _cairn_services(services)
    shared = dict(_environment(cairn["decider"]))
    for name, service in cairn.items():
        env = _environment(service)
        for variable, value in shared.items():
            assert env.get(variable) == value, f"{name}: {variable}={env.get(variable)!r}, others {value!r}"
        depends = service.get("depends_on") or {}
        assert depends.get("kafka", {}).get("condition") == "service_healthy", name
        assert depends.get("kafka-topics", {}).get("condition") == "service_completed_successfully", name
        assert depends.get("mongo-init", {}).get("condition") == "service_completed_successfully", name
        assert service.get("stop_signal", "SIGTERM") == "SIGTERM", name
    for server in ("kafka", "mongo"):
        assert "healthcheck" in services[server], f"{server} needs a healthcheck (others wait for it)"
    assert services["mongo-init"]["depends_on"]["mongo"]["condition"] == "service_healthy"
    assert services["kafka-topics"]["depends_on"]["kafka"]["condition"] == "service_healthy"
    assert "rs.initiate" in " ".join(services["mongo-init"]["command"])
    replica_set = urlsplit(shared["CAIRN_MONGO_URL"]).query
    assert "replicaSet=rs0" in replica_set and "--replSet" in services["mongo"]["command"]


def test_partitions_are_set_in_one_place(compose: dict[str, Any], services: dict[str, Any]) -> None:
    partitions = compose["x-cairn-partitions"]
    values = {
        "CAIRN_KAFKA_PARTITIONS (decider)": _environment(services["decider"])["CAIRN_KAFKA_PARTITIONS"],
        "KAFKA_NUM_PARTITIONS (kafka)": _environment(services["kafka"])["KAFKA_NUM_PARTITIONS"],
        "PARTITIONS (kafka-topics)": _environment(services["kafka-topics"])["PARTITIONS"],
    }
    for where, value in values.items():
        assert str(value) == str(partitions), f"{where} is {value}, x-cairn-partitions is {partitions}"
    text = COMPOSE.read_text()
    assert text.count("*partitions") == len(values), "every partition count must be the *partitions alias"


def test_api_is_published_on_its_port(services: dict[str, Any]) -> None:
    api = services["api"]
    env = _environment(api)
    assert str(env["CAIRN_API_HOST"]) == "0.0.0.0"
    port = str(env.get("CAIRN_API_PORT", CairnSettings().api_port))
    assert api["ports"] == [f"{port}:{port}"]
    published = [name for name, service in _cairn_services(services).items() if service.get("ports")]
    assert published == ["api"], f"only the api has a port; published: {published}"


def test_scale_override_scales_decider_and_scheduler(compose: dict[str, Any]) -> None:
    scale = _load(SCALE)["services"]
    assert sorted(scale) == ["decider", "scheduler"]
    for name, service in scale.items():
        replicas = service.get("scale", service.get("deploy", {}).get("replicas"))
        assert isinstance(replicas, int) and 1 < replicas <= compose["x-cairn-partitions"], (
            f"{name}: {replicas} replicas; more than x-cairn-partitions would sit idle"
        )


def test_telemetry_reaches_the_collector_and_jaeger(services: dict[str, Any]) -> None:
    collector = _load(COLLECTOR)
    endpoint = urlsplit(_environment(services["decider"])["CAIRN_OTLP_ENDPOINT"])
    assert endpoint.hostname in services, f"CAIRN_OTLP_ENDPOINT names {endpoint.hostname}, not a service"
    http = collector["receivers"]["otlp"]["protocols"]["http"]["endpoint"]
    assert http.rsplit(":", 1)[1] == str(endpoint.port), (
        f"collector listens on {http}, Cairn sends to {endpoint}"
    )
    volumes = " ".join(services[endpoint.hostname]["volumes"])
    assert "./deploy/otel-collector.yaml:" in volumes
    for kind, pipeline in collector["service"]["pipelines"].items():
        for part in ("receivers", "processors", "exporters"):
            for component in pipeline.get(part, []):
                assert component in collector[part], (
                    f"{kind} pipeline names undefined {part[:-1]} {component}"
                )
    jaeger = collector["exporters"]["otlp/jaeger"]["endpoint"].split(":")[0]
    assert jaeger in services and "traces" in collector["service"]["pipelines"]


def test_the_api_reads_its_keys_from_a_secret_that_is_never_committed(
    compose: dict[str, Any], services: dict[str, Any]
) -> None:
    """The published api has keys (or it would refuse to start on 0.0.0.0): a compose secret
    mounted where CAIRN_AUTH_KEYS_FILE points, from a host file git ignores, so real keys are
    not committed by accident; and no service turns the refusal off."""
    api = services["api"]
    keys_file = _environment(api).get("CAIRN_AUTH_KEYS_FILE")
    mounted = {}
    for entry in api.get("secrets") or []:
        source = entry if isinstance(entry, str) else entry["source"]
        target = source if isinstance(entry, str) else entry.get("target", source)
        mounted[target if target.startswith("/") else f"/run/secrets/{target}"] = source
    assert keys_file in mounted, (
        f"CAIRN_AUTH_KEYS_FILE={keys_file}; the api's secrets are at {sorted(mounted)}"
    )
    source = compose["secrets"][mounted[keys_file]]["file"]
    ignored = subprocess.run(["git", "check-ignore", "-q", source], cwd=ROOT, timeout=30)
    assert ignored.returncode == 0, f"{source} holds real keys: add it to .gitignore"
    tracked = subprocess.run(["git", "ls-files", "--error-unmatch", source], cwd=ROOT, capture_output=True)
    assert tracked.returncode != 0, f"{source} is committed: remove it from git"
    for name, service in services.items():
        assert "CAIRN_INSECURE" not in _environment(service), f"{name} sets CAIRN_INSECURE"
