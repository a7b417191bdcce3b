"""Issue 12 point 2 on a real `cairn dev`: with the test hook CAIRN_FAULT_POISON_MARKER, every
consumer — decider, scheduler, timer, system worker, the api's hand-out to HTTP workers — fails
on a message holding the marker. Each such message is dead-lettered after the bound, with the
reason and the original bytes, its partition moves on (a trickle of normal workflows completes
exactly meanwhile), and `cairn deadletter ls / show / replay` finds and resends it."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from shared.adapters.embedded_bus import EmbeddedBus
from shared.ports.bus import Outgoing
from shared.topics import Topics
from tests.devserver import SERVER_VARIABLES, DevServer
from tests.trickle import TRICKLE, Trickle

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

MARKER = "POISON-HOOK-7f3a"
HAND_OUT_TYPE = "poison_http_type"


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    server = DevServer(tmp_path_factory.mktemp("poison-dev"), None, CAIRN_FAULT_POISON_MARKER=MARKER)
    server.start()
    try:
        yield server
    finally:
        assert server.process.stop() == 0, server.process.log_tail()


@pytest.fixture
async def api(dev: DevServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=dev.url, timeout=30) as client:
        yield client


def cairn(dev: DevServer, *args: str) -> Any:
    env = {k: v for k, v in dev.env.items() if k not in SERVER_VARIABLES} | {"COLUMNS": "200"}
    done = subprocess.run(
        [sys.executable, "-m", "cairn", *args, "--server", dev.url],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(done.stdout) if "--json" in args else done.stdout


async def dead_letters(dev: DevServer, at_least: int, within_s: float = 30) -> list[dict[str, Any]]:
    deadline = time.monotonic() + within_s
    while True:
        letters: list[dict[str, Any]] = await asyncio.to_thread(cairn, dev, "deadletter", "ls", "--json")
        if len(letters) >= at_least:
            return letters
        assert time.monotonic() < deadline, f"only {len(letters)} dead letters: {letters}"
        await asyncio.sleep(0.5)


async def test_every_consumer_dead_letters_a_message_it_keeps_failing_on(
    dev: DevServer, api: httpx.AsyncClient
) -> None:
    topics = Topics()
    assert (await api.post("/api/metadata/workflow", json=TRICKLE)).status_code == 200
    # The api joins a task type's group when an HTTP worker first polls it.
    assert (await api.get(f"/api/tasks/poll/batch/{HAND_OUT_TYPE}", params={"timeout": 0})).status_code == 200
    trickle = Trickle(api)
    running = asyncio.create_task(trickle.run())
    await asyncio.sleep(0.5)
    poisoned = {
        topics.workflow_start: "decider",
        topics.task_dispatch: "scheduler",
        topics.timer_request: "timer",
        topics.tasks("HTTP"): "workers.HTTP",
        topics.tasks(HAND_OUT_TYPE): f"workers.{HAND_OUT_TYPE}",
    }
    bus = EmbeddedBus(str(dev.db))  # another process publishing into cairn dev's file
    try:
        await bus.publish(
            [
                Outgoing(topic, json.dumps({"hook": MARKER, "for": group}).encode(), "wf-poison")
                for topic, group in poisoned.items()
            ]
        )
    finally:
        await bus.stop()

    letters = await dead_letters(dev, len(poisoned))
    took = await trickle.finish()
    running.cancel()
    assert {letter["sourceTopic"] for letter in letters} == set(poisoned)
    for letter in letters:
        group = poisoned[letter["sourceTopic"]]
        assert f"cairn.{group} failed 3 times on it" in letter["reason"], letter
        assert "PoisonedByTestHookError" in letter["reason"]
        assert json.loads(letter["valueText"]) == {"hook": MARKER, "for": group}
    print(f"\ntrickle beside poisoned consumers: {len(took)} workflows, max {max(took) * 1000:.0f} ms")
    assert max(took) < 10

    # show and replay: the replayed original fails again (the hook is still on) and comes back
    first = letters[-1]
    shown = await asyncio.to_thread(cairn, dev, "deadletter", "show", first["id"], "--json")
    assert shown == first
    replayed = await asyncio.to_thread(cairn, dev, "deadletter", "replay", first["id"], "--json")
    assert replayed["replayedTo"] == first["sourceTopic"]
    again = await dead_letters(dev, len(poisoned) + 1)
    assert again[0]["headers"].get("cairn-replayed-from") == first["id"]
    assert again[0]["valueText"] == first["valueText"]
    table = await asyncio.to_thread(cairn, dev, "deadletter", "ls")
    assert first["id"] in table and "failed 3 times" in table
