"""docker-compose.yml's Kafka without Docker: the `kafka` service booted from its KAFKA_* environment
the way the apache/kafka image does it, with only the container addresses mapped to 127.0.0.1, on
the jars deploy/local/up.sh installs (the image's Kafka version); and the compose commands that use
it (the healthcheck, the kafka-topics job) run as written, with /opt/kafka/bin/*.sh replaced by
small scripts that run the same Kafka tool classes from those jars.

What the apache/kafka image does with its environment (its shell scripts read in apache/kafka's
docker/ directory, snapshot 1eb7644 of 2024-10-25, the newest at hand; its Java side read, and run,
in kafka_2.13-4.1.1.jar, the 4.1.1 build up.sh installs):
- docker/resources/common-scripts/run sources configureDefaults, which exports CLUSTER_ID =
  IMAGE_DEFAULT_CLUSTER_ID when it is unset (the only default it sets); then configure, which
  (KRaft, KAFKA_PROCESS_ROLES set) requires CLUSTER_ID, refuses KAFKA_ADVERTISED_LISTENERS on a
  controller-only node, and derives KAFKA_LISTENERS from KAFKA_ADVERTISED_LISTENERS (every host
  -> 0.0.0.0) when it is unset; then docker/jvm/launch.
- docker/jvm/launch runs `kafka.docker.KafkaDockerWrapper setup --default-configs-dir
  /etc/kafka/docker --mounted-configs-dir /mnt/shared/config --final-configs-dir /opt/kafka/config`
  (server.properties from the environment, then StorageTool `format --cluster-id=$CLUSTER_ID -c
  /opt/kafka/config/server.properties`; "already formatted" is tolerated), then
  `kafka-server-start.sh /opt/kafka/config/server.properties`. The variables launch itself exports
  (KAFKA_JMX_OPTS, KAFKA_JMX_HOSTNAME, KAFKA_JVM_PERFORMANCE_OPTS) are all excluded below.
- KafkaDockerWrapper (kafka_2.13-4.1.1.jar): every variable that starts with KAFKA_ and is not in
  EXCLUDED_VARIABLES becomes a property: KAFKA_ removed once (replaceFirst), lower-cased, then
  `_` -> `.`, `...` -> `-`, `..` -> `_` (so `_` is `.`, `__` is `_`, `___` is `-`); the value
  verbatim. Without a mounted server.properties the file holds exactly those lines; the image's
  bundled server.properties is used only when the environment yields none. So nothing else is
  set: log.dirs, for one, stays Kafka's default (log.dir=/tmp/kafka-logs inside the container).

The wrapper itself is run here (from the 4.1.1 jar, with a clean environment), so the
server.properties the broker boots from is the image's own rendering, not a re-implementation;
`image_server_properties` states the rules and is checked against that rendering.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.deploy.tools import ROOT, require_tool
from tests.needs import unavailable

COMPOSE = ROOT / "docker-compose.yml"
UP = ROOT / "deploy" / "local" / "up.sh"
DOWN = ROOT / "deploy" / "local" / "down.sh"

IMAGE = "apache/kafka"
IMAGE_BIN = "/opt/kafka/bin/"
# docker/resources/common-scripts/configureDefaults: the CLUSTER_ID every container gets unless set.
IMAGE_DEFAULT_CLUSTER_ID = "5L6g3nShT-eMCtK--X86sw"
# kafka.docker.Constants.ExcludeServerPropsEnv (4.1.1): KAFKA_* variables that are not properties.
EXCLUDED_VARIABLES = frozenset(
    {
        "KAFKA_VERSION",
        "KAFKA_HEAP_OPTS",
        "KAFKA_LOG4J_OPTS",
        "KAFKA_OPTS",
        "KAFKA_JMX_OPTS",
        "KAFKA_JVM_PERFORMANCE_OPTS",
        "KAFKA_GC_LOG_OPTS",
        "KAFKA_LOG4J_ROOT_LOGLEVEL",
        "KAFKA_LOG4J_LOGGERS",
        "KAFKA_TOOLS_LOG4J_LOGLEVEL",
        "KAFKA_JMX_HOSTNAME",
    }
)
# The image's bin/*.sh scripts the compose file runs, and the class each one runs (bin/*.sh of 4.1.1).
TOOL_CLASSES = {
    "kafka-topics.sh": "org.apache.kafka.tools.TopicCommand",
    "kafka-broker-api-versions.sh": "org.apache.kafka.tools.BrokerApiVersionsCommand",
}
# Hosts a listener may bind inside the container, and names of the container itself.
_ANY_HOST = {"", "0.0.0.0", "::", "[::]"}
_SELF_HOSTS = {"localhost", "127.0.0.1"}
# Start-up is 15-30 s on a busy 2-core machine; a broker that needs this long is not coming up.
BOOT_TIMEOUT_S = 90.0
STOP_GRACE_S = 20.0


class ComposeError(AssertionError):
    """The compose file asks for something no container could do (an unknown host, a script the
    image does not have, a variable compose would take from the host). An AssertionError, so the
    test reports it as a failure of the compose file, not an error of the test."""


# ---------------------------------------------------------------- compose ---


def compose_value(name: str, value: Any) -> str:
    """A compose environment value as the container sees it. Compose passes numbers as text and
    rejects booleans (they must be quoted), so a YAML `true` here would fail `compose up`."""
    if isinstance(value, bool):
        raise ComposeError(f"{name}: {value!r} is a YAML boolean; compose requires it quoted")
    return "" if value is None else compose_unescape(str(value), name)


def service_environment(service: Mapping[str, Any]) -> dict[str, str]:
    """The `environment:` of a compose service (mapping or KEY=VALUE list), as text."""
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) if "=" in item else (item, None) for item in env)
    return {name: compose_value(name, value) for name, value in env.items()}


def compose_unescape(text: str, where: str) -> str:
    """`$$` -> `$`, as compose does before the shell sees a command. A single `$` would be filled
    in by compose from the host's environment (and be empty in the container): refused."""
    out: list[str] = []
    i = 0
    while i < len(text):
        if text[i] == "$":
            if text[i + 1 : i + 2] != "$":
                raise ComposeError(f"{where}: {text[i : i + 20]!r} is interpolated by compose, write $$")
            out.append("$")
            i += 2
            continue
        out.append(text[i])
        i += 1
    return "".join(out)


def image_version(service: Mapping[str, Any]) -> str:
    """The Kafka version of an `apache/kafka:<version>` service: the jars must be that version."""
    image = str(service.get("image", ""))
    name, _, tag = image.partition(":")
    if name != IMAGE or not re.fullmatch(r"\d+\.\d+\.\d+", tag):
        raise ComposeError(f"image {image!r}: expected {IMAGE}:<x.y.z> (the checks run that Kafka version)")
    return tag


def service_hosts(name: str, service: Mapping[str, Any]) -> set[str]:
    """The names other containers reach a service by: its name, hostname, container_name and
    network aliases."""
    hosts = {name}
    for key in ("hostname", "container_name"):
        if service.get(key):
            hosts.add(str(service[key]))
    networks = service.get("networks")
    if isinstance(networks, dict):
        for network in networks.values():
            hosts.update(str(alias) for alias in (network or {}).get("aliases", []))
    return hosts


# ------------------------------------------------------ the image's rules ---


def property_name(variable: str) -> str | None:
    """The server.properties key the image makes of `variable`, or None when it makes none
    (KafkaDockerWrapper.getServerConfigsFromEnv, 4.1.1)."""
    if not variable.startswith("KAFKA_") or variable in EXCLUDED_VARIABLES:
        return None
    key = variable.replace("KAFKA_", "", 1).lower()
    return key.replace("_", ".").replace("...", "-").replace("..", "_")


def image_environment(env: Mapping[str, str]) -> dict[str, str]:
    """The environment the image's wrapper sees, after configureDefaults and configure: CLUSTER_ID
    defaulted, KAFKA_LISTENERS derived from the advertised ones when unset, and configure's
    refusals raised as ComposeError (the container would exit)."""
    result = dict(env)
    if not result.get("CLUSTER_ID"):
        result["CLUSTER_ID"] = IMAGE_DEFAULT_CLUSTER_ID
    roles = result.get("KAFKA_PROCESS_ROLES", "")
    if roles == "controller" and result.get("KAFKA_ADVERTISED_LISTENERS"):
        raise ComposeError("KAFKA_ADVERTISED_LISTENERS is not supported on a KRaft controller (configure)")
    if (
        not result.get("KAFKA_LISTENERS")
        and roles != "controller"
        and result.get("KAFKA_ADVERTISED_LISTENERS")
    ):
        result["KAFKA_LISTENERS"] = re.sub(r"://[^:]*:", "://0.0.0.0:", result["KAFKA_ADVERTISED_LISTENERS"])
    return result


def image_server_properties(env: Mapping[str, str]) -> dict[str, str]:
    """server.properties as the image writes it from `env` (no mounted file)."""
    properties: dict[str, str] = {}
    for variable, value in env.items():
        key = property_name(variable)
        if key is not None:
            properties[key] = value
    return properties


def read_properties(path: Path) -> dict[str, str]:
    """A properties file of plain `key=value` lines (what the wrapper writes)."""
    properties: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith(("#", "!")):
            key, _, value = line.partition("=")
            properties[key.strip()] = value.strip()
    return properties


# -------------------------------------------------------------- addresses ---


def free_port() -> int:
    """A port nothing on 127.0.0.1 listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class AddressMap:
    """Container addresses -> local ones: every container port gets one free local port (only
    those the broker listens on are ever bound, as in the container); a host is 127.0.0.1 only if
    the container running the command could reach the kafka service by that name."""

    kafka_hosts: set[str]
    ports: dict[int, int] = field(default_factory=dict)

    def port(self, container_port: int) -> int:
        if container_port not in self.ports:
            taken = set(self.ports.values())
            port = free_port()
            while port in taken:
                port = free_port()
            self.ports[container_port] = port
        return self.ports[container_port]

    def host_port(self, address: str, reachable: set[str], where: str) -> str:
        """`host:port` as seen from a container that reaches kafka by the names in `reachable`."""
        host, sep, port = address.rpartition(":")
        if not sep or not port.isdigit():
            raise ComposeError(f"{where}: {address!r} is not host:port")
        if host not in reachable:
            raise ComposeError(
                f"{where}: {address!r} names host {host!r}, but there the kafka service is "
                f"{' or '.join(sorted(reachable - _ANY_HOST))}"
            )
        return f"127.0.0.1:{self.port(int(port))}"

    def listeners(self, value: str, reachable: set[str], where: str) -> str:
        """A NAME://host:port,... list with every address mapped."""
        return self._mapped_list(value, "://", "NAME://host:port", reachable, where)

    def voters(self, value: str, reachable: set[str], where: str) -> str:
        """An id@host:port,... list with every address mapped."""
        return self._mapped_list(value, "@", "id@host:port", reachable, where)

    def _mapped_list(self, value: str, separator: str, form: str, reachable: set[str], where: str) -> str:
        mapped = []
        for entry in filter(None, (part.strip() for part in value.split(","))):
            prefix, sep, address = entry.partition(separator)
            if not sep:
                raise ComposeError(f"{where}: {entry!r} is not {form}")
            mapped.append(f"{prefix}{separator}{self.host_port(address, reachable, where)}")
        return ",".join(mapped)

    def bootstrap_arguments(self, script: str, reachable: set[str], where: str) -> str:
        """Every `--bootstrap-server host:port[,...]` in a shell script, mapped."""

        def one(match: re.Match[str]) -> str:
            servers = match.group(2).split(",")
            return match.group(1) + ",".join(self.host_port(s, reachable, where) for s in servers)

        return re.sub(r"(--bootstrap-server[ =]+)([^\s'\"\\;|&]+)", one, script)


# Addresses in these KAFKA_* variables are container addresses; which names reach the kafka
# service depends on who uses them: listeners bind inside the kafka container; advertised
# listeners are handed to clients in every container; the voters are used by the KRaft nodes.
_LISTENER_VARIABLES = {"KAFKA_LISTENERS": "self", "KAFKA_ADVERTISED_LISTENERS": "others"}
_VOTER_VARIABLES = {"KAFKA_CONTROLLER_QUORUM_VOTERS": "self"}


@dataclass
class LocalEnvironment:
    env: dict[str, str]
    added: dict[str, str]
    """Variables added here that the compose file does not set, each with why."""


def localize(env: Mapping[str, str], addresses: AddressMap, log_dir: Path) -> LocalEnvironment:
    """The image's environment with container addresses mapped to 127.0.0.1 and the data in
    `log_dir`; nothing else changes. Other address-bearing KAFKA_* variables are refused: they
    would need a mapping this check does not know."""
    inside = addresses.kafka_hosts | _SELF_HOSTS | _ANY_HOST
    outside = set(addresses.kafka_hosts)
    result = dict(env)
    for variable, who in _LISTENER_VARIABLES.items():
        if result.get(variable):
            reachable = inside if who == "self" else outside
            where = variable if who == "self" else f"{variable} (what clients in other containers dial)"
            result[variable] = addresses.listeners(result[variable], reachable, where)
    for variable in _VOTER_VARIABLES:
        if result.get(variable):
            result[variable] = addresses.voters(result[variable], inside - _ANY_HOST, variable)
    for variable in ("KAFKA_CONTROLLER_QUORUM_BOOTSTRAP_SERVERS", "KAFKA_LOG_DIR"):
        if variable in result:
            raise ComposeError(
                f"{variable} is set: this check does not map it yet (tests/deploy/compose_kafka.py)"
            )
    declared = result.get("KAFKA_LOG_DIRS")
    added = {
        "KAFKA_LOG_DIRS": (
            f"log.dirs: the container's {declared} (a volume); here a private directory"
            if declared
            else "log.dirs: compose sets none, so the container writes to Kafka's default "
            "/tmp/kafka-logs; here a private directory instead of the host's /tmp"
        ),
    }
    result["KAFKA_LOG_DIRS"] = str(log_dir)
    return LocalEnvironment(result, added)


# ------------------------------------------------------------------ jars ---


@dataclass(frozen=True)
class KafkaInstall:
    """Kafka's jars as deploy/local/up.sh installs them (lib.sh: KAFKA_HOME)."""

    home: Path
    version: str

    @property
    def libs(self) -> Path:
        return self.home / "libs"

    def tool(self, main_class: str) -> list[str]:
        """A Kafka CLI class, as up.sh's kafka_cli runs it (quick JIT, small heap, quiet log)."""
        return [
            "java",
            "-XX:TieredStopAtLevel=1",
            "-XX:+UseSerialGC",
            "-Xmx256m",
            f"-Dlog4j2.configurationFile={self.home / 'config' / 'tools-log4j2.properties'}",
            "-cp",
            f"{self.libs}/*",
            main_class,
        ]

    def server(self, properties: Path, logs_dir: Path) -> list[str]:
        """The broker, as up.sh starts it (its heap: a smaller one than the image's 1 GiB)."""
        return [
            "java",
            "-Xms128m",
            "-Xmx512m",
            "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20",
            "-XX:+ExitOnOutOfMemoryError",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.home / 'config' / 'log4j2.properties'}",
            f"-Dkafka.logs.dir={logs_dir}",
            "-cp",
            f"{self.libs}/*",
            "kafka.Kafka",
            str(properties),
        ]


def _cache_home(version: str) -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "cairn"
    return cache / f"kafka-{version}"


def _installed(home: Path, version: str) -> bool:
    return (home / ".complete").exists() and (home / "libs" / f"kafka_2.13-{version}.jar").exists()


def kafka_install(version: str, scratch: Path) -> KafkaInstall:
    """Kafka `version`'s jars from up.sh's cache. When they are missing and Maven is here, up.sh
    installs them (it then starts a broker of its own, which down.sh stops at once); otherwise the
    test is unavailable (skipped locally, failed under CI=true)."""
    require_tool("java", "Java 17+ (apt-get install openjdk-17-jre-headless): Kafka runs on it")
    home = _cache_home(version)
    if _installed(home, version):
        return KafkaInstall(home, version)
    hint = f"CAIRN_LOCAL_ONLY=kafka CAIRN_LOCAL_KAFKA_VERSION={version} bash deploy/local/up.sh, then down.sh"
    if shutil.which("mvn") is None:
        unavailable(f"Kafka {version} jars are not in {home} and mvn is missing to fetch them ({hint})")
    scratch.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "CAIRN_LOCAL_ONLY": "kafka",
        "CAIRN_LOCAL_KAFKA_VERSION": version,
        "CAIRN_LOCAL_STATE": str(scratch / "state.env"),
        "CAIRN_LOCAL_RUN_DIR": str(scratch),
    }
    try:
        up = subprocess.run(["bash", str(UP)], env=env, capture_output=True, text=True, timeout=240)
    finally:
        subprocess.run(["bash", str(DOWN)], env=env, capture_output=True, text=True, timeout=60)
    if up.returncode != 0 or not _installed(home, version):
        unavailable(f"up.sh could not install Kafka {version} into {home} ({hint}):\n{up.stderr[-3000:]}")
    return KafkaInstall(home, version)


# ------------------------------------------------------------- processes ---


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL it when the test process dies (PR_SET_PDEATHSIG), so a
    killed test run never leaves a broker or a tool behind."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)


@dataclass
class Finished:
    argv: Sequence[str]
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool = False

    def report(self) -> str:
        status = f"timed out after {self.seconds:.0f} s" if self.timed_out else f"exit {self.returncode}"
        return (
            f"$ {shlex.join(self.argv)}\n({status}, {self.seconds:.1f} s)\n"
            f"--- stdout\n{self.stdout[-4000:]}\n--- stderr\n{self.stderr[-4000:]}"
        )


def run(argv: Sequence[str], env: Mapping[str, str], timeout_s: float, cwd: Path | None = None) -> Finished:
    """Run to the end in its own process group; on timeout the whole group is killed (a shell
    script's java children too), never left running."""
    started = time.monotonic()
    process = subprocess.Popen(
        list(argv),
        env=dict(env),
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=_die_with_parent,
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
        timed_out = False
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        timed_out = True
    return Finished(list(argv), process.returncode, stdout, stderr, time.monotonic() - started, timed_out)


def base_environment() -> dict[str, str]:
    """What every process here inherits: enough to find java and the shell tools, and nothing
    else, so no KAFKA_* variable of the test's own environment reaches the image's wrapper."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}
    for name in ("JAVA_HOME", "HOME", "TMPDIR"):
        if name in os.environ:
            env[name] = os.environ[name]
    return env


def tail(path: Path, lines: int = 60) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as error:
        return f"(no log: {error})"


def warnings_of(path: Path, limit: int = 15) -> str:
    """The distinct WARN/ERROR/FATAL messages of a Kafka log, first seen first, with how often
    each came: the cause of a failed start is rarely in the last lines (a shutdown follows it)."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError as error:
        return f"(no log: {error})"
    counts: dict[str, int] = {}
    for line in lines:
        match = re.match(r"\[[^\]]*\] (WARN|ERROR|FATAL) (.*)", line)
        if match:
            message = f"{match.group(1)} {match.group(2)}"[:300]
            counts[message] = counts.get(message, 0) + 1
    shown = [f"{count:>5} x {message}" for message, count in list(counts.items())[:limit]]
    more = f"\n(and {len(counts) - limit} more)" if len(counts) > limit else ""
    return "\n".join(shown) + more if shown else "(none)"


# ------------------------------------------------------------------ broker ---


@dataclass
class ComposeBroker:
    """The compose `kafka` service as a local process: its environment rendered by the image's
    wrapper, its storage formatted by the wrapper, kafka.Kafka booted on the result."""

    compose: Mapping[str, Any] = field(repr=False)
    install: KafkaInstall
    directory: Path
    service_name: str = "kafka"
    addresses: AddressMap = field(init=False)
    container_env: dict[str, str] = field(init=False)
    local: LocalEnvironment = field(init=False)
    properties_path: Path = field(init=False)
    log_path: Path = field(init=False)
    process: subprocess.Popen[bytes] | None = field(default=None, init=False)
    setup: Finished | None = field(default=None, init=False, repr=False)
    boot_seconds: float = field(default=0.0, init=False)

    def __post_init__(self) -> None:
        service = self.compose["services"][self.service_name]
        self.addresses = AddressMap(service_hosts(self.service_name, service))
        self.container_env = image_environment(service_environment(service))
        self.local = localize(self.container_env, self.addresses, self.directory / "data")
        configs = self.directory / "config"
        self.properties_path = configs / "server.properties"
        self.log_path = self.directory / "kafka.log"

    @property
    def bootstrap(self) -> str:
        """Where clients on this machine reach the advertised PLAINTEXT listener."""
        advertised = self.local.env.get("KAFKA_ADVERTISED_LISTENERS") or self.local.env["KAFKA_LISTENERS"]
        return advertised.split(",")[0].split("://", 1)[1]

    def log_tail(self, lines: int = 30) -> str:
        """The broker log's warnings and errors, then its last `lines` lines."""
        return (
            f"--- broker log ({self.log_path}), its warnings and errors:\n{warnings_of(self.log_path)}\n"
            f"--- last {lines} lines:\n{tail(self.log_path, lines)}"
        )

    def start(self) -> None:
        """Render and format as the image's launch does, then boot and wait for "Kafka Server
        started"; a failure says which step, with its output and the broker log."""
        for name in ("config", "data", "mounted", "defaults"):
            (self.directory / name).mkdir(parents=True, exist_ok=True)
        env = {**base_environment(), **self.local.env}
        argv = [
            *self.install.tool("kafka.docker.KafkaDockerWrapper"),
            "setup",
            "--default-configs-dir",
            str(self.directory / "defaults"),
            "--mounted-configs-dir",
            str(self.directory / "mounted"),
            "--final-configs-dir",
            str(self.directory / "config"),
        ]
        self.setup = run(argv, env, timeout_s=120)
        if self.setup.returncode != 0:
            raise AssertionError(
                "the image's setup step (KafkaDockerWrapper setup: server.properties from the "
                f"environment, storage format) failed:\n{self.setup.report()}\n"
                f"--- server.properties:\n{tail(self.properties_path, 80)}"
            )
        started = time.monotonic()
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                self.install.server(self.properties_path, self.directory),
                env=base_environment(),
                cwd=self.directory,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        deadline = started + BOOT_TIMEOUT_S
        while True:
            if self.process.poll() is not None:
                raise AssertionError(
                    f"Kafka exited during start-up (exit {self.process.returncode}) with the compose "
                    f"configuration:\n{self.describe()}\n{self.log_tail()}"
                )
            if "Kafka Server started" in self.log_path.read_text(errors="replace"):
                break
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"Kafka did not finish starting within {BOOT_TIMEOUT_S:.0f} s with the compose "
                    f"configuration:\n{self.describe()}\n{self.log_tail()}"
                )
            time.sleep(0.25)
        self.boot_seconds = time.monotonic() - started

    def describe(self) -> str:
        """The rendered server.properties and the port map, for failure messages."""
        ports = ", ".join(f"{c}->{p}" for c, p in sorted(self.addresses.ports.items()))
        properties = tail(self.properties_path, 80)
        return f"--- container port -> local port: {ports}\n--- server.properties:\n{properties}"

    def stop(self) -> None:
        """SIGTERM, up to STOP_GRACE_S for a clean shutdown, then SIGKILL; always reaped."""
        process = self.process
        if process is None or process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            process.wait(timeout=10)


# ---------------------------------------------------------- compose commands ---


def stand_in_bin(install: KafkaInstall, directory: Path, scripts: Iterable[str]) -> Path:
    """A directory of stand-ins for the image's /opt/kafka/bin scripts `scripts`, each running its
    tool class from the jars with the arguments it is given."""
    directory.mkdir(parents=True, exist_ok=True)
    for script in scripts:
        if script not in TOOL_CLASSES:
            raise ComposeError(f"{IMAGE_BIN}{script}: no stand-in here (add its class to TOOL_CLASSES)")
        path = directory / script
        path.write_text(f'#!/bin/sh\nexec {shlex.join(install.tool(TOOL_CLASSES[script]))} "$@"\n')
        path.chmod(0o755)
    return directory


def localize_script(
    script: str, addresses: AddressMap, reachable: set[str], bin_dir: Path, where: str
) -> str:
    """A compose shell script as it would run here: `$$` unescaped as compose does, the image's
    /opt/kafka/bin/ replaced by `bin_dir`, --bootstrap-server addresses mapped; nothing else."""
    script = compose_unescape(script, where)
    used = set(re.findall(re.escape(IMAGE_BIN) + r"([\w.-]+)", script))
    stand_in_bin_dir = str(bin_dir).rstrip("/") + "/"
    for name in used:
        if not (bin_dir / name).exists():
            raise ComposeError(f"{where} runs {IMAGE_BIN}{name}: no stand-in here")
    script = script.replace(IMAGE_BIN, stand_in_bin_dir)
    return addresses.bootstrap_arguments(script, reachable, where)


def scripts_used(*texts: str) -> set[str]:
    """The /opt/kafka/bin scripts the given commands run."""
    return {name for text in texts for name in re.findall(re.escape(IMAGE_BIN) + r"([\w.-]+)", text)}


def command_argv(service: Mapping[str, Any]) -> list[str]:
    """What the container runs: entrypoint + command (both lists here; a string form would need
    the image's shell splitting, which this check does not model)."""
    entrypoint, command = service.get("entrypoint") or [], service.get("command") or []
    if not isinstance(entrypoint, list) or not isinstance(command, list):
        raise ComposeError("entrypoint and command must be lists (exec form) for this check")
    return [str(part) for part in (*entrypoint, *command)]


def healthcheck_argv(test: Sequence[str] | str) -> list[str]:
    """A compose healthcheck `test` as the engine runs it: CMD-SHELL (or a string) through
    /bin/sh -c, CMD exec'd directly."""
    if isinstance(test, str):
        return ["/bin/sh", "-c", test]
    kind, *rest = list(test)
    if kind == "CMD-SHELL":
        return ["/bin/sh", "-c", " ".join(rest)]
    if kind == "CMD":
        return list(rest)
    raise ComposeError(f"healthcheck test {test!r}: expected CMD or CMD-SHELL")


def duration_s(value: Any, default: float) -> float:
    """A compose duration (`30s`, `1m30s`, `500ms`) in seconds."""
    if value is None:
        return default
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001, "us": 1e-6}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|us|h|m|s)", str(value))
    if not parts:
        raise ComposeError(f"{value!r} is not a compose duration")
    return sum(float(number) * units[unit] for number, unit in parts)
