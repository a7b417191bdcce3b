"""A service started while its MongoDB-protocol server or Kafka does not answer waits for it,
with backoff, instead of exiting (a restarted service under a wedged or restarting server), and
a stop request cuts that wait short."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from pymongo import AsyncMongoClient

from tests.devserver import free_port
from tests.e2e.cluster import Process

pytestmark = [pytest.mark.integration, pytest.mark.e2e]


class Forwarder:
    """A TCP port that forwards to the real server once `open()` is called; until then nothing
    listens there, as if the server were down."""

    def __init__(self, target: str) -> None:
        """`target`: a mongodb:// URL or a Kafka host:port (Kafka clients only bootstrap
        through it: the metadata they get back names the broker's own address)."""
        host, port = target.split("://", 1)[-1].split("/", 1)[0].split(",")[0].rsplit(":", 1)
        self.target = (host, int(port))
        self.port = free_port()
        self.server: asyncio.Server | None = None

    async def open(self) -> None:
        self.server = await asyncio.start_server(self._pipe_both_ways, "127.0.0.1", self.port)

    async def _pipe_both_ways(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.target)

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            with contextlib.suppress(ConnectionError):
                while data := await source.read(65536):
                    sink.write(data)
                    await sink.drain()
            sink.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()


async def test_a_service_waits_for_an_unreachable_database_then_runs(
    mongo_url: str, kafka_bootstrap: str, unique: str, tmp_path: Path
) -> None:
    forwarder = Forwarder(mongo_url)
    env = {
        "CAIRN_KAFKA_BOOTSTRAP": kafka_bootstrap,
        "CAIRN_MONGO_URL": f"mongodb://127.0.0.1:{forwarder.port}/",
        "CAIRN_MONGO_DB": f"cairn_startup_{unique}",
        "CAIRN_TOPIC_PREFIX": f"startup{unique}.",
        "CAIRN_MONGO_TIMEOUT_MS": "1500",
        "CAIRN_SWEEPER_INTERVAL_S": "0.5",
        **{k: v for k, v in os.environ.items() if not k.startswith("CAIRN_")},
    }
    sweeper = Process("sweeper", [sys.executable, "-m", "cairn", "run", "sweeper"], env, tmp_path)
    sweeper.start()
    try:
        deadline = time.monotonic() + 30
        while "Retrying" not in sweeper.log_tail(50) or sweeper.log_tail(200).count("Retrying") < 2:
            assert sweeper.alive(), f"the sweeper exited instead of waiting:\n{sweeper.log_tail()}"
            assert time.monotonic() < deadline, f"no retry logged:\n{sweeper.log_tail()}"
            await asyncio.sleep(0.2)
        await forwarder.open()
        # The store opened once its indexes exist in the (fresh) database.
        client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(mongo_url)
        try:
            deadline = time.monotonic() + 60
            while "updatedAt_-1" not in await client[env["CAIRN_MONGO_DB"]]["workflows"].index_information():
                assert sweeper.alive(), f"the sweeper exited:\n{sweeper.log_tail()}"
                assert time.monotonic() < deadline, f"the store never opened:\n{sweeper.log_tail()}"
                await asyncio.sleep(0.3)
            await asyncio.sleep(1.5)  # a few sweeps on the open store
            assert sweeper.alive(), sweeper.log_tail()
            assert sweeper.stop() == 0, sweeper.log_tail()
            await client.drop_database(env["CAIRN_MONGO_DB"])
        finally:
            await client.close()
    finally:
        if sweeper.alive():
            sweeper.kill()
        await forwarder.close()


def _service_env(mongo_url: str, kafka_bootstrap: str, unique: str, **changes: str) -> dict[str, str]:
    return {
        "CAIRN_KAFKA_BOOTSTRAP": kafka_bootstrap,
        "CAIRN_MONGO_URL": mongo_url,
        "CAIRN_MONGO_DB": f"cairn_startup_{unique}",
        "CAIRN_TOPIC_PREFIX": f"startup{unique}.",
        **changes,
        **{k: v for k, v in os.environ.items() if not k.startswith("CAIRN_")},
    }


async def _until_retried(process: Process, times: int = 2) -> None:
    deadline = time.monotonic() + 60
    while process.log_tail(200).count("Retrying") < times:
        assert process.alive(), f"{process.name} exited instead of waiting:\n{process.log_tail()}"
        assert time.monotonic() < deadline, f"no retry logged:\n{process.log_tail()}"
        await asyncio.sleep(0.2)


async def test_a_service_waits_for_an_unreachable_kafka_then_runs(
    mongo_url: str, kafka_bootstrap: str, unique: str, tmp_path: Path
) -> None:
    from aiokafka.admin import AIOKafkaAdminClient

    forwarder = Forwarder(kafka_bootstrap)
    env = _service_env(
        mongo_url, kafka_bootstrap, unique, CAIRN_KAFKA_BOOTSTRAP=f"127.0.0.1:{forwarder.port}"
    )
    decider = Process("decider", [sys.executable, "-m", "cairn", "run", "decider"], env, tmp_path)
    decider.start()
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        await _until_retried(decider)
        assert "Kafka is not reachable" in decider.log_tail(50)
        await forwarder.open()
        # Once through, the decider creates its topics and consumes.
        deadline = time.monotonic() + 60
        while f"startup{unique}.workflow.start" not in await admin.list_topics():
            assert decider.alive(), f"the decider exited:\n{decider.log_tail()}"
            assert time.monotonic() < deadline, f"the decider never reached Kafka:\n{decider.log_tail()}"
            await asyncio.sleep(0.3)
        await asyncio.sleep(1)
        assert decider.alive(), decider.log_tail()
        assert decider.stop() == 0, decider.log_tail()
    finally:
        if decider.alive():
            decider.kill()
        await admin.close()
        await forwarder.close()


@pytest.mark.parametrize("waiting_for", ["kafka", "mongo"])
async def test_sigterm_while_waiting_for_a_server_stops_at_once(
    mongo_url: str, kafka_bootstrap: str, unique: str, tmp_path: Path, waiting_for: str
) -> None:
    """An orchestrator stopping a pod that never came up must not wait out its grace period."""
    nowhere = f"127.0.0.1:{free_port()}"
    changes = (
        {"CAIRN_KAFKA_BOOTSTRAP": nowhere}
        if waiting_for == "kafka"
        else {"CAIRN_MONGO_URL": f"mongodb://{nowhere}/", "CAIRN_MONGO_TIMEOUT_MS": "1000"}
    )
    env = _service_env(mongo_url, kafka_bootstrap, unique, **changes)
    timer = Process("timer", [sys.executable, "-m", "cairn", "run", "timer"], env, tmp_path)
    timer.start()
    try:
        await _until_retried(timer, times=1)
        # Killed (None) if still waiting after 10 s; the default CAIRN_STARTUP_RETRY_S is 300.
        assert timer.stop(timeout=10) == 0, timer.log_tail()
        assert "cairn timer stopped while starting" in timer.log_tail(5)
    finally:
        if timer.alive():
            timer.kill()
