"""Determinism checks, is_patched and named versions, through the pure code engine."""

from __future__ import annotations

from typing import Any

from cairn.workflow._registry import Registry
from shared.models.runtime import WorkflowStatus
from tests.unit.workflow.driver import Driver


def echo(ctx: Any, x: Any) -> Any:
    return x


def other(ctx: Any, x: Any) -> Any:
    return f"other {x}"


def waits_then_calls(activity: Any) -> Any:
    def wf(ctx: Any, _: Any) -> Any:
        first = yield ctx.call_activity(echo, input="a")
        yield ctx.wait_for_external_event("go")
        second = yield ctx.call_activity(activity, input="b")
        return [first, second]

    return wf


def test_code_that_drifted_from_its_history_stalls_and_resumes_once_fixed() -> None:
    registry = Registry()
    registry.add_activity("echo", echo)
    registry.add_activity("other", other)
    registry.add_workflow("wf", waits_then_calls(echo))
    d = Driver(registry, "wf")
    d.run()

    def drifted(ctx: Any, _: Any) -> Any:
        yield ctx.call_activity(other, input="a")  # the history has echo at sequence 1

    registry.workflows["wf"] = drifted
    d.raise_event("go")
    d.run()
    assert d.h.state.status is WorkflowStatus.STALLED
    stall = d.h.state.code.stall  # type: ignore[union-attr]
    assert stall is not None and stall.reason == "NONDETERMINISM"
    assert "instance 'code-1', sequence number 1" in stall.description
    assert "name='echo'" in stall.description and "trying to call other" in stall.description
    registry.workflows["wf"] = waits_then_calls(echo)  # the right code is back
    d.raise_event("nudge")
    d.run()
    assert d.h.state.status is WorkflowStatus.COMPLETED and d.result == ["a", "b"]


def test_a_different_kind_of_call_at_a_sequence_number_is_nondeterminism() -> None:
    registry = Registry()
    registry.add_activity("echo", echo)
    registry.add_workflow("wf", waits_then_calls(echo))
    d = Driver(registry, "wf")
    d.run()

    def timer_first(ctx: Any, _: Any) -> Any:
        from datetime import timedelta

        yield ctx.create_timer(timedelta(seconds=1))

    registry.workflows["wf"] = timer_first
    d.raise_event("go")
    d.run(fire_timers=False)
    stall = d.h.state.code.stall  # type: ignore[union-attr]
    assert stall is not None and "instead trying to call create_timer" in stall.description


def test_is_patched_true_for_new_instances_false_while_replaying_older_history() -> None:
    registry = Registry()
    registry.add_activity("echo", echo)
    registry.add_activity("other", other)
    registry.add_workflow("wf", waits_then_calls(echo))
    old = Driver(registry, "wf", wf_id="old")
    old.run()  # waits for "go", history made without any patch
    seen: list[tuple[str, bool]] = []

    def patched(ctx: Any, _: Any) -> Any:
        first = yield ctx.call_activity(echo, input="a")
        seen.append(("p1-before-wait", ctx.is_patched("p1")))
        seen.append(("p1-again", ctx.is_patched("p1")))  # decided once per run
        yield ctx.wait_for_external_event("go")
        seen.append(("p2-live", ctx.is_patched("p2")))
        second = yield ctx.call_activity(other if ctx.is_patched("p2") else echo, input="b")
        return [first, second]

    registry.workflows["wf"] = patched
    old.raise_event("go")
    old.run()
    assert old.result == ["a", "other b"]
    assert ("p1-before-wait", False) in seen and ("p1-again", False) in seen and ("p2-live", True) in seen
    assert old.h.state.code.patches == ["p2", "p2"]  # type: ignore[union-attr]
    seen.clear()
    new = Driver(registry, "wf", wf_id="new")
    new.run()
    assert ("p1-before-wait", True) in seen  # a new instance runs the patched code
    new.raise_event("go")
    new.run()
    assert ("p1-before-wait", True) in seen[2:]  # replayed: taken in an earlier turn, so True


def test_removing_a_patch_an_instance_took_stalls_it_with_both_lists() -> None:
    registry = Registry()
    registry.add_activity("echo", echo)

    def with_patch(ctx: Any, _: Any) -> Any:
        if ctx.is_patched("p1"):
            yield ctx.call_activity(echo, input="patched")
        return (yield ctx.wait_for_external_event("go"))

    registry.add_workflow("wf", with_patch)
    d = Driver(registry, "wf")
    d.run()

    def without(ctx: Any, _: Any) -> Any:
        yield ctx.call_activity(echo, input="patched")
        return (yield ctx.wait_for_external_event("go"))

    registry.workflows["wf"] = without
    d.raise_event("go", 1)
    d.run()
    stall = d.h.state.code.stall  # type: ignore[union-attr]
    assert d.h.state.status is WorkflowStatus.STALLED and stall is not None
    assert stall.reason == "PATCH_MISMATCH" and "['p1']" in stall.description and "[]" in stall.description
    registry.workflows["wf"] = with_patch
    d.raise_event("go", 2)
    d.run()
    assert d.h.state.status is WorkflowStatus.COMPLETED and d.result == 1  # the kept event came through


def versioned(label: str) -> Any:
    def wf(ctx: Any, _: Any) -> Any:
        yield ctx.wait_for_external_event("go")
        return label

    return wf


def test_named_versions_pin_running_instances_and_a_missing_version_stalls() -> None:
    registry = Registry()
    registry.add_versioned_workflow("wf", "v1", versioned("v1"), is_latest=True)
    running = Driver(registry, "wf", wf_id="running")
    running.run()
    registry.add_versioned_workflow("wf", "v2", versioned("v2"), is_latest=True)
    fresh = Driver(registry, "wf", wf_id="fresh")
    fresh.run()
    for d in (running, fresh):
        d.raise_event("go")
        d.run()
    assert (running.result, fresh.result) == ("v1", "v2")
    assert running.h.history[0][0]["version"] == {"name": "v1", "patches": []}
    stalled = Driver(registry, "wf", wf_id="stalled")
    stalled.run()  # on v2
    del registry.versioned["wf"]["v2"]
    registry.latest["wf"] = "v1"
    stalled.raise_event("go")
    stalled.run()
    stall = stalled.h.state.code.stall  # type: ignore[union-attr]
    assert stalled.h.state.status is WorkflowStatus.STALLED and stall is not None
    assert (stall.reason, stall.description) == ("VERSION_NOT_AVAILABLE", "Version not available: v2")


def test_an_unregistered_workflow_fails_as_in_dapr() -> None:
    d = Driver(Registry(), "nobody")
    d.run()
    assert d.h.state.status is WorkflowStatus.FAILED
    assert "A 'nobody' orchestrator was not registered." in d.h.state.reason_for_incompletion  # type: ignore[operator]


def test_a_runtime_without_the_workflow_keeps_an_instance_that_ran_elsewhere() -> None:
    registry = Registry()
    registry.add_workflow("wf", versioned("v"))
    d = Driver(registry, "wf")
    d.run()
    registry.workflows.clear()  # a runtime of the app that lacks this workflow takes the next turn
    d.raise_event("go")
    d.run()
    stall = d.h.state.code.stall  # type: ignore[union-attr]
    assert d.h.state.status is WorkflowStatus.STALLED and stall is not None
    assert stall.reason == "WORKFLOW_NOT_REGISTERED" and "'wf'" in stall.description
    registry.add_workflow("wf", versioned("back"))
    d.raise_event("nudge")
    d.run()
    assert d.result == "back"
