"""The replay executor of cairn.workflow, driven through the pure code engine (no I/O)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from cairn.workflow import RetryPolicy, TaskFailedError, when_all, when_any
from cairn.workflow._executor import execute_turn
from cairn.workflow._registry import Registry
from shared.models.runtime import WorkflowStatus
from tests.unit.workflow.driver import Driver


def registry(workflows: dict[str, Any], activities: dict[str, Any] | None = None) -> Registry:
    found = Registry()
    for name, fn in workflows.items():
        found.add_workflow(name, fn)
    for name, fn in (activities or {}).items():
        found.add_activity(name, fn)
    return found


def plus_one(ctx: Any, x: int) -> int:
    return x + 1


def double(ctx: Any, x: int) -> int:
    return x * 2


def boom(ctx: Any, x: Any) -> None:
    raise ValueError(f"bad {x}")


ACTIVITIES = {"plus_one": plus_one, "double": double, "boom": boom}


def test_a_chain_of_activities_gives_the_functions_result() -> None:
    def chain(ctx: Any, x: int) -> Any:
        a = yield ctx.call_activity(plus_one, input=x)
        b = yield ctx.call_activity("double", input=a)
        return [a, b]

    d = Driver(registry({"chain": chain}, ACTIVITIES), "chain", 42)
    d.run()
    assert d.h.state.status is WorkflowStatus.COMPLETED and d.result == [43, 86]
    assert d.activity_calls == [("plus_one", 42), ("double", 43)]
    assert [a["id"] for r in d.responses for a in r["actions"]] == [1, 2, 3]  # Dapr's numbering from 1


def test_an_async_def_orchestrator_runs_the_same_way() -> None:
    async def chain(ctx: Any, x: int) -> Any:
        a = await ctx.call_activity(plus_one, input=x)
        return await ctx.call_activity(double, input=a)

    d = Driver(registry({"chain": chain}, ACTIVITIES), "chain", 1)
    d.run()
    assert d.result == 4


def test_a_plain_function_workflow_completes_in_its_first_turn() -> None:
    d = Driver(registry({"plain": lambda ctx, x: f"got {x}"}), "plain", "a")
    d.run()
    assert d.result == "got a" and len(d.responses) == 1


def test_fan_out_fan_in_keeps_the_order_given() -> None:
    def fan(ctx: Any, n: int) -> Any:
        results = yield when_all([ctx.call_activity(double, input=i) for i in range(n)])
        return sum(results), results

    d = Driver(registry({"fan": fan}, ACTIVITIES), "fan", 4)
    d.run()
    assert d.result == [12, [0, 2, 4, 6]]


def test_when_all_fails_with_the_first_failure() -> None:
    def fan(ctx: Any, _: Any) -> Any:
        try:
            yield when_all([ctx.call_activity(double, input=1), ctx.call_activity(boom, input="x")])
        except TaskFailedError as error:
            return [error.details.error_type, error.details.message, str(error)]
        return "no failure"

    d = Driver(registry({"fan": fan}, ACTIVITIES), "fan")
    d.run()
    assert d.result == ["ValueError", "bad x", "code-1: Activity task #2 failed: bad x"]


def test_an_uncaught_failure_fails_the_workflow_with_its_details() -> None:
    def failing(ctx: Any, _: Any) -> Any:
        yield ctx.call_activity(boom, input=1)

    d = Driver(registry({"failing": failing}, ACTIVITIES), "failing")
    d.run()
    assert d.h.state.status is WorkflowStatus.FAILED
    details = d.h.state.output["failureDetails"]
    assert (
        details["errorType"] == "TaskFailedError" and "Activity task #1 failed: bad 1" in details["message"]
    )


def test_retry_policy_retries_on_durable_timers_until_the_activity_succeeds() -> None:
    calls: list[int] = []

    def flaky(ctx: Any, _: Any) -> str:
        calls.append(1)
        if len(calls) < 3:
            raise RuntimeError("not yet")
        return "ok"

    policy = RetryPolicy(
        first_retry_interval=timedelta(seconds=1), max_number_of_attempts=3, backoff_coefficient=2
    )

    def wf(ctx: Any, _: Any) -> Any:
        return (yield ctx.call_activity(flaky, retry_policy=policy))

    d = Driver(registry({"wf": wf}, {"flaky": flaky}), "wf")
    d.run()
    assert d.result == "ok" and len(calls) == 3
    timers = [a for r in d.responses for a in r["actions"] if a["type"] == "CreateTimer"]
    kinds = [(a["type"], a["id"]) for r in d.responses for a in r["actions"]]
    assert kinds[:5] == [
        ("ScheduleTask", 1),
        ("CreateTimer", 2),
        ("ScheduleTask", 3),
        ("CreateTimer", 4),
        ("ScheduleTask", 5),
    ]
    assert timers[1]["fireAt"] - timers[0]["fireAt"] >= 2000  # the second delay doubled


def test_retry_policy_gives_up_after_max_attempts() -> None:
    policy = RetryPolicy(first_retry_interval=timedelta(seconds=1), max_number_of_attempts=2)

    def wf(ctx: Any, _: Any) -> Any:
        try:
            yield ctx.call_activity(boom, input=0, retry_policy=policy)
        except TaskFailedError:
            return "gave up"

    d = Driver(registry({"wf": wf}, ACTIVITIES), "wf")
    d.run()
    assert d.result == "gave up" and [c for c in d.activity_calls] == [("boom", 0), ("boom", 0)]


def test_retry_policy_validates_like_dapr() -> None:
    with pytest.raises(ValueError, match="max_number_of_attempts must be >= 1"):
        RetryPolicy(first_retry_interval=timedelta(seconds=1), max_number_of_attempts=0)
    with pytest.raises(ValueError, match="backoff_coefficient must be >= 1"):
        RetryPolicy(
            first_retry_interval=timedelta(seconds=1), max_number_of_attempts=1, backoff_coefficient=0.5
        )


def test_an_event_raised_before_the_wait_is_kept_for_it_and_names_ignore_case() -> None:
    def wf(ctx: Any, _: Any) -> Any:
        yield ctx.create_timer(timedelta(seconds=5))
        return (yield ctx.wait_for_external_event("Approval"))

    d = Driver(registry({"wf": wf}), "wf")
    d.run(fire_timers=False)
    d.raise_event("APPROVAL", {"by": "ann"})
    d.run()
    assert d.result == {"by": "ann"}


def test_when_any_of_an_event_and_a_timer() -> None:
    def wf(ctx: Any, _: Any) -> Any:
        event = ctx.wait_for_external_event("go")
        timeout = ctx.create_timer(timedelta(hours=24))
        winner = yield when_any([event, timeout])
        return "timeout" if winner == timeout else event.get_result()

    approved = Driver(registry({"wf": wf}), "wf")
    approved.run(fire_timers=False)
    approved.raise_event("go", "yes")
    approved.run(fire_timers=False)
    assert approved.result == "yes"
    late = Driver(registry({"wf": wf}), "wf")
    late.run()
    assert late.result == "timeout"


def test_wait_for_external_event_with_a_timeout_fails_with_timeout_error() -> None:
    def wf(ctx: Any, _: Any) -> Any:
        try:
            yield ctx.wait_for_external_event("go", timeout=timedelta(seconds=30))
        except TimeoutError as error:
            return str(error)

    d = Driver(registry({"wf": wf}), "wf")
    d.run()
    assert d.result == "Timed out after datetime.timedelta(seconds=30) waiting for external event 'go'"


def test_continue_as_new_runs_again_with_the_new_input_and_saved_events() -> None:
    def counter(ctx: Any, n: int) -> Any:
        if n >= 2:
            seen = yield ctx.wait_for_external_event("kept")
            return [n, seen]
        yield ctx.create_timer(timedelta(seconds=1))
        ctx.continue_as_new(n + 1, save_events=True)

    d = Driver(registry({"counter": counter}), "counter", 0)
    d.run(fire_timers=False)
    d.raise_event("kept", "still here")  # arrives in generation 0, carried over twice
    d.run()
    assert d.result == [2, "still here"] and d.h.state.epoch == 2


def test_custom_status_is_recorded() -> None:
    def wf(ctx: Any, _: Any) -> Any:
        ctx.set_custom_status("halfway")
        yield ctx.create_timer(timedelta(seconds=1))

    d = Driver(registry({"wf": wf}), "wf")
    d.run(fire_timers=False)
    assert d.h.state.code.custom_status == "halfway"  # type: ignore[union-attr]


def test_current_time_is_the_turns_recorded_time() -> None:
    seen: list[Any] = []

    def wf(ctx: Any, _: Any) -> Any:
        seen.append((ctx.current_utc_datetime, ctx.is_replaying))
        yield ctx.create_timer(timedelta(seconds=1))
        seen.append((ctx.current_utc_datetime, ctx.is_replaying))

    d = Driver(registry({"wf": wf}), "wf")
    d.run()
    first, replayed, after = seen
    assert first[0] == replayed[0] and (first[1], replayed[1], after[1]) == (False, True, False)
    assert after[0] > first[0]


def test_a_child_workflow_gets_a_derived_instance_id_and_its_result() -> None:
    def parent(ctx: Any, _: Any) -> Any:
        return (yield ctx.call_child_workflow("child", input=3))

    d = Driver(registry({"parent": parent}), "parent")
    d.run()
    [created] = [a for r in d.responses for a in r["actions"]]
    assert created["type"] == "CreateSubOrchestration" and created["instanceId"] == "code-1:0001"


def test_execute_turn_refuses_a_malformed_work_item() -> None:
    with pytest.raises(ValueError):
        execute_turn(Registry(), {"instanceId": "x"})
