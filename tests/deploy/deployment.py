"""docker-compose.yml and deploy/k8s read as what a container runtime would run, and run here as
local processes: the image (deploy/Dockerfile: its venv, ENV, ENTRYPOINT, HEALTHCHECK,
STOPSIGNAL), each service's command and environment, its probes and its stop budget.

Only what names the outside world is remapped (`localize`): the Kafka and MongoDB servers (and
with them Kafka's security settings, the MongoDB replica set and the topics' replication factor:
the test servers are one plain node each), the OTLP collector (a local sink), the api's address
and port, the topic prefix and database (unique per test), and the image's paths (its venv, its
/tmp). Everything else is passed as written, so a wrong command, setting, probe or port in the
files fails the run.
"""

from __future__ import annotations

import base64
import json
import os
import posixpath
import re
import shlex
import shutil
import signal
import subprocess
import sys
import sysconfig
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import httpx
import yaml
from pydantic import ValidationError

from cairn.auth import ApiKey, ApiKeyAuth
from services.api.auth import is_loopback
from shared.config import CairnSettings
from tests.devserver import free_port
from tests.e2e.cluster import _die_with_parent

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
COMPOSE = ROOT / "docker-compose.yml"
K8S = ROOT / "deploy" / "k8s"
# The PATH of the base image (python:3.11-slim) that the Dockerfile's `$PATH` extends.
BASE_IMAGE_ENV = {"PATH": "/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin"}
# However long a deployment allows a probe to first pass, on this machine a working service is
# healthy within seconds: waiting longer only delays the report of a broken one.
PROBE_WAIT_CAP_S = 60.0
PROBE_RETRY_S = 1.0


# ------------------------------------------------------------------------------ Dockerfile ---


@dataclass
class Instruction:
    keyword: str
    value: str


def _instructions(text: str) -> list[Instruction]:
    """The Dockerfile's instructions, continuation lines joined and comments dropped."""
    found: list[Instruction] = []
    current = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        current += line
        keyword, _, value = current.partition(" ")
        found.append(Instruction(keyword.upper(), value.strip()))
        current = ""
    return found


def _exec_form(value: str) -> list[str]:
    """ENTRYPOINT/CMD/HEALTHCHECK CMD: a JSON array runs as is, a string through /bin/sh -c."""
    if value.startswith("["):
        argv = json.loads(value)
        assert isinstance(argv, list) and all(isinstance(a, str) for a in argv), value
        return argv
    return ["/bin/sh", "-c", value]


_VARIABLE = re.compile(r"\$(?:\{(\w+)\}|(\w+))")


def _expand(value: str, env: dict[str, str]) -> str:
    """`$VAR` / `${VAR}` in an ENV value, from the ENV set so far (Docker's substitution)."""
    return _VARIABLE.sub(lambda m: env.get(m.group(1) or m.group(2), ""), value)


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|us|s|m|h)")
_UNIT_S = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def duration_s(text: str | int | float) -> float:
    """A Docker/Compose duration (`30s`, `1m30s`, `500ms`) in seconds."""
    if isinstance(text, int | float):
        return float(text)
    parts = _DURATION.findall(text)
    assert parts and "".join(n + u for n, u in parts) == text, f"not a duration: {text!r}"
    return sum(float(number) * _UNIT_S[unit] for number, unit in parts)


@dataclass
class Healthcheck:
    argv: list[str]
    interval_s: float = 30.0
    timeout_s: float = 30.0
    start_period_s: float = 0.0
    retries: int = 3

    @property
    def budget_s(self) -> float:
        """How long the runtime lets a starting container become healthy."""
        return self.start_period_s + self.interval_s * self.retries


def _healthcheck(value: str) -> Healthcheck | None:
    """HEALTHCHECK [--options] CMD ... (None for HEALTHCHECK NONE), with Docker's defaults."""
    words = value.split(" ", 1)
    options: dict[str, str] = {}
    while words[0].startswith("--"):
        name, _, setting = words[0][2:].partition("=")
        options[name] = setting
        words = words[1].split(" ", 1)
    if words[0].upper() == "NONE":
        return None
    assert words[0].upper() == "CMD", f"HEALTHCHECK {value!r}"
    check = Healthcheck(_exec_form(words[1].strip()))
    check.interval_s = duration_s(options.get("interval", "30s"))
    check.timeout_s = duration_s(options.get("timeout", "30s"))
    check.start_period_s = duration_s(options.get("start-period", "0s"))
    check.retries = int(options.get("retries", "3"))
    return check


def _copy_arguments(value: str) -> tuple[dict[str, str], list[str]]:
    """COPY's --flags and its paths (the last one is the destination)."""
    words = json.loads(value) if value.startswith("[") else shlex.split(value)
    flags = {}
    while words and words[0].startswith("--"):
        name, _, setting = words.pop(0)[2:].partition("=")
        flags[name] = setting
    return flags, words


@dataclass
class Image:
    """What deploy/Dockerfile's final stage gives a container, and how its venv is built."""

    entrypoint: list[str]
    cmd: list[str]
    env: dict[str, str]
    workdir: str
    healthcheck: Healthcheck | None
    stop_signal: signal.Signals
    venv: str
    """Where the image holds the venv it copies from the builder stage (/opt/venv)."""
    builder_workdir: str
    builder_copies: list[tuple[list[str], str]]
    """The builder stage's COPY instructions from the build context: (sources, destination)."""

    def env_with_venv(self, venv: Path) -> dict[str, str]:
        """The image's ENV with its venv path pointing at a local venv."""
        return {key: value.replace(self.venv, str(venv)) for key, value in self.env.items()}


def read_image(path: Path = DOCKERFILE) -> Image:
    stages: list[tuple[str, list[Instruction]]] = []
    for instruction in _instructions(path.read_text()):
        if instruction.keyword == "FROM":
            words = instruction.value.split()
            name = words[2] if len(words) > 2 and words[1].upper() == "AS" else str(len(stages))
            stages.append((name, []))
        elif stages:
            stages[-1][1].append(instruction)
    assert stages, f"{path} has no FROM"
    final = stages[-1][1]
    env = dict(BASE_IMAGE_ENV)
    entrypoint: list[str] = []
    cmd: list[str] = []
    workdir = "/"
    healthcheck: Healthcheck | None = None
    stop_signal = signal.SIGTERM
    venv_copies: list[tuple[str, str, str]] = []
    for instruction in final:
        match instruction.keyword:
            case "ENV":
                words = shlex.split(instruction.value)
                if "=" not in words[0]:  # legacy `ENV KEY value`
                    words = [f"{words[0]}={' '.join(words[1:])}"]
                for word in words:
                    key, _, value = word.partition("=")
                    env[key] = _expand(value, env)
            case "ENTRYPOINT":
                entrypoint = _exec_form(instruction.value)
                cmd = []  # Docker: a later ENTRYPOINT resets CMD
            case "CMD":
                cmd = _exec_form(instruction.value)
            case "WORKDIR":
                workdir = posixpath.join(workdir, instruction.value)
            case "HEALTHCHECK":
                healthcheck = _healthcheck(instruction.value)
            case "STOPSIGNAL":
                value = instruction.value
                stop_signal = signal.Signals(int(value)) if value.isdigit() else signal.Signals[value]
            case "COPY":
                flags, paths = _copy_arguments(instruction.value)
                if "from" in flags:
                    venv_copies.append((flags["from"], paths[0], paths[-1]))
    assert len(venv_copies) == 1, f"expected one COPY --from (the venv) in the final stage: {venv_copies}"
    builder_name, _, venv = venv_copies[0]
    builder = next((steps for name, steps in stages if name == builder_name), None)
    assert builder is not None, f"COPY --from={builder_name}: no such stage"
    builder_workdir = "/"
    copies: list[tuple[list[str], str]] = []
    for instruction in builder:
        if instruction.keyword == "WORKDIR":
            builder_workdir = posixpath.join(builder_workdir, instruction.value)
        elif instruction.keyword == "COPY":
            flags, paths = _copy_arguments(instruction.value)
            assert "from" not in flags, (
                f"builder COPY {instruction.value}: only the build context is supported"
            )
            destination = posixpath.join(builder_workdir, paths[-1])
            copies.append((paths[:-1], destination + ("/" if paths[-1].endswith("/") else "")))
    return Image(
        entrypoint=entrypoint,
        cmd=cmd,
        env=env,
        workdir=workdir,
        healthcheck=healthcheck,
        stop_signal=stop_signal,
        venv=venv,
        builder_workdir=builder_workdir,
        builder_copies=copies,
    )


# ------------------------------------------------------------------ build context, venv ---


def _ignore_regex(pattern: str) -> re.Pattern[str]:
    """A .dockerignore pattern: `*` and `?` stay within a path segment, `**` spans segments."""
    out = ""
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        else:
            char = pattern[i]
            out += {"*": "[^/]*", "?": "[^/]"}.get(char, re.escape(char))
            i += 1
    return re.compile(out)


def dockerignore(root: Path = ROOT) -> Callable[[str], bool]:
    """Whether .dockerignore keeps a path (relative, POSIX) out of the build context: the last
    pattern matching it or one of its parent directories decides, `!` re-includes."""
    rules: list[tuple[bool, re.Pattern[str]]] = []
    path = root / ".dockerignore"
    for raw in path.read_text().splitlines() if path.exists() else []:
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pattern = posixpath.normpath(line.removeprefix("!").strip()).lstrip("/")
        rules.append((negate, _ignore_regex(pattern)))

    def excluded(relative: str) -> bool:
        parts = relative.split("/")
        candidates = ["/".join(parts[: n + 1]) for n in range(len(parts))]
        result = False
        for negate, regex in rules:
            if any(regex.fullmatch(candidate) for candidate in candidates):
                result = not negate
        return result

    return excluded


def copy_build_context(image: Image, filesystem: Path, root: Path = ROOT) -> Path:
    """Do the builder stage's COPY steps from the build context (minus .dockerignore) into
    `filesystem` (standing for the builder's /); the directory the install runs in."""
    excluded = dockerignore(root)
    for sources, destination in image.builder_copies:
        into_directory = destination.endswith("/") or len(sources) > 1
        target = filesystem / destination.lstrip("/")
        for source in sources:
            relative = posixpath.normpath(source)
            path = root / relative
            assert path.exists() and not excluded(relative), (
                f"Dockerfile COPY {source}: not in the build context (missing, or excluded by .dockerignore)"
            )
            if path.is_file():
                copied = target / path.name if into_directory else target
                copied.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, copied)
                continue
            for file in sorted(p for p in path.rglob("*") if p.is_file()):
                inside = file.relative_to(root).as_posix()
                if not excluded(inside):
                    copied = target / file.relative_to(path)
                    copied.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(file, copied)
    return filesystem / image.builder_workdir.lstrip("/")


def site_packages(venv: Path) -> Path:
    """Where a venv of this interpreter's version installs pure-Python distributions."""
    return Path(sysconfig.get_path("purelib", vars={"base": str(venv), "platbase": str(venv)}))


NETWORK_TROUBLE = ("No matching distribution", "NewConnectionError", "Could not fetch", "Temporary failure")


def build_venv(image: Image, work: Path, unavailable: Callable[[str], None]) -> Path:
    """The image's venv, locally: the project built (pip, as the Dockerfile) from a copy of the
    build context and installed, not editable, into a fresh venv. Dependencies come from this
    interpreter's site-packages (a .pth line: a path only, so the checkout's editable-install
    hook there is not run) instead of from the network."""
    project = copy_build_context(image, work / "fs")
    wheels = work / "wheels"
    pip = [sys.executable, "-m", "pip"]
    build = _run([*pip, "wheel", "--no-deps", "--quiet", "--wheel-dir", str(wheels), str(project)], work)
    if build.returncode != 0:
        output = build.stdout + build.stderr
        if any(sign in output for sign in NETWORK_TROUBLE):
            unavailable(f"pip could not fetch the build backend (network?):\n{output[-3000:]}")
        raise AssertionError(f"building the project as the Dockerfile does failed:\n{output[-3000:]}")
    venv = work / "venv"
    python = str(venv / "bin" / "python")
    for argv, what in (
        ([sys.executable, "-m", "venv", "--without-pip", str(venv)], "python -m venv"),
        (
            [*pip, "--python", python, "install", "--no-deps", "--no-index", "--ignore-installed", "--quiet"]
            + [str(wheel) for wheel in wheels.glob("*.whl")],
            "pip install of the wheel",
        ),
    ):
        result = _run(argv, work)
        assert result.returncode == 0, f"{what} failed:\n{result.stdout}{result.stderr}"
    here = Path(sysconfig.get_path("purelib"))
    (site_packages(venv) / "_cairn_test_dependencies.pth").write_text(f"{here}\n")
    return venv


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """A build step away from the checkout: not in it, and without this process's PYTHONPATH
    (either could show pip the checkout's metadata as an installed cairn)."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


# -------------------------------------------------------------- what a container would run ---


@dataclass
class Probe:
    """A health check as its runtime runs it: a command in the container, or GET on a port."""

    label: str
    timeout_s: float
    budget_s: float
    argv: list[str] | None = None
    http_path: str | None = None
    http_port: int | None = None
    """The container port the GET goes to."""


@dataclass
class ContainerSpec:
    name: str
    argv: list[str]
    env: dict[str, str]
    """The image's ENV (venv path local), then what the deployment sets, as written."""
    probes: list[Probe]
    stop_signal: signal.Signals
    grace_s: float
    """From the stop signal to SIGKILL: what a clean stop must fit in."""
    ports: list[int] = field(default_factory=list)
    """Container ports the deployment routes traffic or probes to."""
    pre_stop_s: float = 0.0
    """A preStop sleep: it runs inside the grace period, before the stop signal."""
    replicas: int = 1
    """How many containers of it run (compose's `scale`, a Deployment's `spec.replicas`)."""
    secret_files: frozenset[str] = frozenset()
    """Paths inside the container that secrets are mounted at (compose `secrets`, Kubernetes
    secret volumes): where a setting naming a file (CAIRN_AUTH_KEYS_FILE) must point."""
    secret_mounts: dict[str, dict[str, str]] = field(default_factory=dict)
    """Kubernetes secret volumes: mount path -> the Secret's files (name -> content), which
    `localize` writes out for the settings that name them (CAIRN_AI_INTEGRATIONS_FILE, ...)."""

    def replica_names(self) -> list[str]:
        """Its containers' names: `decider-1`, `decider-2`, ... (as compose numbers them)."""
        return [f"{self.name}-{number}" for number in range(1, self.replicas + 1)]


def _words(value: str | list[str] | None) -> list[str] | None:
    """A compose command/entrypoint: a list as is, a string split as a shell would."""
    if value is None:
        return None
    return shlex.split(value) if isinstance(value, str) else [str(v) for v in value]


def _env_value(value: Any) -> str:
    """Compose's rendering of a YAML scalar as an environment value (`true`, `8`)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def _compose_environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):  # KEY=VALUE form
        env = dict(item.split("=", 1) if "=" in item else (item, None) for item in env)
    assert not service.get("env_file"), "env_file is not read by this test: put the settings in `environment`"
    return {key: _env_value(value) for key, value in env.items() if value is not None}


def _compose_port(entry: str | int | dict[str, Any]) -> int:
    """The container side of a `ports` entry (`8080:8080`, `127.0.0.1:80:8080/tcp`, long form)."""
    if isinstance(entry, dict):
        return int(entry["target"])
    return int(str(entry).rsplit(":", 1)[-1].split("/")[0])


def _compose_published(entry: str | int | dict[str, Any]) -> str | None:
    """The host port a `ports` entry publishes, if it names one (else Docker picks one)."""
    if isinstance(entry, dict):
        published = entry.get("published")
        return None if published is None else str(published)
    parts = str(entry).split("/")[0].split(":")
    return parts[-2] if len(parts) > 1 and parts[-2] else None


# Keys whose sequences `docker compose -f a -f b` concatenates or merges by item rather than
# replaces; an override setting one is not modelled by `compose_merge`.
COMPOSE_MERGED_SEQUENCES = frozenset(
    {
        "ports",
        "expose",
        "volumes",
        "secrets",
        "configs",
        "dns",
        "dns_search",
        "tmpfs",
        "extra_hosts",
        "cap_add",
        "cap_drop",
        "devices",
        "env_file",
        "labels",
        "environment",
        "depends_on",
        "networks",
    }
)


def compose_merge(base: Any, override: Any, key: str = "") -> Any:
    """`override` over `base` as `docker compose -f base -f override` merges them: mappings
    merge key by key, a scalar or a command-like sequence replaces."""
    if isinstance(base, dict) and isinstance(override, dict):
        merged = dict(base)
        for name, value in override.items():
            merged[name] = compose_merge(base[name], value, name) if name in base else value
        return merged
    assert not (isinstance(override, list) and key in COMPOSE_MERGED_SEQUENCES), (
        f"an override's `{key}` list merges with the base's by compose's own rules, not modelled here"
    )
    return override


def _compose_scale(name: str, service: dict[str, Any]) -> int:
    """How many containers `docker compose up` runs: `scale`, else `deploy.replicas`, else 1."""
    scale = service.get("scale", (service.get("deploy") or {}).get("replicas", 1))
    replicas = int(scale)
    assert replicas >= 1, f"{name}: scale {scale} runs no container"
    published = [
        port for port in map(_compose_published, service.get("ports") or []) if port and "-" not in port
    ]
    assert replicas == 1 or not published, (
        f"{name}: {replicas} replicas cannot all publish host port(s) {published}"
    )
    return replicas


def _compose_healthcheck(service: dict[str, Any], image: Image) -> Healthcheck | None:
    override = service.get("healthcheck")
    if override is None:
        return image.healthcheck
    if override.get("disable"):
        return None
    base = image.healthcheck or Healthcheck([])
    test = override.get("test")
    if test is None:
        argv = base.argv
    elif isinstance(test, str):
        argv = ["/bin/sh", "-c", test]
    elif test[0] == "NONE":
        return None
    elif test[0] == "CMD-SHELL":
        argv = ["/bin/sh", "-c", test[1]]
    else:
        assert test[0] == "CMD", f"healthcheck test {test}"
        argv = [str(word) for word in test[1:]]
    return Healthcheck(
        argv,
        duration_s(override.get("interval", base.interval_s)),
        duration_s(override.get("timeout", base.timeout_s)),
        duration_s(override.get("start_period", base.start_period_s)),
        int(override.get("retries", base.retries)),
    )


def _compose_secret_files(name: str, service: dict[str, Any], compose: dict[str, Any]) -> frozenset[str]:
    """Where compose mounts a service's secrets: /run/secrets/<target>, the target defaulting
    to the secret's name."""
    declared = compose.get("secrets") or {}
    files = set()
    for entry in service.get("secrets") or []:
        source = entry if isinstance(entry, str) else entry["source"]
        assert source in declared, f"{name}: secret {source!r} is not declared under `secrets:`"
        target = source if isinstance(entry, str) else entry.get("target", source)
        files.add(target if target.startswith("/") else f"/run/secrets/{target}")
    return frozenset(files)


def compose_services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The services built from deploy/Dockerfile: Cairn's own (as tests/deploy/test_compose.py)."""
    return {
        name: service
        for name, service in compose["services"].items()
        if isinstance(service.get("build"), dict)
        and service["build"].get("dockerfile") == "deploy/Dockerfile"
    }


def compose_containers(compose: dict[str, Any], image: Image, venv: Path) -> list[ContainerSpec]:
    """What `docker compose up` runs for each Cairn service."""
    specs = []
    for name, service in compose_services(compose).items():
        entrypoint = _words(service.get("entrypoint")) or image.entrypoint
        command = _words(service.get("command"))
        if command is None and service.get("entrypoint") is None:
            command = image.cmd
        check = _compose_healthcheck(service, image)
        probes = (
            [Probe("compose healthcheck", check.timeout_s, check.budget_s, argv=check.argv)] if check else []
        )
        stop = service.get("stop_signal")
        specs.append(
            ContainerSpec(
                name=name,
                argv=[*entrypoint, *(command or [])],
                env={**image.env_with_venv(venv), **_compose_environment(service)},
                probes=probes,
                stop_signal=signal.Signals[stop] if stop else image.stop_signal,
                grace_s=duration_s(service.get("stop_grace_period", "10s")),
                ports=[_compose_port(entry) for entry in service.get("ports") or []],
                replicas=_compose_scale(name, service),
                secret_files=_compose_secret_files(name, service, compose),
            )
        )
    return specs


def k8s_resources(directory: Path = K8S) -> list[dict[str, Any]]:
    """The objects `kubectl apply -k` would send: the kustomization's listed files' documents."""
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    return [
        document
        for name in kustomization["resources"]
        for document in yaml.safe_load_all((directory / name).read_text())
        if document is not None
    ]


def _named(resources: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [r for r in resources if r["kind"] == kind and r["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind} {name}: {len(found)} in the kustomization's resources"
    return found[0]


def _config_data(resources: list[dict[str, Any]], kind: str, name: str) -> dict[str, str]:
    """A ConfigMap's data, or a Secret's data (base64) and stringData, as envFrom reads them."""
    resource = _named(resources, kind, name)
    data = {key: str(value) for key, value in (resource.get("data") or {}).items()}
    if kind == "Secret":
        data = {key: base64.b64decode(value).decode() for key, value in data.items()}
        data.update({key: str(value) for key, value in (resource.get("stringData") or {}).items()})
    return data


POD_NAME = "{pod-name}"
"""Stands for the downward API's metadata.name until `localize` gives each replica its own."""
CONTAINER_HOST = "{hostname}"
"""Cairn's placeholder for the container's host name (CAIRN_INSTANCE_ID in compose): every
container has its own, while the processes here share this machine's, so `localize` puts in
the replica's name as docker would put in the container's."""


def _k8s_env(container: dict[str, Any], resources: list[dict[str, Any]]) -> dict[str, str]:
    """envFrom in order, then env (which wins), as the kubelet builds a container's environment."""
    env: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        if "configMapRef" in source:
            data = _config_data(resources, "ConfigMap", source["configMapRef"]["name"])
        else:
            data = _config_data(resources, "Secret", source["secretRef"]["name"])
        env.update({source.get("prefix", "") + key: value for key, value in data.items()})
    for variable in container.get("env") or []:
        if "value" in variable:
            env[variable["name"]] = str(variable["value"])
            continue
        reference = variable["valueFrom"]
        if "configMapKeyRef" in reference:
            ref = reference["configMapKeyRef"]
            env[variable["name"]] = _config_data(resources, "ConfigMap", ref["name"])[ref["key"]]
        elif "fieldRef" in reference:
            path = reference["fieldRef"]["fieldPath"]
            assert path == "metadata.name", f"{variable['name']}: only the pod name is run here, not {path}"
            env[variable["name"]] = POD_NAME  # each replica's own, filled in by `localize`
        else:
            ref = reference["secretKeyRef"]
            env[variable["name"]] = _config_data(resources, "Secret", ref["name"])[ref["key"]]
    return env


def _k8s_probe(label: str, probe: dict[str, Any], ports: dict[str, int]) -> Probe:
    """A probe with the kubelet's defaults; its budget is how long it may fail from the start."""
    timeout = float(probe.get("timeoutSeconds", 1))
    budget = float(probe.get("initialDelaySeconds", 0)) + float(probe.get("periodSeconds", 10)) * int(
        probe.get("failureThreshold", 3)
    )
    if "exec" in probe:
        return Probe(label, timeout, budget, argv=[str(word) for word in probe["exec"]["command"]])
    assert "httpGet" in probe, f"{label}: only exec and httpGet probes are run by this test: {probe}"
    get = probe["httpGet"]
    assert get.get("scheme", "HTTP") == "HTTP" and "host" not in get, f"{label}: {get}"
    port = get["port"]
    if isinstance(port, str) and not port.isdigit():
        assert port in ports, f"{label}: port {port!r} is not a named port of the container ({ports})"
        port = ports[port]
    return Probe(label, timeout, budget, http_path=get.get("path", "/"), http_port=int(port))


def _k8s_secret_files(
    pod: dict[str, Any], container: dict[str, Any], resources: list[dict[str, Any]]
) -> frozenset[str]:
    """The files a container sees from secret volumes: each key (or listed item) of the Secret
    under the mount's path."""
    volumes = {volume["name"]: volume for volume in pod.get("volumes") or []}
    files = set()
    for mount in container.get("volumeMounts") or []:
        secret = volumes.get(mount["name"], {}).get("secret")
        if secret is None:
            continue
        items = secret.get("items")
        if items:
            keys = [item["path"] for item in items]
        else:
            keys = list(_config_data(resources, "Secret", secret["secretName"]))
        if "subPath" in mount:
            files.add(mount["mountPath"])
        else:
            files.update(posixpath.join(mount["mountPath"], key) for key in keys)
    return frozenset(files)


def _k8s_secret_mounts(
    pod: dict[str, Any], container: dict[str, Any], resources: list[dict[str, Any]]
) -> dict[str, dict[str, str]]:
    """Each whole-Secret volume the container mounts: its path and the Secret's files."""
    volumes = {volume["name"]: volume for volume in pod.get("volumes") or []}
    mounts = {}
    for mount in container.get("volumeMounts") or []:
        secret = volumes.get(mount["name"], {}).get("secret")
        if secret is not None and "items" not in secret and "subPath" not in mount:
            mounts[mount["mountPath"]] = _config_data(resources, "Secret", secret["secretName"])
    return mounts


def k8s_containers(resources: list[dict[str, Any]], image: Image, venv: Path) -> list[ContainerSpec]:
    """What the kubelet runs for each Deployment's container, and how many pods of it."""
    specs = []
    for deployment in (r for r in resources if r["kind"] == "Deployment"):
        pod = deployment["spec"]["template"]["spec"]
        assert len(pod["containers"]) == 1, f"{deployment['metadata']['name']}: one container expected"
        container = pod["containers"][0]
        named_ports = {
            p["name"]: int(p["containerPort"]) for p in container.get("ports") or [] if "name" in p
        }
        if "command" in container:
            argv = [*container["command"], *(container.get("args") or [])]
        else:
            argv = [*image.entrypoint, *(container["args"] if "args" in container else image.cmd)]
        probes = [
            _k8s_probe(f"k8s {kind}", container[kind], named_ports)
            for kind in ("startupProbe", "readinessProbe", "livenessProbe")
            if kind in container
        ]
        pre_stop = ((container.get("lifecycle") or {}).get("preStop")) or {}
        assert set(pre_stop) <= {"sleep"}, f"preStop {pre_stop}: only `sleep` is modelled by this test"
        specs.append(
            ContainerSpec(
                name=container["name"],
                argv=[str(word) for word in argv],
                env={**image.env_with_venv(venv), **_k8s_env(container, resources)},
                probes=probes,
                stop_signal=image.stop_signal,
                grace_s=float(pod.get("terminationGracePeriodSeconds", 30)),
                ports=[int(p["containerPort"]) for p in container.get("ports") or []],
                pre_stop_s=float(pre_stop.get("sleep", {}).get("seconds", 0)),
                replicas=int(deployment["spec"].get("replicas", 1)),
                secret_files=_k8s_secret_files(pod, container, resources),
                secret_mounts=_k8s_secret_mounts(pod, container, resources),
            )
        )
    return specs


# ----------------------------------------------------------------- remapping to this host ---


def _default(variable: str) -> str:
    """What a service uses for a CAIRN_* variable the deployment does not set."""
    return str(CairnSettings.model_fields[variable.removeprefix("CAIRN_").lower()].default)


@dataclass
class Targets:
    """The servers this test runs against, instead of the deployment's."""

    kafka: str
    mongo_url: str
    unique: str
    otlp: str | None = None
    """A local OTLP/HTTP sink's base URL; None drops the deployment's endpoint."""
    api_keys_file: Path | None = None
    """The test's keys file, standing for the api keys the deployment mounts from a secret."""
    secrets_dir: Path | None = None
    """Where `localize` writes out the secret volumes that settings name."""


WILDCARD_HOSTS = ("0.0.0.0", "::", "")
KAFKA_CONNECTION = re.compile(r"CAIRN_KAFKA_(SECURITY_PROTOCOL|SASL_\w+|SSL_\w+)$")


def _hosts(address_list: str) -> list[str]:
    """The host names of `host:port,host:port`."""
    return [address.strip().rsplit(":", 1)[0] for address in address_list.split(",")]


def _one(specs: list[ContainerSpec], variable: str) -> str:
    """The one value every service has for `variable` (a server address)."""
    unset = sorted(spec.name for spec in specs if variable not in spec.env)
    assert not unset, (
        f"{variable} is not set for {unset}: inside a container the default ({_default(variable)}) "
        "is the container itself"
    )
    values = {spec.name: spec.env[variable] for spec in specs}
    assert len(set(values.values())) == 1, f"the services disagree on {variable}: {values}"
    return values[specs[0].name]


def _mongo_url(declared: str, target: str) -> str:
    """The test server's URL with the deployment's options, minus what names its servers (hosts,
    credentials) and the replica set (FerretDB has none)."""
    ours = urlsplit(target)
    options = dict(parse_qsl(ours.query))
    for key, value in parse_qsl(urlsplit(declared).query):
        if key.lower() != "replicaset":
            options.setdefault(key, value)
    return urlunsplit((ours.scheme, ours.netloc, ours.path or "/", urlencode(options), ""))


@dataclass
class LocalEnvironment:
    env: dict[str, str]
    ports: dict[int, int]
    """Container port -> the local port that stands for it."""


def localize(
    specs: list[ContainerSpec], targets: Targets, container_hosts: set[str] | None = None
) -> dict[str, LocalEnvironment]:
    """Each container's environment for this host, by replica name (`ContainerSpec.replica_names`):
    the replicas of a service differ only in the local ports standing for their container ports
    (each container has its own address). `container_hosts`: names the deployment's own
    containers answer to (compose services), which its addresses must use."""
    for spec in specs:
        declared = {
            key.removeprefix("CAIRN_").lower(): value
            for key, value in spec.env.items()
            if key.startswith("CAIRN_")
        }
        try:  # the declared values only: model_validate reads no environment
            CairnSettings.model_validate(declared)
        except ValidationError as error:
            raise AssertionError(f"{spec.name}: its CAIRN_* settings are invalid:\n{error}") from None

    def check_hosts(variable: str, hosts: Iterable[str]) -> None:
        if container_hosts is not None:
            unknown = sorted(set(hosts) - container_hosts)
            assert not unknown, f"{variable} names {unknown}, which no service of the deployment answers to"

    kafka = _one(specs, "CAIRN_KAFKA_BOOTSTRAP")
    check_hosts("CAIRN_KAFKA_BOOTSTRAP", _hosts(kafka))
    mongo = _one(specs, "CAIRN_MONGO_URL")
    check_hosts("CAIRN_MONGO_URL", _hosts(urlsplit(mongo).netloc.rsplit("@", 1)[-1]))
    mongo_url = _mongo_url(mongo, targets.mongo_url)
    prefixes: dict[str, str] = {}
    databases: dict[str, str] = {}
    local: dict[str, LocalEnvironment] = {}
    for spec in specs:
        env = {key: value for key, value in spec.env.items() if not KAFKA_CONNECTION.match(key)}
        env["CAIRN_KAFKA_BOOTSTRAP"] = targets.kafka
        env["CAIRN_MONGO_URL"] = mongo_url
        if int(env.get("CAIRN_KAFKA_REPLICATION_FACTOR", "1")) > 1:
            env["CAIRN_KAFKA_REPLICATION_FACTOR"] = "1"  # the test Kafka has one broker
        otlp = env.pop("CAIRN_OTLP_ENDPOINT", None)
        if otlp:
            check_hosts("CAIRN_OTLP_ENDPOINT", [urlsplit(otlp).hostname or ""])
            if targets.otlp:
                sink = urlsplit(targets.otlp)
                env["CAIRN_OTLP_ENDPOINT"] = urlunsplit(urlsplit(otlp)._replace(netloc=sink.netloc))
        prefix = env.get("CAIRN_TOPIC_PREFIX", _default("CAIRN_TOPIC_PREFIX"))
        env["CAIRN_TOPIC_PREFIX"] = prefixes.setdefault(prefix, f"dep{targets.unique}{len(prefixes)}.")
        database = env.get("CAIRN_MONGO_DB", _default("CAIRN_MONGO_DB"))
        env["CAIRN_MONGO_DB"] = databases.setdefault(database, f"cairn_dep_{targets.unique}_{len(databases)}")
        host = env.get("CAIRN_API_HOST", _default("CAIRN_API_HOST"))
        port = int(env.get("CAIRN_API_PORT", _default("CAIRN_API_PORT")))
        if spec.ports:
            assert host in WILDCARD_HOSTS, (
                f"{spec.name}: CAIRN_API_HOST={host} listens inside its container only; its ports "
                f"{spec.ports} would reach nothing"
            )
            assert port in spec.ports, (
                f"{spec.name}: the api listens on {port} (CAIRN_API_PORT) but the deployment routes "
                f"ports {spec.ports}"
            )
        _localize_keys_file(spec, env, host, targets)
        _localize_secret_mounts(spec, env, targets)
        if host in WILDCARD_HOSTS:
            env["CAIRN_API_HOST"] = "127.0.0.1"
        for replica in spec.replica_names():
            ports: dict[int, int] = {}
            replica_env = {
                key: value.replace(POD_NAME, replica).replace(CONTAINER_HOST, replica)
                for key, value in env.items()
            }
            if spec.ports:
                ports[port] = free_port()
                replica_env["CAIRN_API_PORT"] = str(ports[port])
            local[replica] = LocalEnvironment(replica_env, ports)
    return local


def _localize_keys_file(spec: ContainerSpec, env: dict[str, str], host: str, targets: Targets) -> None:
    """The api's keys file must be one of the container's secret files; here it is the test's.
    An api published without keys would refuse to start in its container (services/api/auth.py),
    even though here, moved to 127.0.0.1, it would not."""
    keys_file = env.get("CAIRN_AUTH_KEYS_FILE")
    if keys_file:
        assert keys_file in spec.secret_files, (
            f"{spec.name}: CAIRN_AUTH_KEYS_FILE={keys_file} is not a file its secrets are mounted at "
            f"({sorted(spec.secret_files) or 'none'})"
        )
        assert targets.api_keys_file is not None, f"{spec.name} reads API keys: give Targets a keys file"
        env["CAIRN_AUTH_KEYS_FILE"] = str(targets.api_keys_file)
    elif spec.ports:
        insecure = env.get("CAIRN_INSECURE", "").lower() in ("1", "true", "yes", "on")
        assert is_loopback(host) or insecure, (
            f"{spec.name}: the api listens on {host or '0.0.0.0'} without CAIRN_AUTH_KEYS_FILE: "
            "it would refuse to start"
        )


SECRET_PATH_SETTINGS = {
    "CAIRN_AI_INTEGRATIONS_FILE": "file",
    "CAIRN_SECRETS_FILE": "file",
    "CAIRN_SECRETS_DIR": "dir",
}
"""Settings that name a file or a directory of a secret volume (docs/agents.md)."""


def _localize_secret_mounts(spec: ContainerSpec, env: dict[str, str], targets: Targets) -> None:
    """A setting naming a file or a directory of a Kubernetes secret volume must name one the
    container has; here it names a copy of that volume's Secret, written out as the kubelet
    would write it."""
    for variable, kind in SECRET_PATH_SETTINGS.items():
        path = env.get(variable)
        if not path or not spec.secret_mounts:
            continue
        mount = posixpath.dirname(path) if kind == "file" else path
        assert mount in spec.secret_mounts, (
            f"{spec.name}: {variable}={path} is not in a secret volume it mounts "
            f"({sorted(spec.secret_mounts)})"
        )
        files = spec.secret_mounts[mount]
        assert kind == "dir" or posixpath.basename(path) in files, (
            f"{spec.name}: {variable}={path}: no such key"
        )
        assert targets.secrets_dir is not None, (
            f"{spec.name} reads a secret volume: give Targets a secrets_dir"
        )
        local = targets.secrets_dir / spec.name / mount.strip("/").replace("/", "_")
        local.mkdir(parents=True, exist_ok=True)
        for name, content in files.items():
            (local / name).write_text(content)
        env[variable] = str(local / posixpath.basename(path) if kind == "file" else local)


def local_databases(local: dict[str, LocalEnvironment]) -> set[str]:
    """The databases a localized deployment writes: dropped after the test."""
    return {environment.env["CAIRN_MONGO_DB"] for environment in local.values()}


# ------------------------------------------------------------------ running the containers ---


class LocalContainer:
    """One container (one replica of a service) as a local process: its own /tmp (TMPDIR, HOME,
    and the working directory as the image's WORKDIR /tmp), so `cairn health` sees only its own
    heartbeat, not another replica's."""

    def __init__(self, spec: ContainerSpec, local: LocalEnvironment, directory: Path, name: str) -> None:
        self.spec = spec
        self.name = name
        self.ports = local.ports
        self.tmp = directory / name / "tmp"
        self.tmp.mkdir(parents=True)
        self.log_path = directory / name / "output.log"
        self.env = {**local.env, "TMPDIR": str(self.tmp), "HOME": str(self.tmp)}
        self.popen: subprocess.Popen[bytes] | None = None

    def resolve(self, argv: list[str]) -> list[str]:
        """argv[0] looked up on the container's PATH, as the runtime's exec does."""
        if "/" in argv[0]:
            return argv
        found = shutil.which(argv[0], path=self.env.get("PATH", ""))
        assert found, f"{self.name}: {argv[0]!r} is not on the container's PATH ({self.env.get('PATH')})"
        return [found, *argv[1:]]

    def start(self) -> None:
        with self.log_path.open("ab") as log:
            self.popen = subprocess.Popen(
                self.resolve(self.spec.argv),
                env=self.env,
                cwd=self.tmp,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent,
            )

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def probe_once(self, probe: Probe) -> tuple[bool, str]:
        """Run the probe as its runtime would; (passed, what it said)."""
        if probe.argv is not None:
            try:
                result = subprocess.run(
                    self.resolve(probe.argv),
                    env=self.env,
                    cwd=self.tmp,
                    capture_output=True,
                    text=True,
                    timeout=probe.timeout_s,
                )
            except subprocess.TimeoutExpired:
                return False, f"timed out after {probe.timeout_s:.0f}s"
            return (
                result.returncode == 0,
                f"exit {result.returncode}: {(result.stdout + result.stderr).strip()}",
            )
        assert probe.http_port is not None
        if probe.http_port not in self.ports:
            return (
                False,
                f"port {probe.http_port}: the container listens on {sorted(self.ports) or 'no port'}",
            )
        url = f"http://127.0.0.1:{self.ports[probe.http_port]}{probe.http_path}"
        try:
            status = httpx.get(url, timeout=probe.timeout_s).status_code
        except httpx.HTTPError as error:
            return False, f"GET {probe.http_path}: {error!r}"
        return 200 <= status < 400, f"GET {probe.http_path} answered {status}"

    def wait_until_passes(self, probe: Probe) -> None:
        wait_s = min(probe.budget_s, PROBE_WAIT_CAP_S)
        deadline = time.monotonic() + wait_s
        said = "not run"
        if probe.argv is not None:
            # Until the service has written anything to its /tmp (its heartbeat) a command
            # probe can only fail, and each attempt takes CPU from the services starting up.
            while time.monotonic() < deadline and self.alive() and not any(self.tmp.iterdir()):
                time.sleep(0.2)
        while time.monotonic() < deadline:
            if not self.alive():
                raise AssertionError(
                    f"{self.name} exited ({self.popen.returncode if self.popen else None}) before its "
                    f"{probe.label} passed\n{self.log_tail()}"
                )
            passed, said = self.probe_once(probe)
            if passed:
                return
            time.sleep(PROBE_RETRY_S)
        raise AssertionError(
            f"{self.name}: {probe.label} did not pass within {wait_s:.0f}s (last: {said})\n" + self.log_tail()
        )

    def kill(self) -> None:
        if self.alive():
            assert self.popen is not None
            self.popen.kill()
            self.popen.wait()


class Deployment:
    """The containers of one deployment (every replica of every service), started together,
    stopped as the runtime stops them; keyed by replica name (`decider-1`)."""

    def __init__(
        self, specs: list[ContainerSpec], local: dict[str, LocalEnvironment], directory: Path
    ) -> None:
        self.containers = {
            name: LocalContainer(spec, local[name], directory, name)
            for spec in specs
            for name in spec.replica_names()
        }

    def __iter__(self) -> Iterator[LocalContainer]:
        return iter(self.containers.values())

    def diagnostics(self) -> str:
        return "\n".join(f"--- {c.name} ---\n{c.log_tail()}" for c in self)

    def start(self) -> None:
        for container in self:
            container.start()

    def wait_healthy(self) -> None:
        """Each container's probes in order (a startup probe gates the others), two containers
        at a time: a probe that starts the CLI costs about a second of CPU."""

        def probe(container: LocalContainer) -> None:
            assert container.spec.probes, f"{container.spec.name} has no health check"
            for check in container.spec.probes:
                container.wait_until_passes(check)

        with ThreadPoolExecutor(max_workers=2) as pool:
            for done in [pool.submit(probe, container) for container in self]:
                done.result()

    def replicas(self, service: str) -> list[LocalContainer]:
        return [container for container in self if container.spec.name == service]

    def api_url(self, service: str = "api", replica: int = 0) -> str:
        """One replica's address (each pod or container has its own): the first by default."""
        containers = self.replicas(service)
        assert containers, f"no {service} container: {sorted(self.containers)}"
        ports = containers[replica].ports
        assert len(ports) == 1, f"{containers[replica].name} listens on {ports}"
        return f"http://127.0.0.1:{next(iter(ports.values()))}"

    def stop(self) -> dict[str, int | None]:
        """Every container gets its stop signal at once; each must exit within its grace period
        (less its preStop sleep). Exit codes; None for one that had to be killed."""
        signalled = time.monotonic()
        for container in self:
            if container.alive():
                assert container.popen is not None
                container.popen.send_signal(container.spec.stop_signal)
        deadlines = {
            container: signalled + container.spec.grace_s - container.spec.pre_stop_s for container in self
        }
        codes: dict[str, int | None] = {}
        while deadlines:
            for container, deadline in list(deadlines.items()):
                assert container.popen is not None
                code = container.popen.poll()
                if code is None and time.monotonic() < deadline:
                    continue
                if code is None:  # the runtime's SIGKILL
                    container.kill()
                codes[container.name] = code
                del deadlines[container]
            time.sleep(0.05)
        return codes

    def kill(self) -> None:
        for container in self:
            container.kill()


# ----------------------------------------------------------------- OTLP sink, the workflow ---


class OtlpSink:
    """Answers OTLP/HTTP exports with 200 and records the paths they were sent to."""

    def __init__(self) -> None:
        received: list[str] = []
        self.received = received

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                received.append(self.path)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


# One task, then one that fails its first attempt: its retry waits for a timer (the timer
# service), so the workflow needs the api, decider, scheduler and timer working together.
TASK_DEFS = [
    {"name": "deploy_add", "retryCount": 0},
    {"name": "deploy_retried", "retryCount": 1, "retryDelaySeconds": 1, "retryLogic": "FIXED"},
]
WORKFLOW = {
    "name": "deploy_check",
    "version": 1,
    "tasks": [
        {
            "name": "deploy_add",
            "taskReferenceName": "add",
            "inputParameters": {"n": "${workflow.input.n}", "add": "${workflow.input.add}"},
        },
        {
            "name": "deploy_retried",
            "taskReferenceName": "retried",
            "inputParameters": {"n": "${add.output.n}"},
        },
    ],
    "outputParameters": {
        "sum": "${add.output.n}",
        "doubled": "${retried.output.n}",
        "attempt": "${retried.output.attempt}",
    },
}
WORKFLOW_INPUT = {"n": 4, "add": 3}
EXPECTED_OUTPUT = {"sum": 7, "doubled": 14, "attempt": 1}


def _work(task: dict[str, Any]) -> dict[str, Any]:
    """An HTTP worker's result for a polled task."""
    result: dict[str, Any] = {
        "workflowInstanceId": task["workflowInstanceId"],
        "taskId": task["taskId"],
        "workerId": "deploy-test",
        "status": "COMPLETED",
    }
    data = task["inputData"]
    if task["taskType"] == "deploy_add":
        result["outputData"] = {"n": data["n"] + data["add"]}
    elif task["retryCount"] == 0:
        result.update(status="FAILED", reasonForIncompletion="the first attempt fails on purpose")
    else:
        result["outputData"] = {"n": data["n"] * 2, "attempt": task["retryCount"]}
    return result


def _ok(response: httpx.Response, what: str) -> httpx.Response:
    assert response.status_code < 300, f"{what}: {response.status_code} {response.text}"
    return response


def run_workflow(
    api: str, within_s: float, diagnostics: Callable[[], str], key: ApiKey | None = None
) -> dict[str, Any]:
    """Register the definitions, start a workflow and work its tasks, all through the api, as a
    client and an HTTP worker would (with `key`'s token when the api has keys); the finished
    workflow (Conductor's JSON)."""
    auth = ApiKeyAuth(api, key) if key else None
    with httpx.Client(base_url=api, timeout=30, auth=auth) as http:
        _ok(http.post("/api/metadata/taskdefs", json=TASK_DEFS), "registering the task definitions")
        _ok(http.post("/api/metadata/workflow", json=WORKFLOW), "registering the workflow")
        workflow_id = _ok(http.post(f"/api/workflow/{WORKFLOW['name']}", json=WORKFLOW_INPUT), "start").text
        deadline = time.monotonic() + within_s
        state: dict[str, Any] = {}
        while time.monotonic() < deadline:
            for task_type in ("deploy_add", "deploy_retried"):
                polled = _ok(
                    http.get(
                        f"/api/tasks/poll/batch/{task_type}",
                        params={"count": 1, "timeout": 300, "workerid": "deploy-test"},
                    ),
                    f"polling {task_type}",
                )
                for task in polled.json():
                    _ok(http.post("/api/tasks", json=_work(task)), f"reporting {task_type}")
            found = http.get(f"/api/workflow/{workflow_id}", params={"includeTasks": "false"})
            if found.status_code == 404:  # not committed by the decider yet (the start's wait is bounded)
                state = {"status": "not found (404)"}
                continue
            state = _ok(found, "reading the workflow").json()
            if state["status"] != "RUNNING":
                return state
        raise AssertionError(
            f"workflow {workflow_id} not finished in {within_s:.0f}s: {state}\n{diagnostics()}"
        )
