"""DBOS Transact as a peer of `python -m benchmarks.peers`, family W1-engine: a DBOS step runs inside the
process that runs its workflow, and is made durable by its checkpoint (the step's output committed to
the system database, PostgreSQL, before the workflow goes on); there is no dispatch hop.

PostgreSQL is Debian's package, run as a throwaway cluster of its own in the run directory (as the
`postgres` user: it refuses to run as root) with the server's default durability; DBOS comes from
PyPI into a venv of its own, since the harness's venv must not get it. DBOS is a library, so the app
process that hosts the workflows is also the load generator: it reads requests as JSON lines on
stdin, starts each workflow with DBOS's async API (async workflows and steps run as tasks on the
app's event loop, their database calls in DBOS's thread pool), times it from start to result and
answers on stdout. The harness's Driver only forwards lines over the pipes.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Any

from benchmarks.peers.common import CACHE, PeerUnavailable, ProcessCpu, Session, run
from benchmarks.w1_w2 import WORKFLOW_TIMEOUT_S
from tests.devserver import free_port

DBOS_VERSION = "3.4.0"
PG_ROOT = Path("/usr/lib/postgresql")

# The app: bench_k{k} is an async DBOS workflow awaiting k no-op async steps in sequence. Requests
# {"id", "name", "i"} come on stdin, one per line, and each runs as its own task, so as many are in
# flight as the harness sends; answers {"id", "s"} (end-to-end seconds) or {"id", "error"} go to the
# original stdout, kept for them alone (fd 1 is pointed at the log, stderr, before DBOS is imported,
# so that nothing DBOS or a library prints can corrupt the protocol). EOF on stdin ends it.
APP = """
import asyncio
import json
import os
import sys
import time

ANSWERS = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)

from dbos import DBOS, DBOSConfig  # noqa: E402


@DBOS.step()
async def noop(n: int) -> int:
    return n


def chain(k: int):
    async def workflow(i: int) -> int:
        for n in range(k):
            await noop(n)
        return i

    workflow.__name__ = workflow.__qualname__ = f"bench_k{k}"
    return DBOS.workflow(name=f"bench_k{k}")(workflow)


WORKFLOWS = {f"bench_k{k}": chain(k) for k in (1, 3, 10)}


async def main(url: str) -> None:
    config: DBOSConfig = {"name": "cairn-bench", "system_database_url": url, "log_level": "WARNING"}
    DBOS(config=config)
    DBOS.launch()
    reader = asyncio.StreamReader()
    loop = asyncio.get_running_loop()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    tasks = set()

    def answer(message: dict) -> None:
        ANSWERS.write(json.dumps(message) + "\\n")
        ANSWERS.flush()

    async def one(request: dict) -> None:
        started = time.perf_counter()
        try:
            handle = await DBOS.start_workflow_async(WORKFLOWS[request["name"]], request["i"])
            await handle.get_result()
            answer({"id": request["id"], "s": time.perf_counter() - started})
        except Exception as error:
            answer({"id": request["id"], "error": repr(error)})

    answer({"ready": True})
    while line := await reader.readline():
        task = asyncio.create_task(one(json.loads(line)))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    if tasks:
        await asyncio.wait(tasks, timeout=30)
    DBOS.destroy()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
"""


def postgres_bin() -> Path | None:
    """The newest installed PostgreSQL's bin directory (Debian: /usr/lib/postgresql/<major>/bin)."""
    found = [d for d in PG_ROOT.glob("*/bin") if (d / "initdb").exists() and (d / "pg_ctl").exists()]
    return max(found, key=lambda d: [int(n) for n in d.parent.name.split(".") if n.isdigit()], default=None)


def cluster_dir(run_dir: Path, owned_by_postgres: bool) -> Path:
    """run_dir/postgres, for the cluster and its log and socket; when we are root it belongs to the
    `postgres` user, who must also be able to reach it through run_dir."""
    pg_dir = run_dir / "postgres"
    pg_dir.mkdir()
    if owned_by_postgres:
        run_dir.chmod(0o755)
        shutil.chown(pg_dir, "postgres", "postgres")
    return pg_dir


def tail(log: Path, lines: int = 20) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


class DbosDriver:
    """Sends one request line per workflow to the app and awaits the answer with the same id."""

    def __init__(self, app: asyncio.subprocess.Process, processes: ProcessCpu) -> None:
        self.app = app
        self.processes = processes
        self.waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.sent = 0
        self.lost: str | None = None
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        """Hand each answer to its waiter; when the app's stdout ends, fail whoever still waits."""
        assert self.app.stdout is not None
        while line := await self.app.stdout.readline():
            answer = json.loads(line)
            future = self.waiting.pop(answer["id"], None)
            if future is not None and not future.done():
                future.set_result(answer)
        self.lost = f"the DBOS app exited (exit {await self.app.wait()})"
        for future in self.waiting.values():
            if not future.done():
                future.set_exception(AssertionError(self.lost))
        self.waiting.clear()

    async def run_one(self, name: str, i: int) -> float:
        if self.lost is not None:
            raise AssertionError(self.lost)
        assert self.app.stdin is not None
        self.sent += 1
        request_id = self.sent
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.waiting[request_id] = future
        try:
            self.app.stdin.write((json.dumps({"id": request_id, "name": name, "i": i}) + "\n").encode())
            await self.app.stdin.drain()
            answer = await asyncio.wait_for(future, WORKFLOW_TIMEOUT_S)
        finally:
            self.waiting.pop(request_id, None)
        if "error" in answer:
            raise AssertionError(f"DBOS {name}({i}): {answer['error']}")
        return float(answer["s"])

    def cpu(self) -> dict[str, float]:
        return self.processes.cpu()

    async def work(self) -> dict[str, float]:
        return {}

    async def close(self) -> None:
        """EOF on stdin: the app finishes what is in flight, destroys DBOS and exits; killed after
        30 s if it has not."""
        if self.app.stdin is not None and not self.app.stdin.is_closing():
            self.app.stdin.close()
        try:
            await asyncio.wait_for(self.app.wait(), 30)
        except TimeoutError:
            with suppress(ProcessLookupError):
                self.app.kill()
            await self.app.wait()
        self.reader.cancel()
        with suppress(asyncio.CancelledError):
            await self.reader


class DbosPeer:
    name = "dbos"

    def __init__(self) -> None:
        self.home = CACHE / "dbos"
        self.python = self.home / "venv" / "bin" / "python"
        self.marker = self.home / "installed"

    def install(self) -> None:
        """PostgreSQL from Debian when no server binaries are installed, and a venv with DBOS. A
        marker naming the DBOS version makes a second call a no-op."""
        if postgres_bin() is None:
            if shutil.which("apt-get") is None or os.geteuid() != 0:
                raise PeerUnavailable("PostgreSQL is not installed (as root: apt-get install postgresql)")
            env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
            run(["apt-get", "update"], "apt-get update", env=env)
            run(["apt-get", "install", "-y", "postgresql"], "apt-get install postgresql", env=env)
            if postgres_bin() is None:
                raise PeerUnavailable(f"apt-get install postgresql brought no initdb under {PG_ROOT}")
        if self.marker.exists() and self.marker.read_text() == DBOS_VERSION:
            return
        self.home.mkdir(parents=True, exist_ok=True)
        if not self.python.exists():
            run([sys.executable, "-m", "venv", str(self.home / "venv")], "python -m venv (dbos)")
        pin = f"dbos=={DBOS_VERSION}"
        run([str(self.python), "-m", "pip", "install", "--quiet", pin], f"pip install {pin}")
        self.marker.write_text(DBOS_VERSION)

    @asynccontextmanager
    async def running(self, run_dir: Path) -> AsyncIterator[Session]:
        """A fresh PostgreSQL cluster and the DBOS app; both stopped on exit (the app first)."""
        bindir = postgres_bin()
        if bindir is None:
            raise PeerUnavailable("PostgreSQL is not installed")
        as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        pg_dir, port = cluster_dir(run_dir, owned_by_postgres=bool(as_postgres)), free_port()
        data = pg_dir / "data"
        pg_ctl = [*as_postgres, str(bindir / "pg_ctl"), "-D", str(data)]
        app: asyncio.subprocess.Process | None = None
        driver: DbosDriver | None = None
        postmaster: int | None = None
        try:
            initdb = [*as_postgres, str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust"]
            await asyncio.to_thread(run, [*initdb, "-E", "UTF8"], "initdb")
            options = f"-c listen_addresses=127.0.0.1 -p {port} -k {pg_dir}"
            start = [*pg_ctl, "-l", str(pg_dir / "postgres.log"), "-o", options, "-w", "-t", "60", "start"]
            await asyncio.to_thread(run, start, "pg_ctl start")
            postmaster = int((data / "postmaster.pid").read_text().split()[0])
            durability = await self._durability(bindir, port, data)
            script = run_dir / "dbos_app.py"
            script.write_text(APP)
            url = f"postgresql://postgres@127.0.0.1:{port}/dbos_bench"
            with (run_dir / "dbos-app.log").open("ab") as log:
                app = await asyncio.create_subprocess_exec(
                    str(self.python), str(script), url, cwd=run_dir, stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE, stderr=log,
                )  # fmt: skip
            await self._ready(app, run_dir / "dbos-app.log")
            driver = DbosDriver(app, ProcessCpu({"postgres": postmaster, "app": app.pid}))
            yield Session(driver=driver, family="W1-engine", durability=durability)
        finally:
            if driver is not None:
                await driver.close()
            elif app is not None and app.returncode is None:
                app.send_signal(signal.SIGKILL)
                await app.wait()
            if postmaster is not None:
                try:
                    await asyncio.to_thread(run, [*pg_ctl, "-m", "fast", "-w", "stop"], "pg_ctl stop")
                except PeerUnavailable:  # immediate shutdown: nothing of ours may outlive the run
                    with suppress(ProcessLookupError):
                        os.kill(postmaster, signal.SIGQUIT)

    @staticmethod
    async def _ready(app: asyncio.subprocess.Process, log: Path) -> None:
        """Wait for the app's `{"ready": true}` (DBOS launched: schema created, pool open)."""
        assert app.stdout is not None
        try:
            ready = json.loads(await asyncio.wait_for(app.stdout.readline(), 120)).get("ready")
        except (TimeoutError, ValueError):
            ready = False
        if not ready:
            raise PeerUnavailable(f"the DBOS app did not start (log {log}):\n{tail(log)}")

    @staticmethod
    async def _durability(bindir: Path, port: int, data: Path) -> str:
        """The server's own settings, as it reports them, and the file system the WAL is on (where
        an fsync on tmpfs would be free)."""
        query = (
            "SELECT current_setting('server_version'), current_setting('fsync'), "
            "current_setting('synchronous_commit'), current_setting('wal_sync_method'), "
            "current_setting('full_page_writes')"
        )
        psql = [str(bindir / "psql"), "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "-At"]
        row = await asyncio.to_thread(run, [*psql, "-F", "|", "-c", query], "psql current_setting")
        version, fsync, commit, method, fpw = row.strip().split("|")
        fs = (await asyncio.to_thread(run, ["stat", "-f", "-c", "%T", str(data)], "stat -f")).strip()
        return (
            f"DBOS {DBOS_VERSION} on PostgreSQL {version}, one local server, default settings: "
            f"fsync={fsync}, synchronous_commit={commit}, wal_sync_method={method}, "
            f"full_page_writes={fpw}, data on {fs}; each step's output is committed (WAL flushed) in its "
            "own transaction, after a replay-check read, before the workflow goes on; concurrent "
            "commits share WAL flushes. DBOS defaults: system-database pool of 20 connections"
        )
