"""deploy/k8s stays valid Kubernetes and true to the code: every manifest passes the API schemas
(offline, kubernetes-validate's bundled schemas), the kustomization lists exactly the manifests,
the Deployments are exactly the services `cairn run` knows, and every setting they pass is one
CairnSettings reads."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import latest_version

from services.assembly import SERVICES
from shared.auth.keys import KeysFileError, parse_keys_text
from shared.config import CairnSettings
from tests.deploy.tools import require_tool

K8S = Path(__file__).resolve().parents[2] / "deploy" / "k8s"
KUSTOMIZATION = K8S / "kustomization.yaml"
# The oldest Kubernetes the manifests support (preStop `sleep` is on by default from 1.30) and
# the newest the pinned validator knows.
KUBERNETES_VERSIONS = ("1.30.0", latest_version())
# Services that must survive the loss of a pod or a node drain without a gap.
REPLICATED = {"decider": 2, "scheduler": 2, "api": 2}
PDB_REQUIRED = {"decider", "scheduler", "api"}
SETTINGS_ENV = {f"CAIRN_{name.upper()}" for name in CairnSettings.model_fields}


def kustomization() -> dict[str, Any]:
    return yaml.safe_load(KUSTOMIZATION.read_text())


def manifest_files() -> list[Path]:
    return sorted(p for p in K8S.glob("*.y*ml") if p.name != KUSTOMIZATION.name)


def documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def resources() -> list[dict[str, Any]]:
    """The objects `kubectl apply -k` would send: the listed files' documents."""
    return [doc for name in kustomization()["resources"] for doc in documents(K8S / name)]


def of_kind(kind: str) -> list[dict[str, Any]]:
    return [doc for doc in resources() if doc["kind"] == kind]


def one(kind: str) -> dict[str, Any]:
    found = of_kind(kind)
    assert len(found) == 1, f"expected one {kind}, found {[d['metadata']['name'] for d in found]}"
    return found[0]


def deployments() -> dict[str, dict[str, Any]]:
    """Deployments by the service they run (`args: [run, <service>]`)."""
    by_service = {}
    for deployment in of_kind("Deployment"):
        containers = deployment["spec"]["template"]["spec"]["containers"]
        name = deployment["metadata"]["name"]
        assert len(containers) == 1, f"{name}: one container per service pod"
        args = containers[0].get("args", [])
        assert len(args) == 2 and args[0] == "run", f"{name}: args must be [run, <service>], not {args}"
        assert args[1] not in by_service, f"two Deployments run {args[1]}"
        by_service[args[1]] = deployment
    return by_service


def containers() -> Iterator[tuple[str, dict[str, Any]]]:
    for deployment in of_kind("Deployment"):
        for container in deployment["spec"]["template"]["spec"]["containers"]:
            yield f"{deployment['metadata']['name']}/{container['name']}", container


CONNECTIONS = "cairn-connections"  # the Secret every pod reads its connection settings from
KAFKA_CA = "cairn-kafka-ca"  # the Secret every pod mounts the Kafka CA from


def secret(name: str) -> dict[str, Any]:
    found = [doc for doc in of_kind("Secret") if doc["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one Secret {name}, found {len(found)}"
    return found[0]


def connections() -> dict[str, str]:
    return {**secret(CONNECTIONS).get("stringData", {}), **secret(CONNECTIONS).get("data", {})}


def config_values() -> dict[str, str]:
    """Every CAIRN_* value the pods get: the ConfigMap's data and the connections Secret's."""
    return {**one("ConfigMap").get("data", {}), **connections()}


def test_every_manifest_passes_the_kubernetes_schemas() -> None:
    problems = []
    for path in manifest_files():
        for doc in documents(path):
            for version in KUBERNETES_VERSIONS:
                try:
                    kubernetes_validate.validate(doc, version, strict=True)
                except kubernetes_validate.ValidationError as error:
                    where = "/".join(str(p) for p in error.path) or "(top)"
                    problems.append(
                        f"{path.name} {doc.get('kind')}/{doc.get('metadata', {}).get('name')} "
                        f"(Kubernetes {version}) at {where}: {error.message}"
                    )
                except kubernetes_validate.SchemaNotFoundError as error:
                    problems.append(f"{path.name}: {error}")
    assert not problems, "\n".join(problems)


def test_the_kustomization_lists_every_manifest_and_nothing_else() -> None:
    listed = kustomization()["resources"]
    missing = [name for name in listed if not (K8S / name).is_file()]
    unlisted = [p.name for p in manifest_files() if p.name not in listed]
    assert not missing, f"kustomization.yaml lists files that do not exist: {missing}"
    assert not unlisted, f"manifests not in kustomization.yaml (kubectl apply -k skips them): {unlisted}"
    assert len(listed) == len(set(listed)), f"listed twice: {listed}"


def _kustomize() -> list[str]:
    """kustomize, or kubectl's built-in copy (this machine image has kubectl): a missing one skips
    the build outside CI and fails it in CI (tests/deploy/tools.py)."""
    if shutil.which("kustomize"):
        return ["kustomize", "build"]
    return [require_tool("kubectl", "install kubectl or kustomize"), "kustomize"]


def test_kustomize_builds_the_same_objects_with_the_one_image() -> None:
    command = _kustomize()
    built = subprocess.run([*command, str(K8S)], capture_output=True, text=True, timeout=120)
    assert built.returncode == 0, f"{' '.join(command)} failed:\n{built.stderr}"
    objects = [doc for doc in yaml.safe_load_all(built.stdout) if doc]

    def key(doc: dict[str, Any]) -> tuple[str, str]:
        return doc["kind"], doc["metadata"]["name"]

    assert sorted(map(key, objects)) == sorted(map(key, resources()))
    namespaced = [doc for doc in objects if doc["kind"] != "Namespace"]
    assert {doc["metadata"].get("namespace") for doc in namespaced} == {"cairn"}
    image = kustomization()["images"][0]
    expected = f"{image.get('newName', image['name'])}:{image['newTag']}"
    images = {
        c["image"]
        for doc in objects
        if doc["kind"] == "Deployment"
        for c in doc["spec"]["template"]["spec"]["containers"]
    }
    assert images == {expected}


def test_one_image_set_in_one_place() -> None:
    entries = kustomization().get("images", [])
    assert len(entries) == 1, "one `images:` entry in kustomization.yaml sets every service's image"
    entry = entries[0]
    for where, container in containers():
        name, _, tag = container["image"].rpartition(":")
        assert name == entry["name"], f"{where}: image {container['image']} is not {entry['name']}"
        # The manifests name the same release, so `kubectl apply -f` on one file agrees with -k.
        assert tag == entry["newTag"], f"{where}: tag {tag} differs from kustomization's {entry['newTag']}"


def test_a_deployment_for_exactly_each_service() -> None:
    running = set(deployments())
    assert not set(SERVICES) - running, f"no Deployment runs {sorted(set(SERVICES) - running)}"
    assert not running - set(SERVICES), f"not services `cairn run` knows: {sorted(running - set(SERVICES))}"
    for service, deployment in deployments().items():
        assert deployment["metadata"]["name"] == f"cairn-{service}"


def test_namespace_and_everything_in_it() -> None:
    assert one("Namespace")["metadata"]["name"] == "cairn"
    assert kustomization()["namespace"] == "cairn"
    for doc in resources():
        if doc["kind"] != "Namespace":
            assert doc["metadata"].get("namespace") == "cairn", f"{doc['kind']}/{doc['metadata']['name']}"


def test_every_setting_passed_is_one_cairn_reads() -> None:
    passed = dict(config_values())
    for _where, container in containers():
        for variable in container.get("env", []):
            passed[variable["name"]] = variable.get("value", "")
    unknown = sorted(set(passed) - SETTINGS_ENV)
    assert not unknown, f"not CairnSettings fields (shared/config.py), so ignored: {unknown}"


def test_the_settings_parse(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in SETTINGS_ENV:
        monkeypatch.delenv(variable, raising=False)
    for variable, value in config_values().items():
        monkeypatch.setenv(variable, value)
    settings = CairnSettings()  # raises on a value of the wrong type
    assert settings.api_host not in ("127.0.0.1", "localhost", "::1"), "the api must listen on the pod IP"


def test_connection_strings_are_in_the_secret_only() -> None:
    assert "CAIRN_MONGO_URL" in connections()
    assert "CAIRN_KAFKA_BOOTSTRAP" in connections()
    assert not {"CAIRN_MONGO_URL", "CAIRN_KAFKA_BOOTSTRAP"} & set(one("ConfigMap").get("data", {}))


def test_every_container_reads_the_configmap_and_the_secret() -> None:
    configmap = one("ConfigMap")["metadata"]["name"]
    for where, container in containers():
        sources = container.get("envFrom", [])
        assert {"configMapRef": {"name": configmap}} in sources, f"{where}: envFrom {configmap}"
        assert {"secretRef": {"name": CONNECTIONS}} in sources, f"{where}: envFrom {CONNECTIONS}"


def _commented_kafka_security() -> dict[str, str]:
    """The Kafka TLS/SASL example secret.yaml carries as comments, uncommented."""
    lines = [
        line.replace("# ", "", 1)
        for line in (K8S / "secret.yaml").read_text().splitlines()
        if line.strip().startswith("# CAIRN_KAFKA_")
    ]
    return yaml.safe_load("\n".join(lines)) or {}


def test_the_kafka_tls_example_in_the_secret_works_as_written(monkeypatch: pytest.MonkeyPatch) -> None:
    """Uncommenting the example must give valid settings whose CA file is where every pod mounts
    the cairn-kafka-ca Secret: the one edit a secured cluster needs."""
    example = _commented_kafka_security()
    assert example.get("CAIRN_KAFKA_SECURITY_PROTOCOL") == "SASL_SSL", example
    for variable in SETTINGS_ENV:
        monkeypatch.delenv(variable, raising=False)
    for variable, value in {**config_values(), **example}.items():
        monkeypatch.setenv(variable, value)
    settings = CairnSettings()  # raises on an incomplete or contradictory combination
    assert settings.kafka_ssl_cafile is not None
    ca_dir, ca_key = settings.kafka_ssl_cafile.rsplit("/", 1)
    secret(KAFKA_CA)  # the Secret exists, to be filled in
    for service, deployment in deployments().items():
        pod = deployment["spec"]["template"]["spec"]
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        [container] = pod["containers"]
        mounted = {m["mountPath"]: m["name"] for m in container.get("volumeMounts", [])}
        assert ca_dir in mounted, f"{service} does not mount {ca_dir}"
        source = volumes[mounted[ca_dir]].get("secret", {})
        assert source.get("secretName") == KAFKA_CA, f"{service}: {ca_dir} is not the {KAFKA_CA} Secret"
        assert source.get("optional") is True, f"{service}: pods must start without a private CA"
    assert ca_key == "ca.crt"


def test_replicated_services() -> None:
    for service, least in REPLICATED.items():
        replicas = deployments()[service]["spec"].get("replicas", 1)
        assert replicas >= least, f"{service}: replicas {replicas}, want at least {least}"


def test_probes_and_resources_on_every_container() -> None:
    for where, container in containers():
        for probe in ("readinessProbe", "livenessProbe"):
            assert probe in container, f"{where}: no {probe}"
        resources = container.get("resources", {})
        for bound in ("requests", "limits"):
            for resource in ("cpu", "memory"):
                assert resource in resources.get(bound, {}), f"{where}: no resources.{bound}.{resource}"


def test_probes_check_the_service_itself() -> None:
    settings_port = int(config_values()["CAIRN_API_PORT"])
    for service, deployment in deployments().items():
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        for kind in ("readinessProbe", "livenessProbe"):
            probe = container[kind]
            if service == "api":
                ports = {p["name"]: p["containerPort"] for p in container["ports"]}
                assert probe["httpGet"]["path"] == "/health", f"api {kind}"
                port = probe["httpGet"]["port"]
                assert ports.get(port, port) == settings_port, f"api {kind} port {port} != CAIRN_API_PORT"
            else:
                assert probe["exec"]["command"] == ["python", "-m", "services.probe", service], (
                    f"{service} {kind}"
                )


def test_pods_get_time_to_drain() -> None:
    """SIGTERM lets a service finish what it holds; a MongoDB call in flight may take up to
    CAIRN_MONGO_TIMEOUT_MS, plus the api's preStop pause."""
    mongo_timeout_s = int(config_values()["CAIRN_MONGO_TIMEOUT_MS"]) / 1000
    for service, deployment in deployments().items():
        pod = deployment["spec"]["template"]["spec"]
        pause = (
            pod["containers"][0].get("lifecycle", {}).get("preStop", {}).get("sleep", {}).get("seconds", 0)
        )
        grace = pod.get("terminationGracePeriodSeconds", 30)
        assert grace > mongo_timeout_s + pause, f"{service}: terminationGracePeriodSeconds {grace}"


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def test_disruption_budgets_cover_the_replicated_services() -> None:
    budgets = of_kind("PodDisruptionBudget")
    for service in PDB_REQUIRED:
        labels = deployments()[service]["spec"]["template"]["metadata"]["labels"]
        covering = [b for b in budgets if _selects(b["spec"]["selector"]["matchLabels"], labels)]
        assert len(covering) == 1, f"{service}: {len(covering)} PodDisruptionBudgets select its pods"


def test_the_api_is_reachable_through_service_and_ingress() -> None:
    api = deployments()["api"]
    labels = api["spec"]["template"]["metadata"]["labels"]
    port_names = {p["name"] for p in api["spec"]["template"]["spec"]["containers"][0]["ports"]}
    service = one("Service")
    assert _selects(service["spec"]["selector"], labels), "the Service does not select the api pods"
    service_ports = {p["name"]: p for p in service["spec"]["ports"]}
    for port in service_ports.values():
        assert port["targetPort"] in port_names, f"Service targetPort {port['targetPort']}"
    for rule in one("Ingress")["spec"]["rules"]:
        for path in rule["http"]["paths"]:
            backend = path["backend"]["service"]
            assert backend["name"] == service["metadata"]["name"]
            assert backend["port"].get("name") in service_ports or backend["port"].get("number") in {
                p["port"] for p in service_ports.values()
            }


def test_deployment_selectors_match_their_pods() -> None:
    for service, deployment in deployments().items():
        selector = deployment["spec"]["selector"]["matchLabels"]
        assert _selects(selector, deployment["spec"]["template"]["metadata"]["labels"]), service


API_KEYS = "cairn-api-keys"  # the Secret the api pods mount their keys file from


def test_the_api_reads_its_keys_from_a_secret_that_holds_none_until_edited() -> None:
    """CAIRN_AUTH_KEYS_FILE names a file of the cairn-api-keys Secret's volume (a directory
    mount, so edits reach running pods; not optional, so no keys means no api). As shipped the
    Secret holds no key: applied unedited, the api refuses to start rather than run open or
    with a published secret. Nothing sets CAIRN_INSECURE."""
    api = deployments()["api"]
    pod = api["spec"]["template"]["spec"]
    [container] = pod["containers"]
    env = {variable["name"]: variable.get("value") for variable in container.get("env", [])}
    keys_file = env.get("CAIRN_AUTH_KEYS_FILE") or config_values().get("CAIRN_AUTH_KEYS_FILE")
    assert keys_file, "the api has no CAIRN_AUTH_KEYS_FILE"
    directory, key = keys_file.rsplit("/", 1)
    mounts = {m["mountPath"]: m for m in container.get("volumeMounts", [])}
    assert directory in mounts and "subPath" not in mounts[directory], f"mount {directory} (no subPath)"
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    source = volumes[mounts[directory]["name"]]["secret"]
    assert source["secretName"] == API_KEYS and not source.get("optional", False), source
    data = {**secret(API_KEYS).get("stringData", {}), **secret(API_KEYS).get("data", {})}
    assert key in data, f"the {API_KEYS} Secret has no {key}"
    with pytest.raises(KeysFileError, match="no keys"):
        parse_keys_text(data[key])
    mode = source.get("defaultMode", 0o644)
    group = pod.get("securityContext", {}).get("fsGroup")
    assert mode & 0o004 or (group is not None and mode & 0o040), "the api's user cannot read its keys"
    assert "CAIRN_INSECURE" not in config_values()
    for where, other in containers():
        assert "CAIRN_INSECURE" not in {v["name"] for v in other.get("env", [])}, where
