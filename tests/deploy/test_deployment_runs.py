"""docker-compose.yml, deploy/k8s and deploy/Dockerfile describe a Cairn that works: no container
runs here, so each service is started as a local process exactly as its container would start it
(the image's ENTRYPOINT, ENV and venv, the deployment's command and environment; only server
addresses, the api's port, the topic prefix and database, and the image's paths are remapped:
tests/deploy/deployment.py). Its health checks and probes must pass, a workflow must complete
through the api, and a stop signal must end every service cleanly within its grace period.

The image's venv is built as the Dockerfile builds it: its COPY steps (through .dockerignore) and
a regular, non-editable pip install, run from outside the checkout, so a module, package or data
file the distribution leaves out fails here rather than in production.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from pymongo import MongoClient

from cairn.auth import ApiKey
from services.assembly import SERVICES
from tests.authkeys import secret_of, write_keys
from tests.deploy.deployment import (
    COMPOSE,
    EXPECTED_OUTPUT,
    ROOT,
    ContainerSpec,
    Deployment,
    Image,
    OtlpSink,
    Targets,
    build_venv,
    compose_containers,
    compose_merge,
    k8s_containers,
    k8s_resources,
    local_databases,
    localize,
    read_image,
    run_workflow,
    site_packages,
)
from tests.needs import unavailable

# The project's packages: what the image must hold, whatever pyproject.toml happens to list.
PACKAGES = ("cairn", "shared", "services")
WORKFLOW_WITHIN_S = 60.0

DeploymentFactory = Callable[[list[ContainerSpec], Targets, set[str] | None], Deployment]


@pytest.fixture(scope="module")
def image() -> Image:
    return read_image()


@pytest.fixture(scope="module")
def venv(image: Image, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The image's /opt/venv, built once for the module's tests."""
    return build_venv(image, tmp_path_factory.mktemp("image"), unavailable)


@pytest.fixture
def otlp_sink() -> Iterator[OtlpSink]:
    sink = OtlpSink()
    yield sink
    sink.close()


@pytest.fixture
def deployments(mongo_url: str, tmp_path: Path) -> Iterator[DeploymentFactory]:
    """Makes Deployments; at teardown kills whatever still runs and drops their databases."""
    made: list[Deployment] = []
    databases: set[str] = set()

    def make(specs: list[ContainerSpec], targets: Targets, container_hosts: set[str] | None) -> Deployment:
        local = localize(specs, targets, container_hosts)
        databases.update(local_databases(local))
        deployment = Deployment(specs, local, tmp_path / f"deployment{len(made)}")
        made.append(deployment)
        return deployment

    yield make
    for deployment in made:
        deployment.kill()
    client: MongoClient[dict[str, Any]]
    with MongoClient(mongo_url, serverSelectionTimeoutMS=5000) as client:
        for database in databases:
            client.drop_database(database)


def exercise(deployment: Deployment) -> None:
    """Start every container, pass every health check, complete a workflow through the api (with
    an admin key: the deployments run the api with keys), and stop every container cleanly
    within its grace period."""
    deployment.start()
    deployment.wait_healthy()
    anonymous = httpx.get(f"{deployment.api_url()}/api/metadata/workflow", timeout=30)
    assert anonymous.status_code == 401, f"the api answers without a key: {anonymous.status_code}"
    key = ApiKey("admin", secret_of("admin"))
    state = run_workflow(deployment.api_url(), WORKFLOW_WITHIN_S, deployment.diagnostics, key)
    assert (state["status"], state["output"]) == ("COMPLETED", EXPECTED_OUTPUT), (
        f"{state}\n{deployment.diagnostics()}"
    )
    codes = deployment.stop()
    unclean = {name: code for name, code in codes.items() if code != 0}
    assert not unclean, (
        "not stopped cleanly within the grace period (None: killed after it): "
        f"{unclean}\n{deployment.diagnostics()}"
    )


def assert_exported(specs: list[ContainerSpec], sink: OtlpSink) -> None:
    """Services given an OTLP endpoint exported to it, at the paths a collector serves."""
    if not any("CAIRN_OTLP_ENDPOINT" in spec.env for spec in specs):
        return
    assert "/v1/traces" in sink.received, f"no traces exported; the collector received {sink.received}"
    assert set(sink.received) <= {"/v1/traces", "/v1/metrics"}, sink.received


COMPOSE_SCALE = ROOT / "docker-compose.scale.yml"
# What each source runs: `docker compose up` (one container a service), the same with
# docker-compose.scale.yml over it (its `scale:`), or `kubectl apply -k` (each spec.replicas).
SOURCES = ["compose", "compose+scale", "k8s"]


def _containers(source: str, image: Image, venv: Path) -> tuple[list[ContainerSpec], set[str] | None]:
    """The Cairn containers `source` declares, and the host names its network answers to
    (compose service names; None for Kubernetes, whose Services are external here)."""
    if source.startswith("compose"):
        compose = yaml.safe_load(COMPOSE.read_text())
        if source == "compose+scale":
            compose = compose_merge(compose, yaml.safe_load(COMPOSE_SCALE.read_text()))
        return compose_containers(compose, image, venv), set(compose["services"])
    return k8s_containers(k8s_resources(), image, venv), None


@pytest.mark.integration
@pytest.mark.e2e
@pytest.mark.parametrize("source", SOURCES)
def test_the_deployment_runs_as_written(
    source: str,
    kafka_bootstrap: str,
    mongo_url: str,
    unique: str,
    image: Image,
    venv: Path,
    otlp_sink: OtlpSink,
    deployments: DeploymentFactory,
    tmp_path: Path,
) -> None:
    """docker-compose.yml's services, or deploy/k8s's Deployments, as local processes with the
    command, environment and probes the file gives them, as many replicas of each as it runs:
    every replica healthy, a workflow completes, a stop is clean within the grace period."""
    specs, hostnames = _containers(source, image, venv)
    assert sorted(spec.name for spec in specs) == sorted(SERVICES)
    if source == "compose":
        assert all(spec.replicas == 1 for spec in specs), {spec.name: spec.replicas for spec in specs}
    else:  # what runs here is what the file asks for, and it asks for replicas working together
        assert any(spec.replicas > 1 for spec in specs), f"{source} runs one container of each service"
    targets = Targets(
        kafka_bootstrap,
        mongo_url,
        unique,
        otlp=otlp_sink.url,
        api_keys_file=write_keys(tmp_path),
        secrets_dir=tmp_path / "secret-volumes",
    )
    exercise(deployments(specs, targets, hostnames))
    assert_exported(specs, otlp_sink)


def _checkout_modules() -> list[str]:
    modules = []
    for package in PACKAGES:
        assert (ROOT / package / "__init__.py").is_file(), f"{package} is not a package"
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if "__pycache__" in parts or parts[-1] == "__main__":  # __main__ would run the CLI
                continue
            modules.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return modules


def _checkout_data_files() -> list[str]:
    return [
        path.relative_to(ROOT).as_posix()
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*"))
        if path.is_file() and path.suffix not in (".py", ".pyc") and "__pycache__" not in path.parts
    ]


IMPORT_ALL = """
import importlib, json, sys
from pathlib import Path
venv = Path(sys.argv[1]).resolve()
for name in json.loads(sys.argv[2]):
    try:
        where = Path(importlib.import_module(name).__file__ or "").resolve()
    except Exception as error:
        print(f"import {name}: {error!r}")
        continue
    if not where.is_relative_to(venv):
        print(f"{name} is imported from {where}, not from the installed distribution")
"""


def test_the_image_install_has_every_module_and_data_file(image: Image, venv: Path, tmp_path: Path) -> None:
    """Run from a directory outside the checkout with the image's environment, the installed
    `cairn` starts and every module of the project imports from the installed copy."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**image.env_with_venv(venv), "HOME": str(elsewhere), "TMPDIR": str(elsewhere)}
    entrypoint = shutil.which(image.entrypoint[0], path=env["PATH"])
    assert entrypoint and Path(entrypoint).parent == venv / "bin", (
        f"the image's ENTRYPOINT {image.entrypoint} is not the venv's: {entrypoint}"
    )
    run = subprocess.run(
        [entrypoint, "--help"], cwd=elsewhere, env=env, capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0 and "run" in run.stdout, f"cairn --help:\n{run.stdout}{run.stderr}"

    modules = _checkout_modules()
    python = str(venv / "bin" / "python")
    run = subprocess.run(
        [python, "-c", IMPORT_ALL, str(venv), json.dumps(modules)],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0 and not run.stdout.strip(), (
        f"the installed distribution lacks what the checkout has ({len(modules)} modules):\n"
        f"{run.stdout}{run.stderr}"
    )
    installed = site_packages(venv)
    missing = [name for name in _checkout_data_files() if not (installed / name).is_file()]
    assert not missing, f"data files not installed: {missing}"
