"""The failure matrix for code workflows on the Kafka + MongoDB deployment (issue 14, point 7):
the services and the api as processes, the app's runtime polling the api. The runtime SIGKILLed
mid-replay, an activity's worker SIGKILLed after its side effect, the decider SIGKILLed between
taking a turn's answer and committing it, an external event raised while the decider is down,
and a timer of minutes across a restart of every process — exact results, side effects counted."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.devserver import free_port
from tests.e2e.cluster import Cluster
from tests.e2e.code_apps import FAST, SIDE_EFFECT_DEF, TIMER_S, CodeApp, start, wait_done

pytestmark = [pytest.mark.integration, pytest.mark.e2e]


@dataclass
class Deployment:
    cluster: Cluster
    url: str

    @property
    def env(self) -> dict[str, str]:
        """The apps consume their turns and activities from Kafka (the HTTP transport's rows are
        on `cairn dev`), and announce themselves to the api."""
        return {**self.cluster.env, "CAIRN_WORKFLOW_TRANSPORT": "kafka"}

    def wait_healthy(self) -> None:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, self.cluster.diagnostics()
            time.sleep(0.2)


async def _create_topics(cluster: Cluster) -> None:
    try:
        await cluster.bus.ensure_topics(cluster.topics.fixed)
    finally:
        await cluster.bus.stop()


@pytest.fixture(scope="module")
def deployment(
    kafka_bootstrap: str, mongo_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployment]:
    directory = Path(tmp_path_factory.mktemp("code-kafka"))
    cluster = Cluster(kafka_bootstrap, mongo_url, uuid.uuid4().hex[:10], directory, **FAST)
    del cluster.processes["worker"]  # the apps run the activities
    port = free_port()
    cluster.add("api", ["run", "api", "--port", str(port)])
    asyncio.run(_create_topics(cluster))
    for process in cluster.processes.values():
        process.start()
    found = Deployment(cluster, f"http://127.0.0.1:{port}")
    found.wait_healthy()
    with httpx.Client(base_url=found.url) as api:
        assert api.post("/api/metadata/taskdefs", json=[SIDE_EFFECT_DEF]).status_code == 200
    yield found
    codes = {name: process.stop() for name, process in cluster.processes.items()}
    assert all(code in (0, None) for code in codes.values()), (codes, cluster.diagnostics())


@pytest.fixture(scope="module")
def long_timer(
    deployment: Deployment, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[CodeApp, str]]:
    app = CodeApp(
        deployment, tmp_path_factory.mktemp("kafka-timer"), "ktimer", CODE_APP_NO_ACTIVITIES="1"
    ).start()
    with httpx.Client(base_url=deployment.url, timeout=30) as api:
        start(api, "ktimer", "long_timer", "ktimer-1", 7)
    yield app, "ktimer-1"
    app.process.stop()


def _until_dead(app: CodeApp, what: str) -> None:
    deadline = time.monotonic() + 60
    while app.process.alive():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_runtime_killed_mid_replay(deployment: Deployment, long_timer: Any, tmp_path: Path) -> None:
    doomed = CodeApp(deployment, tmp_path, "kreplay", CODE_APP_KILL_IN_REPLAY="kdoomed").start()
    with httpx.Client(base_url=deployment.url, timeout=30) as api:
        start(api, "kreplay", "chain3", "kdoomed-1", 4)
        _until_dead(doomed, "the runtime was not killed in its turn")
        rescuer = CodeApp(deployment, tmp_path, "kreplay").start()
        try:
            done = wait_done(api, "kdoomed-1", seconds=90)
        finally:
            rescuer.process.stop()
    assert done["status"] == "COMPLETED" and done["output"] == {"result": [41, 42, 43]}
    assert rescuer.counted("kdoomed-1") == {("kdoomed-1", step): 1 for step in (1, 2, 3)}


def test_activity_worker_killed_after_its_side_effect(
    deployment: Deployment, long_timer: Any, tmp_path: Path
) -> None:
    doomed = CodeApp(deployment, tmp_path, "keffect", CODE_APP_KILL_AFTER_EFFECT="keffect").start()
    with httpx.Client(base_url=deployment.url, timeout=30) as api:
        start(api, "keffect", "chain3", "keffect-1", 5)
        _until_dead(doomed, "the activity did not kill its worker")
        rescuer = CodeApp(deployment, tmp_path, "keffect").start()
        try:
            done = wait_done(api, "keffect-1", seconds=90)
        finally:
            rescuer.process.stop()
    assert done["status"] == "COMPLETED" and done["output"] == {"result": [51, 52, 53]}
    counts = rescuer.counted("keffect-1")
    [(step, twice)] = [(step, n) for (_, step), n in counts.items() if n > 1]
    assert sorted(counts.values())[:2] == [1, 1] and len(counts) == 3, counts
    # A Kafka worker reports no start: the killed attempt stays SCHEDULED, the sweeper (every 2 s
    # here) hands it out again while no worker is up, and Kafka redelivers the killed one's
    # message: each delivery runs once (at-least-once), the first result wins.
    [task] = [t for t in done["tasks"] if t["referenceTaskName"] == f"side_effect_{step}"]
    assert 2 <= twice <= task["pollCount"] + 1, (twice, task["pollCount"])


def test_decider_killed_between_a_turns_answer_and_its_commit(
    deployment: Deployment, long_timer: Any, tmp_path: Path
) -> None:
    cluster = deployment.cluster
    decider = cluster["decider"]
    decider.stop()
    decider.env = {**decider.env, "CAIRN_FAULT_KILL_BEFORE_RESULT_COMMIT": "kcrash"}
    decider.start()
    app = CodeApp(deployment, tmp_path, "kcrash").start()
    try:
        with httpx.Client(base_url=deployment.url, timeout=30) as api:
            start(api, "kcrash", "chain3", "kcrash-1", 6)
            assert decider.popen is not None
            decider.popen.wait(timeout=60)  # it killed itself committing the first answer
            decider.env = {
                k: v for k, v in decider.env.items() if k != "CAIRN_FAULT_KILL_BEFORE_RESULT_COMMIT"
            }
            decider.start()
            done = wait_done(api, "kcrash-1", seconds=90)
            history = api.get("/api/workflow/kcrash-1/history").json()["events"]
    finally:
        app.process.stop()
    assert done["status"] == "COMPLETED" and done["output"] == {"result": [61, 62, 63]}
    assert app.counted("kcrash-1") == {("kcrash-1", step): 1 for step in (1, 2, 3)}
    assert [e["type"] for e in history].count("TaskScheduled") == 3


def test_external_event_raised_while_the_decider_is_down(
    deployment: Deployment, long_timer: Any, tmp_path: Path
) -> None:
    cluster = deployment.cluster
    app = CodeApp(deployment, tmp_path, "kevent").start()
    try:
        with httpx.Client(base_url=deployment.url, timeout=30) as api:
            start(api, "kevent", "await_event", "kevent-1", 8)
            deadline = time.monotonic() + 30
            while not api.get("/api/workflow/kevent-1/history").json()["events"]:
                assert time.monotonic() < deadline, "the first turn did not commit"
                time.sleep(0.1)
            cluster["decider"].kill()
            accepted = api.post("/api/workflow/kevent-1/events/go", json={"by": "ann"})
            assert accepted.status_code == 202, accepted.text
            time.sleep(1)
            assert api.get("/api/workflow/kevent-1").json()["status"] == "RUNNING"  # nobody took it yet
            cluster["decider"].start()
            done = wait_done(api, "kevent-1", seconds=90)
    finally:
        app.process.stop()
    assert done["output"] == {"result": {"event": {"by": "ann"}, "done": 81}}
    assert app.counted("kevent-1") == {("kevent-1", 1): 1}


def test_a_timer_of_minutes_across_a_restart_of_every_process(
    deployment: Deployment, long_timer: tuple[CodeApp, str]
) -> None:
    app, workflow_id = long_timer
    processes = deployment.cluster.processes
    app.process.kill()
    for process in processes.values():
        process.kill()
    time.sleep(1)
    for process in processes.values():
        process.start()
    deployment.wait_healthy()
    app.start()
    with httpx.Client(base_url=deployment.url, timeout=30) as api:
        done = wait_done(api, workflow_id, seconds=TIMER_S + 90)
    assert done["status"] == "COMPLETED"
    assert done["output"]["result"]["value"] == 7 and done["output"]["result"]["waitedS"] >= TIMER_S
