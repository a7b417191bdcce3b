"""Conductor's failure matrix, server rows: the Kafka broker, then the MongoDB-protocol server, is
killed (SIGKILL) in the middle of a run, kept down for a while and restarted on the same data
dir and port. The services must ride out the outage by retrying (no service process may exit),
make no progress while the server is down, resume once it is back, and lose nothing: every
workflow completes with its exact output and each step ran once in the workflow's view.

Each test runs on its own Kafka + FerretDB pair (tests/e2e/private_servers.py): taking down the
shared servers would break every other test.

Workflows are started in two waves so that the outage always catches some in the middle: the
second wave starts once the first has completions, one workflow every 0.03 s, and the server dies
once all of it is started and one of it has finished its first step. The second wave is then
spread over its steps, and its later workflows have all three to go, each needing a round trip
through Kafka and a commit: they cannot finish while either server is down.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from pathlib import Path

import pytest

from shared.adapters.kafka_bus import KafkaBus
from shared.models.runtime import TaskStatus
from shared.ports.bus import Received
from tests.e2e.cluster import Cluster
from tests.e2e.definitions import PIPELINE, TASK_DEFS
from tests.e2e.private_servers import PrivateServers
from tests.e2e.test_services_e2e import assert_all_completed_exactly
from tests.waiting import until

pytestmark = [pytest.mark.integration, pytest.mark.e2e, pytest.mark.timeout(240)]

WAVE = 15  # workflows per wave; two waves
# SIGKILL the server. False: a graceful stop (SIGTERM, as down.sh does); FerretDB then serves its
# open connections for a few more seconds, long enough here for every pipeline to finish before
# it is gone (the tests then fail with "nothing tested").
KILL = True
QUIET_S = 6.0  # once the outage has settled, this long with no progress at all
RESUME_WITHIN_S = 60.0
FINISH_WITHIN_S = 120.0  # from the first progress after the restart to every workflow ended


@pytest.fixture
def servers(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[PrivateServers]:
    if shutil.which("java") is None:
        message = "Java 17+ is needed to start a private Kafka (deploy/local/up.sh)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    servers = PrivateServers(tmp_path / "servers")
    request.addfinalizer(servers.close)  # registered first: a half-started pair is stopped too
    servers.start()
    yield servers


@pytest.fixture
async def cluster(servers: PrivateServers, unique: str, tmp_path: Path) -> AsyncIterator[Cluster]:
    cluster = Cluster(servers.kafka_bootstrap, servers.mongo_url, unique, tmp_path)
    await cluster.start()
    yield cluster
    codes = await cluster.stop()
    unclean = {name: code for name, code in codes.items() if code != 0}
    assert not unclean, f"services did not stop cleanly on SIGTERM: {unclean}\n{cluster.diagnostics()}"


async def start_wave(cluster: Cluster, first: int, count: int, gap_s: float = 0) -> list[str]:
    """Pipelines `first`..`first + count - 1`, numbered as tests/e2e/definitions.expected_output
    expects (the same ids and inputs as test_services_e2e.start_pipelines), `gap_s` apart."""
    ids: list[str] = []
    for i in range(first, first + count):
        if ids:
            await asyncio.sleep(gap_s)
        ids.append(
            await cluster.client.start_workflow(
                "e2e_pipeline",
                {"n": i, "add": 2, "label": f"L{i}"},
                workflow_id=f"{cluster.topics.prefix}wf-{i}",
            )
        )
    return ids


async def steps_done(cluster: Cluster, ids: list[str]) -> Counter[int]:
    """How many workflows have completed 0, 1, 2 or 3 steps (-1: not created yet)."""
    documents = await cluster.store.load_workflows(ids)
    return Counter(
        sum(task.status is TaskStatus.COMPLETED for task in documents[wf].state.tasks.values())
        if wf in documents
        else -1
        for wf in ids
    )


async def run_until_mid_workflow(cluster: Cluster) -> list[str]:
    """Two waves of pipelines, returned once the second wave is under way (see the module doc)."""
    await cluster.register(*TASK_DEFS, PIPELINE)
    first = await start_wave(cluster, 0, WAVE)

    async def first_wave_completing() -> bool:
        return await cluster.count_completed(first) >= 5

    await until("5 first-wave workflows completed", first_wave_completing, cluster)
    # Spread over about one pipeline's run (~0.3-0.5 s on Kafka): with a longer spread the early
    # starts finish before the kill (seen: 26 of 30 done once the decider got faster).
    second = await start_wave(cluster, WAVE, WAVE, gap_s=0.03)

    async def second_wave_under_way() -> bool:
        return max(await steps_done(cluster, second)) >= 1

    await until("a second-wave workflow finished its first step", second_wave_under_way, cluster)
    return first + second


async def settle(probe: Callable[[], Awaitable[int]], stable_s: float = 1.0, within_s: float = 15) -> int:
    """Once the server is gone, work already in hand may still land (a commit under way, a
    publish already sent): wait until `probe` has not changed for `stable_s`."""
    deadline = time.monotonic() + within_s
    value = await probe()
    while True:
        await asyncio.sleep(stable_s)
        again = await probe()
        if again == value:
            return value
        assert time.monotonic() < deadline, f"progress went on {within_s:.0f} s into the outage"
        value = again


def assert_all_alive(cluster: Cluster, when: str) -> None:
    """A service process that exits during an outage is a bug: it must retry, not die."""
    dead = {name: p.popen.returncode for name, p in cluster.processes.items() if p.popen and not p.alive()}
    assert not dead, f"service process(es) exited {when}: {dead}\n" + "\n".join(
        f"--- {name} ---\n{cluster[name].log_tail(80)}" for name in dead
    )


async def commits(cluster: Cluster, ids: list[str]) -> int:
    """Decisions committed so far on `ids` (one version each)."""
    return sum(d.version for d in (await cluster.store.load_workflows(ids)).values())


def retries_logged(cluster: Cluster) -> dict[str, int]:
    """Per service, how often Cairn logged a failure it retries: a batch redelivered after a
    backoff, a failed timer or sweeper pass, offsets or outbox markers not written."""
    marks = ("will be redelivered", "failed; retrying", "could not ")
    return {
        name: sum(
            any(m in line for m in marks) and " aiokafka" not in line
            for line in p.log_tail(100_000).splitlines()
        )
        for name, p in cluster.processes.items()
    }


async def assert_nothing_dead_lettered(cluster: Cluster, server: str) -> None:
    """Issue 12 point 2: handlers failing because a server is down wait; they never dead-letter."""
    letters = await cluster.bus.peek(cluster.topics.dead_letter, 100)
    assert letters == [], f"{len(letters)} messages dead-lettered while {server} was down: {letters[:3]}"


def report(title: str, facts: dict[str, object]) -> None:
    """Printed for `pytest -s`: what the outage looked like."""
    shown = {k: round(v, 1) if isinstance(v, float) else v for k, v in facts.items()}
    print(f"\n== {title}: " + ", ".join(f"{k}={v}" for k, v in shown.items()))


async def test_kafka_broker_killed_mid_workflow_resumes_nothing_lost(
    servers: PrivateServers, cluster: Cluster
) -> None:
    ids = await run_until_mid_workflow(cluster)
    at_kill = await steps_done(cluster, ids)
    assert len(ids) - at_kill[3] >= 5, f"too few workflows left to test with: {at_kill}"

    await asyncio.to_thread(servers.stop_kafka, kill=KILL)
    down_at = time.monotonic()
    settled = await settle(lambda: commits(cluster, ids))
    settled_at = time.monotonic()
    unfinished = len(ids) - await cluster.count_completed(ids)
    assert unfinished >= 5, f"only {unfinished} workflows left when the outage settled: nothing tested"
    await asyncio.sleep(QUIET_S)
    assert await commits(cluster, ids) == settled, "decisions were committed while Kafka was down"
    assert_all_alive(cluster, "while Kafka was down")

    restart_at = time.monotonic()
    await asyncio.to_thread(servers.start_kafka)
    ready_at = time.monotonic()
    assert_all_alive(cluster, "while Kafka restarted")

    async def resumed() -> bool:
        return await commits(cluster, ids) > settled

    await until("progress after Kafka came back", resumed, cluster, RESUME_WITHIN_S)
    resumed_at = time.monotonic()
    await cluster.wait_for(ids, within_s=FINISH_WITHIN_S)
    await assert_all_completed_exactly(cluster, ids)
    finished_at = time.monotonic()
    assert_all_alive(cluster, "after Kafka came back")
    await assert_nothing_dead_lettered(cluster, "Kafka")
    report(
        "Kafka broker outage",
        {
            "stop": "SIGKILL" if KILL else "SIGTERM",
            "steps_done_at_kill": dict(sorted(at_kill.items())),
            "unfinished_in_outage": unfinished,
            "settle_s": settled_at - down_at,
            "down_s": restart_at - down_at,
            "restart_s": ready_at - restart_at,
            "resumed_after_ready_s": resumed_at - ready_at,
            "all_done_after_ready_s": finished_at - ready_at,
            "retries_logged": retries_logged(cluster),
            "server_ops_s": [(what, round(s, 1)) for what, s in servers.timings],
        },
    )


async def test_mongo_server_killed_mid_workflow_services_retry_and_resume(
    servers: PrivateServers, cluster: Cluster
) -> None:
    # The store cannot be read while it is down, so progress is watched on Kafka instead: what
    # the decider publishes after each commit (dispatched tasks, workflow events).
    published: list[float] = []
    completed: set[str | None] = set()

    async def watch(batch: Sequence[Received]) -> None:
        published.extend(time.monotonic() for _ in batch)
        for received in batch:
            if received.topic == cluster.topics.workflow_events:
                if json.loads(received.value).get("event") == "completed":
                    completed.add(received.key)

    watcher = KafkaBus(servers.kafka_bootstrap, client_id="outage-watch")
    watcher.subscribe(
        [*(cluster.topics.tasks(d["name"]) for d in TASK_DEFS), cluster.topics.workflow_events],
        cluster.topics.group("watch"),
        watch,
    )
    await watcher.start()
    try:
        ids = await run_until_mid_workflow(cluster)
        at_kill = await steps_done(cluster, ids)
        assert len(ids) - at_kill[3] >= 5, f"too few workflows left to test with: {at_kill}"

        await asyncio.to_thread(servers.stop_mongo, kill=KILL)
        down_at = time.monotonic()

        async def published_count() -> int:
            return len(published)

        settled = await settle(published_count)
        settled_at = time.monotonic()
        unfinished = len(ids) - len(completed)
        assert unfinished >= 5, f"only {unfinished} workflows left when the outage settled: nothing tested"
        await asyncio.sleep(QUIET_S)
        assert len(published) == settled, "the decider published (so committed) while the store was down"
        assert_all_alive(cluster, "while the MongoDB-protocol server was down")

        restart_at = time.monotonic()
        await asyncio.to_thread(servers.start_mongo)
        ready_at = time.monotonic()

        async def resumed() -> bool:
            return len(published) > settled

        await until("progress after the store came back", resumed, cluster, RESUME_WITHIN_S)
        resumed_at = time.monotonic()
        await cluster.wait_for(ids, within_s=FINISH_WITHIN_S)
        await assert_all_completed_exactly(cluster, ids)
        finished_at = time.monotonic()
        assert_all_alive(cluster, "after the MongoDB-protocol server came back")
        await assert_nothing_dead_lettered(cluster, "the MongoDB-protocol server")
    finally:
        await watcher.stop()
    report(
        "MongoDB-protocol server outage",
        {
            "stop": "SIGKILL" if KILL else "SIGTERM",
            "steps_done_at_kill": dict(sorted(at_kill.items())),
            "published_after_kill": sum(t >= down_at for t in published[:settled]),
            "unfinished_in_outage": unfinished,
            "settle_s": settled_at - down_at,
            "down_s": restart_at - down_at,
            "restart_s": ready_at - restart_at,
            "resumed_after_ready_s": resumed_at - ready_at,
            "all_done_after_ready_s": finished_at - ready_at,
            "retries_logged": retries_logged(cluster),
            "server_ops_s": [(what, round(s, 1)) for what, s in servers.timings],
        },
    )
