"""FerretDB on its PostgreSQL backend, started for the tests that must also hold there.

CI's MongoDB-protocol server is FerretDB on SQLite (deploy/local/up.sh). FerretDB's default
backend, and the one most of its users run, is PostgreSQL, where FerretDB 1.24 takes connections
from a fixed pool and an update can hold one while it waits for another
(docs/research/ferretdb-backends.md, section 2). What Cairn sends must not deadlock that pool.

This starts a throwaway PostgreSQL cluster (Debian's server binaries, which scripts/setup.sh
installs) and the FerretDB binary deploy/local/up.sh built, both on 127.0.0.1, and stops both.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from pymongo import MongoClient
from pymongo.errors import PyMongoError

from benchmarks.peers.dbos_peer import postgres_bin
from tests.devserver import free_port
from tests.needs import unavailable

ROOT = Path(__file__).resolve().parents[1]
READY_TIMEOUT_S = 30


def ferretdb_binary() -> Path:
    """Where deploy/local/up.sh builds FerretDB (its lib.sh is the one place that says so)."""
    script = f'source {ROOT / "deploy/local/lib.sh"} && printf %s "$FERRETDB_BIN"'
    return Path(subprocess.run(["bash", "-c", script], check=True, capture_output=True, text=True).stdout)


def _run(argv: list[str], what: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{what} failed ({done.returncode}): {done.stderr.strip() or done.stdout.strip()}")


def _wait_ready(url: str, ferretdb: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if ferretdb.poll() is not None:
            raise RuntimeError(
                f"FerretDB exited ({ferretdb.returncode}): {log.read_text(errors='replace')[-2000:]}"
            )
        client: MongoClient[dict[str, object]] = MongoClient(url, serverSelectionTimeoutMS=500)
        try:
            answered = "ferretdbVersion" in client.admin.command("buildInfo")
            if answered and ferretdb.poll() is None:  # ours: not another server on a raced port
                return
            raise RuntimeError(
                f"{url} is not the FerretDB started here: {log.read_text(errors='replace')[-2000:]}"
            )
        except PyMongoError:
            time.sleep(0.2)
        finally:
            client.close()
    raise RuntimeError(f"FerretDB on PostgreSQL not ready after {READY_TIMEOUT_S}s: {log}")


@contextmanager
def ferretdb_on_postgresql(pool_max_conns: int | None = None) -> Iterator[str]:
    """A MongoDB URL served by FerretDB on a fresh PostgreSQL cluster. `pool_max_conns` left
    unset keeps FerretDB's own default (50), the pool its users run with. PostgreSQL listens on
    its Unix socket only (no port to race for); both servers are stopped on every way out."""
    bindir = postgres_bin()
    if bindir is None:
        unavailable("PostgreSQL's server binaries are needed (scripts/setup.sh installs them as root)")
    ferretdb = ferretdb_binary()
    if not os.access(ferretdb, os.X_OK):
        unavailable(f"FerretDB is needed at {ferretdb}: run deploy/local/up.sh once to build it")
    as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    home = Path(tempfile.mkdtemp(prefix="cairn-ferretdb-pg."))
    pg_dir = home / "postgres"
    data, pg_port, mongo_port = pg_dir / "data", free_port(), free_port()
    pg_ctl = [*as_postgres, str(bindir / "pg_ctl"), "-D", str(data)]
    server: subprocess.Popen[bytes] | None = None
    try:
        home.chmod(0o755)  # the postgres user reaches its directory through it
        pg_dir.mkdir()
        if as_postgres:
            shutil.chown(pg_dir, "postgres", "postgres")
        _run(
            [*as_postgres, str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust"], "initdb"
        )
        options = f"-c listen_addresses='' -p {pg_port} -k {pg_dir} -c fsync=off"
        start = [*pg_ctl, "-l", str(pg_dir / "postgres.log"), "-o", options, "-w", "-t", "60", "start"]
        _run(start, "pg_ctl start")
        postgres_url = f"postgres://postgres@/postgres?host={pg_dir}&port={pg_port}"
        if pool_max_conns is not None:
            postgres_url += f"&pool_max_conns={pool_max_conns}"
        log = home / "ferretdb.log"
        with log.open("wb") as out:
            server = subprocess.Popen(
                [
                    str(ferretdb),
                    "--handler=postgresql",
                    f"--postgresql-url={postgres_url}",
                    f"--listen-addr=127.0.0.1:{mongo_port}",
                    f"--state-dir={home}",
                    "--debug-addr=-",
                    "--telemetry=disable",
                    "--log-level=warn",
                ],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        url = f"mongodb://127.0.0.1:{mongo_port}/"
        _wait_ready(url, server, log)
        yield url
    finally:
        if server is not None and server.poll() is None:
            server.send_signal(signal.SIGKILL)
            server.wait()
        if (data / "postmaster.pid").exists():  # started, or half-started: stop it either way
            with suppress(RuntimeError):
                _run([*pg_ctl, "-m", "immediate", "-w", "stop"], "pg_ctl stop")
        shutil.rmtree(home, ignore_errors=True)
