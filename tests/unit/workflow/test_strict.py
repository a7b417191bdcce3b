"""Strict mode: an orchestrator that reads the clock or random numbers itself is caught; what it
should use instead (current_utc_datetime, new_guid, a seeded generator, the replay-safe logger)
is the same on every replay."""

from __future__ import annotations

import datetime
import logging
import random
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from cairn.workflow._registry import Registry
from shared.models.runtime import WorkflowStatus
from tests.unit.workflow.driver import Driver


def clock_reader(read: Callable[[], Any]) -> Any:
    def wf(ctx: Any, _: Any) -> Any:
        yield ctx.create_timer(timedelta(seconds=1))
        return str(read())

    return wf


@pytest.mark.parametrize(
    ("read", "named"),
    [
        (time.time, "time.time()"),
        (datetime.datetime.now, "datetime.datetime.now()"),
        (random.random, "random.random()"),
        (lambda: random.choice("abc"), "random.getrandbits()"),
        (uuid.uuid4, "posix.urandom()"),
    ],
)
def test_an_orchestrator_reading_the_clock_or_randomness_stalls_under_strict(read: Any, named: str) -> None:
    registry = Registry()
    registry.add_workflow("wf", clock_reader(read))
    d = Driver(registry, "wf", strict=True)
    d.run()
    stall = d.h.state.code.stall  # type: ignore[union-attr]
    assert d.h.state.status is WorkflowStatus.STALLED and stall is not None
    assert named in stall.description and "test_strict.py:" in stall.description
    lax = Driver(registry, "wf", wf_id="lax")
    lax.run()
    assert lax.h.state.status is WorkflowStatus.COMPLETED  # without strict mode it goes through


def test_activities_and_deterministic_means_are_allowed_under_strict() -> None:
    guids: list[str] = []

    def stamp(ctx: Any, _: Any) -> float:
        return time.time()  # activities may read the clock

    def wf(ctx: Any, _: Any) -> Any:
        seeded = random.Random(ctx.instance_id).random()
        guids.append(ctx.new_guid())
        ctx.logger.info("started at %s", ctx.current_utc_datetime)
        stamped = yield ctx.call_activity(stamp)
        return [seeded, isinstance(stamped, float)]

    registry = Registry()
    registry.add_workflow("wf", wf)
    registry.add_activity("stamp", stamp)
    d = Driver(registry, "wf", strict=True)
    d.run()
    assert d.h.state.status is WorkflowStatus.COMPLETED and d.result[1] is True
    assert d.result[0] == random.Random("code-1").random()
    assert len(guids) == 2 and guids[0] == guids[1]  # the replay got the same id


def test_the_replay_safe_logger_says_each_line_once(caplog: pytest.LogCaptureFixture) -> None:
    def wf(ctx: Any, _: Any) -> Any:
        ctx.logger.warning("before the timer")
        yield ctx.create_timer(timedelta(seconds=1))
        ctx.logger.warning("after the timer")

    registry = Registry()
    registry.add_workflow("wf", wf)
    with caplog.at_level(logging.WARNING, logger="cairn.workflow"):
        Driver(registry, "wf").run()
    lines = [r.getMessage() for r in caplog.records if r.name == "cairn.workflow"]
    assert lines == ["before the timer", "after the timer"]
