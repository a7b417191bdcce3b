"""Restate as a peer of `python -m benchmarks.peers`, family W1-engine: a step is a `ctx.run` journaled
side effect inside the service handler, so each step is one round trip service -> restate-server ->
durable log -> service, with no separate worker process.

Installed from the registries this machine reaches: restate-server from npm (the platform package
ships the Rust binary), the Python SDK and hypercorn from PyPI into a venv of its own. Restate talks
HTTP/2 cleartext (prior knowledge) to a deployment and then keeps one bidirectional stream per
invocation; over HTTP/1.1 it would fall back to request/response mode and re-invoke the handler
after every step, which is not how Restate is run, so the service is served by hypercorn (h2c), as
Restate's own Python templates do. The harness calls the ingress with httpx over HTTP/1.1: a
request/response call returns when the invocation has completed, which is the end-to-end time.

restate-server asks GitHub for its latest release once at start (server/src/main.rs; no setting turns
it off): without a network it logs one `octocrab` error, harmless. Its Scarf telemetry is disabled.
"""

from __future__ import annotations

import os
import platform
import shutil
import signal
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx

from benchmarks.client_pools import ClientPools
from benchmarks.peers.common import CACHE, PeerUnavailable, ProcessCpu, Session, run, until
from benchmarks.w1_w2 import WORKFLOW_TIMEOUT_S, written_kb
from tests.devserver import free_port
from tests.e2e.cluster import Process

SERVER_VERSION = "1.7.12"
SDK_VERSION = "1.3.0"
HYPERCORN_VERSION = "0.18.0"
ARCH = {"x86_64": "x64", "aarch64": "arm64"}

DURABILITY = (
    f"Restate {SERVER_VERSION}, one node, default configuration: every ctx.run result is appended to "
    "Bifrost (replicated loglet, replication 1, on this node's log-server) before the service is told "
    "it is stored; the log-server commits each write batch to RocksDB with the WAL fsynced "
    "(log-server.rocksdb-disable-wal-fsync=false: one fsync per batch, concurrent appends grouped); "
    "the partition store (RocksDB) is written without WAL, being rebuilt from the log"
)

# The service: one Restate service `Bench` whose handlers bench_k{1,3,10} run k no-op `ctx.run`
# steps in sequence; written into the run directory and run with the peer's own venv. Served by
# hypercorn in this one process (its `workers` mode would spawn a child); SIGINT stops it (the
# SDK takes over SIGTERM to drain invocations).
SERVICE = """
import asyncio
import sys

import restate
from hypercorn.asyncio import serve
from hypercorn.config import Config

bench = restate.Service("Bench")


def step(n: int) -> int:
    return n


def chain(k: int):
    async def handler(ctx: restate.Context, i: int) -> int:
        for n in range(k):
            await ctx.run_typed(f"s{n}", step, restate.RunOptions(), n)
        return i

    return handler


for k in (1, 3, 10):
    bench.handler(name=f"bench_k{k}")(chain(k))

app = restate.app([bench])

if __name__ == "__main__":
    config = Config()
    config.bind = [f"127.0.0.1:{sys.argv[1]}"]
    asyncio.run(serve(app, config))
"""


def server_config(data_dir: Path, node: int, ingress: int, admin: int) -> str:
    """Everything on 127.0.0.1 and on free ports; no telemetry, no web UI, quiet logs. Storage and
    log settings are left at their defaults (they are what DURABILITY describes)."""
    return f"""
base-dir = "{data_dir}"
bind-address = "127.0.0.1:{node}"
disable-telemetry = true
shutdown-timeout = "10s"
log-filter = "warn"
log-disable-ansi-codes = true

[ingress]
bind-address = "127.0.0.1:{ingress}"

[admin]
bind-address = "127.0.0.1:{admin}"
disable-web-ui = true
"""


class RestateDriver:
    """bench_k{k} is `POST /Bench/bench_k{k}` on the ingress, which answers once it has completed."""

    def __init__(self, ingress_url: str, processes: ProcessCpu, server_pid: int) -> None:
        self.pools = ClientPools(ingress_url, WORKFLOW_TIMEOUT_S)
        self.processes = processes
        self.server_pid = server_pid

    async def close(self) -> None:
        await self.pools.aclose()

    async def run_one(self, name: str, i: int) -> float:
        started = time.perf_counter()
        response = await self.pools.pick(i).post(f"/Bench/{name}", json=i)
        elapsed = time.perf_counter() - started
        if response.status_code != 200:
            raise AssertionError(f"Restate {name}({i}): {response.status_code} {response.text[:300]}")
        return elapsed

    def cpu(self) -> dict[str, float]:
        return self.processes.cpu()

    async def work(self) -> dict[str, float]:
        """KB restate-server caused to be written (log-server WAL and memtable flushes)."""
        return {"KB written restate-server": written_kb(self.server_pid)}


class RestatePeer:
    name = "restate"

    def __init__(self) -> None:
        self.home = CACHE / "restate"
        arch = ARCH.get(platform.machine(), platform.machine())
        package = self.home / "npm" / "node_modules" / "@restatedev" / f"restate-server-linux-{arch}"
        self.binary = package / "bin" / "restate-server"
        self.python = self.home / "venv" / "bin" / "python"
        self.marker = self.home / "installed"
        self.versions = (
            f"restate-server {SERVER_VERSION} restate-sdk {SDK_VERSION} hypercorn {HYPERCORN_VERSION}"
        )

    def install(self) -> None:
        """npm's restate-server (binary in its platform package; install scripts skipped: the only
        one is a download counter) and a venv with the SDK and hypercorn. A marker naming the
        versions makes a second call a no-op."""
        if self.marker.exists() and self.marker.read_text() == self.versions:
            return
        if sys.platform != "linux" or platform.machine() not in ARCH:
            raise PeerUnavailable(f"npm ships restate-server for Linux x64/arm64, not {platform.machine()}")
        npm = shutil.which("npm")
        if npm is None:
            raise PeerUnavailable("npm is not installed (apt-get install npm)")
        self.home.mkdir(parents=True, exist_ok=True)
        package = f"@restatedev/restate-server@{SERVER_VERSION}"
        flags = ["--ignore-scripts", "--no-audit", "--no-fund"]
        run([npm, "install", "--prefix", str(self.home / "npm"), *flags, package], f"npm install {package}")
        if not self.binary.exists():
            raise PeerUnavailable(f"npm install {package} brought no {self.binary}")
        run([str(self.binary), "--version"], "restate-server --version")
        if not self.python.exists():
            run([sys.executable, "-m", "venv", str(self.home / "venv")], "python -m venv (restate)")
        pins = [f"restate-sdk=={SDK_VERSION}", f"hypercorn=={HYPERCORN_VERSION}"]
        run([str(self.python), "-m", "pip", "install", "--quiet", *pins], "pip install " + " ".join(pins))
        self.marker.write_text(self.versions)

    @asynccontextmanager
    async def running(self, run_dir: Path) -> AsyncIterator[Session]:
        """restate-server and the service, the deployment registered; everything stopped on exit."""
        ports: list[int] = []
        while len(ports) < 4:
            ports += [port for port in [free_port()] if port not in ports]
        node, ingress, admin, service_port = ports
        config = run_dir / "restate.toml"
        config.write_text(server_config(run_dir / "restate-data", node, ingress, admin))
        script = run_dir / "restate_service.py"
        script.write_text(SERVICE)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RESTATE_", "RUST_LOG"))}
        argv = [str(self.binary), "--config-file", str(config), "--listen-mode", "tcp", "--no-logo"]
        server = Process("restate-server", argv, env, run_dir)
        service = Process("service", [str(self.python), str(script), str(service_port)], env, run_dir)
        admin_url, ingress_url = f"http://127.0.0.1:{admin}", f"http://127.0.0.1:{ingress}"
        driver: RestateDriver | None = None
        try:
            server.start()
            service.start()
            async with httpx.AsyncClient(timeout=10) as client:

                async def admin_up() -> bool:
                    return (await client.get(f"{admin_url}/health")).status_code == 200

                async def registered() -> bool:
                    body = {"uri": f"http://127.0.0.1:{service_port}"}
                    return (await client.post(f"{admin_url}/deployments", json=body)).status_code < 300

                async def callable_() -> bool:  # the new deployment reaches the ingress shortly after
                    return (await client.post(f"{ingress_url}/Bench/bench_k1", json=0)).status_code == 200

                await until(admin_up, "restate-server's admin API", server, service)
                await until(registered, "registering the service deployment", server, service)
                await until(callable_, "a first call of Bench/bench_k1 through the ingress", server, service)
            assert server.popen is not None and service.popen is not None
            processes = ProcessCpu({"restate-server": server.popen.pid, "service": service.popen.pid})
            driver = RestateDriver(ingress_url, processes, server.popen.pid)
            yield Session(driver=driver, family="W1-engine", durability=DURABILITY)
        finally:
            if driver is not None:
                await driver.close()
            if service.popen is not None and service.alive():
                service.popen.send_signal(signal.SIGINT)
            service.stop(timeout=10)
            server.stop(timeout=20)
