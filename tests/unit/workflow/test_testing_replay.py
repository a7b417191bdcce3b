"""cairn.workflow.testing.replay: a changed orchestrator checked against a recorded history."""

from __future__ import annotations

from typing import Any

import pytest

from cairn.workflow import NonDeterminismError
from cairn.workflow._registry import Registry
from cairn.workflow.testing import replay
from tests.unit.workflow.driver import Driver


def echo(ctx: Any, x: Any) -> Any:
    return x


def original(ctx: Any, x: int) -> Any:
    a = yield ctx.call_activity(echo, input=x)
    b = yield ctx.call_activity("echo", input=a + 1)
    return [a, b]


def recorded(workflow: Any = original, wait: bool = False) -> dict[str, Any]:
    registry = Registry()
    registry.add_activity("echo", echo)
    registry.add_workflow("wf", workflow)
    d = Driver(registry, "wf", 1)
    d.run()
    return {"instanceId": "code-1", "name": "wf", "events": d.h.history[0]}


def test_unchanged_code_replays_a_finished_history() -> None:
    assert replay(original, recorded()) == []


def test_a_renamed_activity_is_caught() -> None:
    def renamed(ctx: Any, x: int) -> Any:
        a = yield ctx.call_activity("echo2", input=x)
        return [a]

    with pytest.raises(NonDeterminismError, match=r"sequence number 1.*name='echo'.*trying to call echo2"):
        replay(renamed, recorded())


def test_a_dropped_call_is_caught() -> None:
    def shorter(ctx: Any, x: int) -> Any:
        a = yield ctx.call_activity(echo, input=x)
        return [a]

    with pytest.raises(NonDeterminismError, match="ID=2, but the current execution doesn't have this action"):
        replay(shorter, recorded())


def test_a_different_result_is_caught() -> None:
    def other_result(ctx: Any, x: int) -> Any:
        a = yield ctx.call_activity(echo, input=x)
        b = yield ctx.call_activity("echo", input=a + 1)
        return {"a": a, "b": b}

    with pytest.raises(NonDeterminismError, match=r"ended with \[1, 2\]"):
        replay(other_result, recorded())


def test_a_dropped_patch_is_caught_and_a_running_instance_says_what_comes_next() -> None:
    def patched(ctx: Any, x: int) -> Any:
        if ctx.is_patched("p1"):
            yield ctx.call_activity(echo, input=x)
        yield ctx.wait_for_external_event("go")

    history = recorded(patched)
    assert replay(patched, history) == []  # waits for "go": nothing to ask for

    def unpatched(ctx: Any, x: int) -> Any:
        yield ctx.call_activity(echo, input=x)
        yield ctx.wait_for_external_event("go")

    with pytest.raises(NonDeterminismError, match=r"patches \['p1'\]"):
        replay(unpatched, history)

    def asks_more(ctx: Any, x: int) -> Any:
        if ctx.is_patched("p1"):
            yield ctx.call_activity(echo, input=x)
        yield ctx.call_activity(echo, input="new")

    [action] = replay(asks_more, history)
    assert action.type == "ScheduleTask" and action.id == 2


def test_a_decorated_workflow_reference_replays_its_function() -> None:
    from cairn.workflow import WorkflowRuntime

    wfr = WorkflowRuntime()  # no I/O until start()
    shim = wfr.workflow(name="wf")(original)
    with pytest.raises(TypeError):
        shim(None, 1)  # as in Dapr: the decorated name is a reference, not the function
    assert replay(shim, recorded()) == []
