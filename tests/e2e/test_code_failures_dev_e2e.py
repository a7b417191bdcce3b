"""The failure matrix for code workflows on `cairn dev` (issue 14, point 7): the runtime SIGKILLed
mid-replay, an activity's worker SIGKILLed after its side effect, the engine SIGKILLed between
taking a turn's answer and committing it, an event raised into a killed engine, and a timer of
minutes across a full restart. Each instance completes with its exact result, and each activity's
side effects are counted (at-least-once: a killed attempt's effect is there once more)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.devserver import DevServer
from tests.e2e.code_apps import FAST, SIDE_EFFECT_DEF, TIMER_S, CodeApp, start, wait_done

pytestmark = [pytest.mark.integration, pytest.mark.e2e]


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    server = DevServer(tmp_path_factory.mktemp("code-dev"), None, **FAST)
    server.start()
    with httpx.Client(base_url=server.url) as api:
        assert api.post("/api/metadata/taskdefs", json=[SIDE_EFFECT_DEF]).status_code == 200
    yield server
    server.process.stop()


@pytest.fixture(scope="module")
def long_timer(dev: DevServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[CodeApp, str]]:
    """An instance sleeping TIMER_S on a durable timer, started before the other rows run; the
    last test restarts everything under it and sees it end on time."""
    app = CodeApp(dev, tmp_path_factory.mktemp("timer-app"), "timer", CODE_APP_NO_ACTIVITIES="1").start()
    with httpx.Client(base_url=dev.url, timeout=30) as api:
        start(api, "timer", "long_timer", "timer-1", 7)
    yield app, "timer-1"
    app.process.stop()


def test_runtime_killed_mid_replay(dev: DevServer, long_timer: Any, tmp_path: Path) -> None:
    doomed = CodeApp(dev, tmp_path, "replay", CODE_APP_KILL_IN_REPLAY="doomed").start()
    with httpx.Client(base_url=dev.url, timeout=30) as api:
        start(api, "replay", "chain3", "doomed-1", 4)
        deadline = time.monotonic() + 30
        while doomed.process.alive():
            assert time.monotonic() < deadline, "the runtime was not killed in its turn"
            time.sleep(0.05)
        rescuer = CodeApp(dev, tmp_path, "replay").start()
        try:
            done = wait_done(api, "doomed-1")
        finally:
            rescuer.process.stop()
        assert done["status"] == "COMPLETED" and done["output"] == {"result": [41, 42, 43]}
        assert rescuer.counted("doomed-1") == {("doomed-1", 1): 1, ("doomed-1", 2): 1, ("doomed-1", 3): 1}
        history = api.get("/api/workflow/doomed-1/history").json()["events"]
        assert [e["name"] for e in history if e["type"] == "TaskScheduled"] == ["side_effect"] * 3


def test_activity_worker_killed_after_its_side_effect(
    dev: DevServer, long_timer: Any, tmp_path: Path
) -> None:
    doomed = CodeApp(dev, tmp_path, "effect", CODE_APP_KILL_AFTER_EFFECT="effect").start()
    with httpx.Client(base_url=dev.url, timeout=30) as api:
        start(api, "effect", "chain3", "effect-1", 5)
        deadline = time.monotonic() + 30
        while doomed.process.alive():
            assert time.monotonic() < deadline, "the activity did not kill its worker"
            time.sleep(0.05)
        rescuer = CodeApp(dev, tmp_path, "effect").start()
        try:
            done = wait_done(api, "effect-1")
        finally:
            rescuer.process.stop()
    assert done["status"] == "COMPLETED" and done["output"] == {"result": [51, 52, 53]}
    # the step the doomed runtime ran (any app's runtime may run an activity) ran twice: its
    # worker died before reporting, it timed out and ran again; the others ran once
    counts = rescuer.counted("effect-1")
    assert sorted(counts.values()) == [1, 1, 2] and set(counts) == {("effect-1", step) for step in (1, 2, 3)}
    [twice] = [step for (_, step), count in counts.items() if count == 2]
    attempts = [t for t in done["tasks"] if t["referenceTaskName"] == f"side_effect_{twice}"]
    assert [t["status"] for t in attempts] == ["TIMED_OUT", "COMPLETED"]


def test_engine_killed_between_a_turns_answer_and_its_commit(tmp_path: Path) -> None:
    server = DevServer(tmp_path, None, **FAST, CAIRN_FAULT_KILL_BEFORE_RESULT_COMMIT="crash")
    server.start()
    with httpx.Client(base_url=server.url, timeout=30) as api:
        assert api.post("/api/metadata/taskdefs", json=[SIDE_EFFECT_DEF]).status_code == 200
        app = CodeApp(server, tmp_path, "crash").start()
        try:
            start(api, "crash", "chain3", "crash-1", 6)
            assert server.process.popen is not None
            server.process.popen.wait(timeout=30)  # it killed itself committing the first answer
            server.process.env = {k: v for k, v in server.env.items() if not k.startswith("CAIRN_FAULT_")}
            server.start()  # same file, same port, no fault
            try:
                done = wait_done(api, "crash-1")
                history = api.get("/api/workflow/crash-1/history").json()["events"]
            finally:
                server.process.stop()
        finally:
            app.process.stop()
    assert done["status"] == "COMPLETED" and done["output"] == {"result": [61, 62, 63]}
    assert app.counted("crash-1") == {("crash-1", 1): 1, ("crash-1", 2): 1, ("crash-1", 3): 1}
    started = [e for e in history if e["type"] == "OrchestratorStarted"]
    assert [e["type"] for e in history].count("TaskScheduled") == 3 and len(started) == 4


def test_event_raised_into_an_engine_that_is_then_killed(
    dev: DevServer, long_timer: Any, tmp_path: Path
) -> None:
    """The event is durable once the api accepted it: the engine killed right after (before or
    after applying it, whichever it reached) delivers it on restart, exactly once."""
    app = CodeApp(dev, tmp_path, "events").start()
    with httpx.Client(base_url=dev.url, timeout=30) as api:
        start(api, "events", "await_event", "event-1", 8)
        assert api.post("/api/workflow/event-1/events/go", json={"by": "ann"}).status_code == 202
        dev.process.kill()
        dev.start()
        try:
            done = wait_done(api, "event-1")
        finally:
            app.process.stop()
    assert done["status"] == "COMPLETED" and done["output"] == {
        "result": {"event": {"by": "ann"}, "done": 81}
    }
    assert app.counted("event-1") == {("event-1", 1): 1}


def test_a_timer_of_minutes_across_a_full_restart(dev: DevServer, long_timer: tuple[CodeApp, str]) -> None:
    app, workflow_id = long_timer
    app.process.kill()
    dev.process.kill()
    time.sleep(1)
    dev.start()
    app.start()
    with httpx.Client(base_url=dev.url, timeout=30) as api:
        done = wait_done(api, workflow_id, seconds=TIMER_S + 60)
    assert done["status"] == "COMPLETED"
    assert done["output"]["result"]["value"] == 7 and done["output"]["result"]["waitedS"] >= TIMER_S
