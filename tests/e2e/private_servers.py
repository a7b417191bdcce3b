"""A private Kafka + FerretDB pair for one test, started by deploy/local/up.sh, whose servers can be
stopped and restarted one at a time.

Tests that take a server down cannot use the shared servers (CAIRN_KAFKA_BOOTSTRAP /
CAIRN_MONGO_URL): every other test would fail with them. Each server is started on its own
(`CAIRN_LOCAL_ONLY=kafka|ferretdb`, each with its own state file), on ports fixed when the pair is
created and one kept data dir, so a restart brings it back where clients expect it, with Kafka's
topics and committed offsets and FerretDB's data intact. `close()` stops whatever still runs; a
detached watcher does the same if the test process dies without calling it (up.sh starts the
servers detached, so they would otherwise outlive a killed test run).
"""

from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
UP = ROOT / "deploy" / "local" / "up.sh"
DOWN = ROOT / "deploy" / "local" / "down.sh"
KAFKA, FERRETDB = "kafka", "ferretdb"
# What the process's command line contains (the same check as deploy/local/lib.sh's pid_matches).
PATTERNS = {KAFKA: "kafka.Kafka", FERRETDB: "ferretdb"}


class ServerError(RuntimeError):
    """up.sh or down.sh failed; the message carries its stderr."""


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _pid_matches(pid: int, pattern: str) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False
    return pattern in cmdline


class PrivateServers:
    """Kafka and FerretDB for one test, in `directory` (state files, data dir with both logs)."""

    def __init__(self, directory: Path, *, timeout_s: int = 120, kafka_security: str = "") -> None:
        """`kafka_security="sasl_ssl"`: Kafka also listens with TLS + SASL (up.sh's
        CAIRN_LOCAL_KAFKA_SECURITY); `kafka_bootstrap` is then that listener, and `kafka_settings`
        holds the CAIRN_KAFKA_* variables that reach it. Kafka then also has a mutual-TLS listener
        (protocol SSL, client certificate required): `kafka_mtls_settings`."""
        self.directory = directory
        self.data_dir = directory / "data"
        self.timeout_s = timeout_s
        self.kafka_security = kafka_security
        (
            self.kafka_port,
            self.controller_port,
            self.mongo_port,
            self.kafka_secure_port,
            self.kafka_mtls_port,
        ) = free_ports(5)
        self.kafka_bootstrap = f"127.0.0.1:{self.kafka_secure_port if kafka_security else self.kafka_port}"
        self.kafka_settings: dict[str, str] = {"CAIRN_KAFKA_BOOTSTRAP": self.kafka_bootstrap}
        self.mongo_url = f"mongodb://127.0.0.1:{self.mongo_port}/"
        self._state = {KAFKA: directory / "kafka.env", FERRETDB: directory / "ferretdb.env"}
        self._watched = directory / "watched"  # while it exists, the watcher guards the servers
        self.timings: list[tuple[str, float]] = []
        """(what, seconds) of every start and stop, for the test's report."""

    # ---- the pair ----

    def start(self) -> None:
        """Start both servers (concurrently: Kafka takes 10-25 s, FerretDB about 1 s)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        self._guard()
        failures: list[BaseException] = []

        def up(server: str) -> None:
            try:
                self._up(server)
            except BaseException as error:  # reported below, after both have finished
                failures.append(error)

        threads = [threading.Thread(target=up, args=(server,)) for server in (KAFKA, FERRETDB)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if failures:
            raise failures[0]

    def close(self) -> None:
        """Stop whatever still runs (the data dir stays, with the logs, under `directory`)."""
        errors = []
        for server in (KAFKA, FERRETDB):
            try:
                self._down(server)
            except ServerError as error:
                errors.append(str(error))
        self._watched.unlink(missing_ok=True)
        if errors:
            raise ServerError("\n".join(errors))

    # ---- one server at a time ----

    def start_kafka(self) -> None:
        self._up(KAFKA)

    def start_mongo(self) -> None:
        self._up(FERRETDB)

    def stop_kafka(self, *, kill: bool = False) -> None:
        """Graceful (SIGTERM, as down.sh does) or, with `kill`, SIGKILL: no shutdown at all."""
        self._stop(KAFKA, kill)

    def stop_mongo(self, *, kill: bool = False) -> None:
        self._stop(FERRETDB, kill)

    def running(self, server: str) -> bool:
        pid = self.pid(server)
        return pid is not None and _pid_matches(pid, PATTERNS[server])

    def pid(self, server: str) -> int | None:
        """The PID the server's state file records (None when it is not started)."""
        try:
            lines = self._state[server].read_text().splitlines()
        except FileNotFoundError:
            return None
        key = "KAFKA_PID=" if server == KAFKA else "MONGO_PID="
        value = next((line.removeprefix(key) for line in lines if line.startswith(key)), "")
        return int(value) if value.isdigit() else None

    def diagnostics(self, lines: int = 30) -> str:
        parts = []
        for name in ("kafka.log", "ferretdb.log"):
            path = self.data_dir / name
            try:
                tail = path.read_text(errors="replace").splitlines()[-lines:]
            except FileNotFoundError:
                continue
            parts.append(f"--- {path} ---\n" + "\n".join(tail))
        return "\n".join(parts)

    @property
    def kafka_mtls_settings(self) -> dict[str, str]:
        """The CAIRN_KAFKA_* variables for the mutual-TLS listener of a secure Kafka (protocol SSL,
        the CA and the CN=cairn client certificate up.sh generates in the data dir's tls/)."""
        if not self.kafka_security:
            raise ServerError("the mutual-TLS listener exists only with kafka_security='sasl_ssl'")
        tls = self.data_dir / "tls"
        return {
            "CAIRN_KAFKA_BOOTSTRAP": f"127.0.0.1:{self.kafka_mtls_port}",
            "CAIRN_KAFKA_SECURITY_PROTOCOL": "SSL",
            "CAIRN_KAFKA_SSL_CAFILE": str(tls / "ca.pem"),
            "CAIRN_KAFKA_SSL_CERTFILE": str(tls / "client.pem"),
            "CAIRN_KAFKA_SSL_KEYFILE": str(tls / "client.key"),
        }

    # ---- internals ----

    def _env(self, server: str) -> dict[str, str]:
        env = dict(os.environ)  # CAIRN_LOCAL_KAFKA_HEAP and the versions may be set by the caller
        env.update(
            CAIRN_LOCAL_ONLY=server,
            CAIRN_LOCAL_STATE=str(self._state[server]),
            CAIRN_LOCAL_RUN_DIR=str(self.directory),
            CAIRN_LOCAL_DATA_DIR=str(self.data_dir),
            CAIRN_LOCAL_KAFKA_PORT=str(self.kafka_port),
            CAIRN_LOCAL_CONTROLLER_PORT=str(self.controller_port),
            CAIRN_LOCAL_MONGO_PORT=str(self.mongo_port),
            CAIRN_LOCAL_TIMEOUT=str(self.timeout_s),
            CAIRN_LOCAL_KAFKA_SECURITY=self.kafka_security,
            CAIRN_LOCAL_KAFKA_SECURE_PORT=str(self.kafka_secure_port),
            CAIRN_LOCAL_KAFKA_MTLS_PORT=str(self.kafka_mtls_port),
        )
        return env

    def _run(self, what: str, script: Path, server: str) -> str:
        started = time.monotonic()
        result = subprocess.run(
            ["bash", str(script)],
            env=self._env(server),
            capture_output=True,
            text=True,
            timeout=self.timeout_s + 60,
            check=False,
        )
        self.timings.append((what, time.monotonic() - started))
        if result.returncode != 0:
            raise ServerError(f"{what}: {script.name} exited {result.returncode}\n{result.stderr}")
        return result.stdout

    def _up(self, server: str) -> None:
        stdout = self._run(f"start {server}", UP, server)
        exports = dict(
            shlex.split(line.removeprefix("export "))[0].split("=", 1) for line in stdout.splitlines()
        )
        expected = (
            {"CAIRN_KAFKA_BOOTSTRAP": self.kafka_bootstrap}
            if server == KAFKA
            else {"CAIRN_MONGO_URL": self.mongo_url}
        )
        exact = server == FERRETDB or not self.kafka_security  # secure mode adds the CAIRN_KAFKA_* lines
        if exports != expected if exact else not expected.items() <= exports.items():
            raise ServerError(f"start {server}: up.sh printed {stdout!r}, expected {expected!r}")
        if server == KAFKA:
            self.kafka_settings = exports

    def _down(self, server: str) -> None:
        if self._state[server].exists():
            self._run(f"stop {server}", DOWN, server)

    def _stop(self, server: str, kill: bool) -> None:
        if kill:
            pid = self.pid(server)
            if pid is None or not _pid_matches(pid, PATTERNS[server]):
                raise ServerError(f"{server} is not running (pid {pid})")
            started = time.monotonic()
            os.kill(pid, signal.SIGKILL)
            # Gone, or a zombie (empty command line) waiting to be reaped: its ports are free.
            deadline = time.monotonic() + 10
            while _pid_matches(pid, PATTERNS[server]):
                if time.monotonic() > deadline:
                    raise ServerError(f"{server} (pid {pid}) still alive 10 s after SIGKILL")
                time.sleep(0.05)
            self.timings.append((f"kill {server}", time.monotonic() - started))
        self._down(server)  # after a kill: finds the PID gone and only removes the state file

    def _guard(self) -> None:
        """A detached watcher: if this process dies while `watched` exists, it stops both servers."""
        self._watched.touch()
        watched = shlex.quote(str(self._watched))
        downs = " ; ".join(
            f"CAIRN_LOCAL_STATE={shlex.quote(str(self._state[server]))} bash {shlex.quote(str(DOWN))}"
            for server in (KAFKA, FERRETDB)
        )
        script = (
            f"while kill -0 {os.getpid()} 2>/dev/null && [ -e {watched} ]; do sleep 1; done; "
            f"if [ -e {watched} ]; then {downs} ; fi"
        )
        subprocess.Popen(
            ["sh", "-c", script],
            start_new_session=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
