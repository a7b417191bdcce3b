"""The pure decision core: every behaviour of issue 2 point 4, without a broker or a database."""

import pytest

from shared.core import decide
from shared.models.definitions import WorkflowDef
from shared.models.messages import (
    DecideRequest,
    Signal,
    TerminateWorkflow,
    TimerFired,
    TimerRequest,
    WorkflowEvent,
)
from shared.models.runtime import TaskStatus, WorkflowStatus
from tests.unit.factories import NOW, dispatched, result, start, three_step_def


def run_to_completion() -> tuple:
    definition = three_step_def()
    d = start(definition, {"n": 1})
    for ref, out in (("a", 2), ("b", 3), ("c", 4)):
        d = decide(definition, d.state, [result(d.state, ref, output_data={"n": out})], NOW + 1)
    return definition, d


def test_start_schedules_first_task_with_evaluated_input() -> None:
    d = start(three_step_def(), {"n": 41})
    [message] = dispatched(d)
    assert message.reference_task_name == "a"
    assert message.input_data == {"n": 41}
    assert d.state.tasks["a"].status is TaskStatus.SCHEDULED
    assert [t.task_id for t in d.tasks] == [message.task_id]


def test_sequence_wires_outputs_into_next_inputs() -> None:
    definition = three_step_def()
    d = start(definition, {"n": 1})
    d = decide(definition, d.state, [result(d.state, "a", output_data={"n": 2})], NOW + 1)
    [message] = dispatched(d)
    assert message.reference_task_name == "b"
    assert message.input_data == {"n": 2, "label": "b-2"}
    assert d.state.tasks["a"].status is TaskStatus.COMPLETED


def test_workflow_completes_with_output_parameters() -> None:
    _, d = run_to_completion()
    assert d.state.status is WorkflowStatus.COMPLETED
    assert d.state.output == {"result": 4, "first": 2}
    events = [m for m in d.outbox if isinstance(m, WorkflowEvent)]
    assert [e.event for e in events] == ["completed"]


def test_without_output_parameters_output_is_last_task_output() -> None:
    definition = three_step_def().model_copy(update={"output_parameters": {}})
    d = start(definition, {"n": 1})
    for ref, out in (("a", 2), ("b", 3), ("c", 4)):
        d = decide(definition, d.state, [result(d.state, ref, output_data={"n": out})], NOW)
    assert d.state.output == {"n": 4}


def test_decide_does_not_mutate_inputs_and_is_deterministic() -> None:
    definition = three_step_def()
    d0 = start(definition, {"n": 1})
    before = d0.state.model_dump()
    event = result(d0.state, "a", output_data={"n": 2})
    d1 = decide(definition, d0.state, [event], NOW + 5)
    d2 = decide(definition, d0.state, [event], NOW + 5)
    assert d0.state.model_dump() == before
    assert d1.state == d2.state and d1.outbox == d2.outbox and d1.tasks == d2.tasks


def test_in_progress_updates_task_without_advancing() -> None:
    definition = three_step_def()
    d = start(definition)
    d = decide(
        definition, d.state, [result(d.state, "a", TaskStatus.IN_PROGRESS, output_data={"pct": 50})], NOW + 1
    )
    assert d.state.tasks["a"].status is TaskStatus.IN_PROGRESS
    assert d.state.tasks["a"].output_data == {"pct": 50}
    assert dispatched(d) == []
    assert "b" not in d.state.tasks


def test_in_progress_with_callback_arms_redispatch_timer() -> None:
    definition = three_step_def()
    d = start(definition)
    d = decide(
        definition, d.state, [result(d.state, "a", TaskStatus.IN_PROGRESS, callback_after_seconds=5)], NOW
    )
    [arm] = [m for m in d.outbox if isinstance(m, TimerRequest)]
    assert arm.fire_at == NOW + 5000
    d = decide(
        definition, d.state, [TimerFired(id="f", workflow_id="wf-1", timer_id=arm.timer_id)], NOW + 5000
    )
    [again] = dispatched(d)
    assert again.task_id == d.state.tasks["a"].task_id and again.poll_count == 2


def test_failed_with_retries_left_creates_new_linked_execution_after_fixed_delay() -> None:
    definition = three_step_def(retryCount=2, retryDelaySeconds=3)
    d = start(definition)
    first = d.state.tasks["a"]
    d = decide(
        definition, d.state, [result(d.state, "a", TaskStatus.FAILED, reason_for_incompletion="boom")], NOW
    )
    retry = d.state.tasks["a"]
    assert retry.task_id != first.task_id
    assert retry.retried_task_id == first.task_id
    assert retry.retry_count == 1
    assert retry.status is TaskStatus.SCHEDULED
    old = next(t for t in d.tasks if t.task_id == first.task_id)
    assert old.status is TaskStatus.FAILED and old.retried and old.reason_for_incompletion == "boom"
    assert dispatched(d) == []  # not before the delay
    [arm] = [m for m in d.outbox if isinstance(m, TimerRequest)]
    assert arm.action == "arm" and arm.fire_at == NOW + 3000
    d = decide(
        definition, d.state, [TimerFired(id="t1", workflow_id="wf-1", timer_id=arm.timer_id)], NOW + 3000
    )
    [message] = dispatched(d)
    assert message.task_id == retry.task_id and message.retry_count == 1


def test_retry_with_zero_delay_dispatches_immediately() -> None:
    definition = three_step_def(retryCount=1, retryDelaySeconds=0)
    d = start(definition)
    d = decide(definition, d.state, [result(d.state, "a", TaskStatus.FAILED)], NOW)
    [message] = dispatched(d)
    assert message.retry_count == 1


def test_retries_exhausted_fails_workflow_with_reason() -> None:
    definition = three_step_def(retryCount=1, retryDelaySeconds=0)
    d = start(definition)
    d = decide(
        definition, d.state, [result(d.state, "a", TaskStatus.FAILED, reason_for_incompletion="e1")], NOW
    )
    d = decide(
        definition, d.state, [result(d.state, "a", TaskStatus.FAILED, reason_for_incompletion="e2")], NOW
    )
    assert d.state.status is WorkflowStatus.FAILED
    assert "e2" in (d.state.reason_for_incompletion or "")
    assert "(a)" in (d.state.reason_for_incompletion or "")
    assert [e.event for e in d.outbox if isinstance(e, WorkflowEvent)] == ["failed"]


def test_terminal_error_is_not_retried() -> None:
    definition = three_step_def(retryCount=5, retryDelaySeconds=0)
    d = start(definition)
    d = decide(
        definition,
        d.state,
        [result(d.state, "a", TaskStatus.FAILED_WITH_TERMINAL_ERROR, reason_for_incompletion="bad input")],
        NOW,
    )
    assert d.state.status is WorkflowStatus.FAILED
    assert dispatched(d) == []
    assert d.state.tasks["a"].retry_count == 0


def test_late_result_for_retried_attempt_is_ignored() -> None:
    definition = three_step_def(retryCount=1, retryDelaySeconds=0)
    d = start(definition)
    stale = result(d.state, "a", TaskStatus.COMPLETED, output_data={"n": 9})
    d = decide(definition, d.state, [result(d.state, "a", TaskStatus.FAILED)], NOW)
    again = decide(definition, d.state, [stale], NOW)
    assert not again.changed
    assert again.state == d.state
    assert "not a current task execution" in again.notes[0].message


def test_duplicate_result_is_ignored() -> None:
    definition = three_step_def()
    d = start(definition, {"n": 1})
    event = result(d.state, "a", output_data={"n": 2})
    d = decide(definition, d.state, [event], NOW)
    dup = decide(definition, d.state, [event], NOW)
    assert not dup.changed and dup.outbox == []


def test_optional_task_failure_continues_with_errors() -> None:
    definition = three_step_def()
    definition.tasks[0].optional = True
    d = start(definition)
    d = decide(definition, d.state, [result(d.state, "a", TaskStatus.FAILED)], NOW)
    assert d.state.status is WorkflowStatus.RUNNING
    assert d.state.tasks["a"].status is TaskStatus.COMPLETED_WITH_ERRORS
    assert [m.reference_task_name for m in dispatched(d)] == ["b"]


def wait_def() -> WorkflowDef:
    return WorkflowDef.model_validate(
        {
            "name": "approval",
            "tasks": [
                {"name": "approve", "taskReferenceName": "approval", "type": "WAIT"},
                {
                    "name": "ship",
                    "taskReferenceName": "ship",
                    "inputParameters": {"by": "${approval.output.approver}", "ok": "${approval.output.ok}"},
                },
            ],
        }
    )


def test_wait_task_is_in_progress_until_signal_then_output_flows_on() -> None:
    definition = wait_def()
    d = start(definition)
    assert d.state.tasks["approval"].status is TaskStatus.IN_PROGRESS
    assert dispatched(d) == []
    signal = Signal(
        id="s1", workflow_id="wf-1", task_ref_name="approval", output={"approver": "ann", "ok": True}
    )
    d = decide(definition, d.state, [signal], NOW + 10)
    assert d.state.tasks["approval"].status is TaskStatus.COMPLETED
    assert d.state.tasks["approval"].output_data == {"approver": "ann", "ok": True}
    [message] = dispatched(d)
    assert message.input_data == {"by": "ann", "ok": True}


def test_signal_to_simple_task_or_unknown_ref_is_ignored() -> None:
    definition = wait_def()
    d = start(definition)
    for ref in ("nope", "ship"):
        ignored = decide(definition, d.state, [Signal(id="s", workflow_id="wf-1", task_ref_name=ref)], NOW)
        assert not ignored.changed and ignored.notes


def test_terminate_cancels_tasks_and_pending_timers() -> None:
    definition = three_step_def(retryCount=1, retryDelaySeconds=30)
    d = start(definition)
    d = decide(definition, d.state, [result(d.state, "a", TaskStatus.FAILED)], NOW)
    assert d.state.timers
    d = decide(
        definition, d.state, [TerminateWorkflow(id="k", workflow_id="wf-1", reason="ops said so")], NOW
    )
    assert d.state.status is WorkflowStatus.TERMINATED
    assert d.state.reason_for_incompletion == "ops said so"
    assert d.state.tasks["a"].status is TaskStatus.CANCELED
    cancels = [m for m in d.outbox if isinstance(m, TimerRequest) and m.action == "cancel"]
    assert len(cancels) == 1 and not d.state.timers
    again = decide(definition, d.state, [TerminateWorkflow(id="k2", workflow_id="wf-1")], NOW)
    assert not again.changed


def test_result_after_terminal_workflow_is_ignored() -> None:
    definition = three_step_def()
    d = start(definition)
    pending = result(d.state, "a")
    d = decide(definition, d.state, [TerminateWorkflow(id="k", workflow_id="wf-1")], NOW)
    late = decide(definition, d.state, [pending], NOW)
    assert not late.changed


def test_cancelled_timer_firing_is_ignored() -> None:
    definition = three_step_def()
    d = start(definition)
    fired = decide(definition, d.state, [TimerFired(id="x", workflow_id="wf-1", timer_id="nope")], NOW)
    assert not fired.changed


def test_decide_request_alone_changes_nothing() -> None:
    definition = three_step_def()
    d = start(definition)
    again = decide(definition, d.state, [DecideRequest(id="n", workflow_id="wf-1")], NOW)
    assert not again.changed and again.outbox == []


def test_task_ids_are_deterministic_per_attempt() -> None:
    a = start(three_step_def(), wf_id="same")
    b = start(three_step_def(), wf_id="same")
    c = start(three_step_def(), wf_id="other")
    assert a.state.tasks["a"].task_id == b.state.tasks["a"].task_id != c.state.tasks["a"].task_id


@pytest.mark.parametrize(
    ("logic", "delays"),
    [("FIXED", [10, 10, 10]), ("EXPONENTIAL_BACKOFF", [10, 20, 40]), ("LINEAR_BACKOFF", [20, 40, 60])],
)
def test_retry_delay_logic(logic: str, delays: list[int]) -> None:
    from shared.core.retry import retry_delay_seconds
    from shared.models.definitions import TaskDef

    td = TaskDef(name="t", retryLogic=logic, retryDelaySeconds=10, backoffScaleFactor=2)
    assert [retry_delay_seconds(td, n) for n in (1, 2, 3)] == delays


@pytest.mark.parametrize(
    ("logic", "delays"),
    [("FIXED", [45, 45, 45]), ("EXPONENTIAL_BACKOFF", [10, 20, 25, 25]), ("LINEAR_BACKOFF", [20, 25, 25])],
)
def test_max_retry_delay_caps_every_logic(logic: str, delays: list[int]) -> None:
    from shared.core.retry import retry_delay_seconds
    from shared.models.definitions import TaskDef

    base = 45 if logic == "FIXED" else 10
    td = TaskDef(
        name="t", retryLogic=logic, retryDelaySeconds=base, backoffScaleFactor=2, maxRetryDelaySeconds=25
    )
    expected = [min(d, 25) for d in delays]
    assert [retry_delay_seconds(td, n) for n in range(1, len(delays) + 1)] == expected


def test_conductor_retry_defaults_apply_when_the_task_def_is_silent() -> None:
    from shared.core.retry import retry_delay_ms
    from shared.models.definitions import TaskDef

    td = TaskDef(name="t")
    assert (td.retry_count, td.retry_logic.value, td.retry_delay_seconds) == (3, "FIXED", 60)
    assert [retry_delay_ms(td, n, "seed") for n in (1, 2, 3)] == [60_000, 60_000, 60_000]


def look_again(definition: WorkflowDef, d: object, at: int) -> object:
    return decide(definition, d.state, [DecideRequest(id=f"look-{at}", workflow_id="wf-1")], at)  # type: ignore[attr-defined]


def handed_out(definition: WorkflowDef, d: object, ref: str, at: int) -> object:
    """What the api reports when it hands a task to an HTTP poller."""
    return decide(definition, d.state, [result(d.state, ref, TaskStatus.IN_PROGRESS)], at)  # type: ignore[attr-defined]


def test_silent_worker_times_out_after_response_timeout_and_is_retried() -> None:
    definition = three_step_def(responseTimeoutSeconds=30, retryCount=1)
    d = start(definition, {"n": 1})
    first = d.state.tasks["a"]
    assert dispatched(d)[0].response_timeout_seconds == 30
    d = handed_out(definition, d, "a", NOW + 1000)
    d = look_again(definition, d, NOW + 30_999)
    assert not d.changed, "not before the deadline"
    d = look_again(definition, d, NOW + 31_000)
    timed_out = next(t for t in d.tasks if t.task_id == first.task_id)
    assert (
        timed_out.status is TaskStatus.TIMED_OUT
        and "responseTimeoutSeconds" in timed_out.reason_for_incompletion
    )
    [retry] = dispatched(d)
    assert retry.task_id != first.task_id and retry.retry_count == 1
    assert d.state.tasks["a"].retried_task_id == first.task_id
    # The late result of the timed-out execution changes nothing.
    late_result = result(d.state, "a", output_data={"n": 9}).model_copy(
        update={"task_id": first.task_id, "id": "x"}
    )
    assert not decide(definition, d.state, [late_result], NOW + 31_001).changed


def test_in_progress_report_extends_the_response_deadline() -> None:
    definition = three_step_def(responseTimeoutSeconds=30)
    d = start(definition)
    d = handed_out(definition, d, "a", NOW)
    d = decide(definition, d.state, [result(d.state, "a", TaskStatus.IN_PROGRESS)], NOW + 20_000)
    d = look_again(definition, d, NOW + 40_000)
    assert not d.changed and d.state.tasks["a"].status is TaskStatus.IN_PROGRESS
    d = look_again(definition, d, NOW + 50_000)
    # A task that timed out for good ends its workflow TIMED_OUT, as Conductor's decider does.
    assert d.state.status is WorkflowStatus.TIMED_OUT and "TIMED_OUT" in d.state.reason_for_incompletion


def test_a_result_in_the_same_batch_beats_the_deadline() -> None:
    definition = three_step_def(responseTimeoutSeconds=30)
    d = handed_out(definition, start(definition), "a", NOW)
    d = decide(definition, d.state, [result(d.state, "a", output_data={"n": 1})], NOW + 60_000)
    assert d.state.tasks["a"].status is TaskStatus.COMPLETED and d.state.status is WorkflowStatus.RUNNING


def test_queued_tasks_wait_tasks_and_retry_delays_are_not_timed_out() -> None:
    definition = three_step_def(responseTimeoutSeconds=30, retryCount=1, retryDelaySeconds=60)
    d = start(definition)
    d = look_again(definition, d, NOW + 3600_000)
    assert d.state.tasks["a"].status is TaskStatus.SCHEDULED, "a backlog is not a failure"
    wait = WorkflowDef.model_validate(
        {"name": "w", "tasks": [{"name": "w", "taskReferenceName": "w", "type": "WAIT"}]}
    )
    w = look_again(wait, start(wait), NOW + 10 * 3600 * 1000)
    assert w.state.tasks["w"].status is TaskStatus.IN_PROGRESS
    # A worker asking to be called back later is not silent while it waits for the callback.
    d = decide(
        definition, d.state, [result(d.state, "a", TaskStatus.IN_PROGRESS, callback_after_seconds=90)], NOW
    )
    d = look_again(definition, d, NOW + 60_000)
    assert d.state.tasks["a"].status is TaskStatus.IN_PROGRESS


def deadline_arms(d: object) -> list[TimerRequest]:
    return [
        m for m in d.outbox if isinstance(m, TimerRequest) and m.action == "arm" and "deadline" in m.timer_id
    ]  # type: ignore[attr-defined]


def fire(definition: WorkflowDef, d: object, timer: TimerRequest, at: int) -> object:
    fired = TimerFired(id=f"f-{timer.timer_id}", workflow_id="wf-1", timer_id=timer.timer_id)
    return decide(definition, d.state, [fired], at)  # type: ignore[attr-defined]


def test_response_deadline_is_a_durable_timer_armed_once_for_quick_steps() -> None:
    definition = three_step_def(responseTimeoutSeconds=30, retryCount=1)
    d = handed_out(definition, start(definition, {"n": 1}), "a", NOW)
    [arm] = deadline_arms(d)
    assert arm.fire_at == NOW + 30_000
    # Quick steps: later deadlines need no new timer (the armed one fires first).
    d = decide(definition, d.state, [result(d.state, "a", output_data={"n": 2})], NOW + 10)
    d = handed_out(definition, d, "b", NOW + 20)
    assert deadline_arms(d) == []
    # The timer fires: b is not due yet (handed out at +20), so the next deadline is armed.
    d = fire(definition, d, arm, NOW + 30_000)
    [again] = deadline_arms(d)
    assert again.fire_at == NOW + 30_020 and d.state.tasks["b"].status is TaskStatus.IN_PROGRESS
    d = fire(definition, d, again, NOW + 30_020)
    assert d.state.tasks["b"].status is TaskStatus.SCHEDULED and d.state.tasks["b"].retry_count == 1


def test_poll_timeout_retries_a_task_nobody_took() -> None:
    definition = three_step_def(pollTimeoutSeconds=10, retryCount=1)
    d = start(definition)
    [arm] = deadline_arms(d)
    assert arm.fire_at == NOW + 10_000
    d = fire(definition, d, arm, NOW + 10_000)
    [timed_out] = [t for t in d.tasks if t.status is TaskStatus.TIMED_OUT]
    assert "pollTimeoutSeconds" in timed_out.reason_for_incompletion
    assert d.state.tasks["a"].retry_count == 1 and dispatched(d)


def workflow_with_timeout(policy: str) -> WorkflowDef:
    definition = three_step_def()
    return definition.model_copy(update={"timeout_seconds": 60, "timeout_policy": policy})


def test_workflow_timeout_time_out_wf_ends_it_timed_out() -> None:
    definition = workflow_with_timeout("TIME_OUT_WF")
    d = start(definition)
    [arm] = deadline_arms(d)
    assert arm.fire_at == NOW + 60_000
    d = fire(definition, d, arm, NOW + 60_000)
    assert d.state.status is WorkflowStatus.TIMED_OUT and "timeoutSeconds" in d.state.reason_for_incompletion
    assert d.state.tasks["a"].status is TaskStatus.CANCELED
    [event] = [m for m in d.outbox if isinstance(m, WorkflowEvent)]
    assert event.event == "timed_out"


def test_workflow_timeout_alert_only_alerts_once_and_goes_on() -> None:
    definition = workflow_with_timeout("ALERT_ONLY")
    d = start(definition)
    [arm] = deadline_arms(d)
    d = fire(definition, d, arm, NOW + 60_000)
    assert d.state.status is WorkflowStatus.RUNNING
    assert [m.event for m in d.outbox if isinstance(m, WorkflowEvent)] == ["timeout_alert"]
    d = look_again(definition, d, NOW + 120_000)
    assert not [m for m in d.outbox if isinstance(m, WorkflowEvent)], "one alert only"
    d = decide(definition, d.state, [result(d.state, "a", output_data={"n": 1})], NOW + 120_001)
    assert d.state.tasks["b"].status is TaskStatus.SCHEDULED


def test_retry_jitter_is_bounded_and_reproducible() -> None:
    from shared.core.retry import retry_delay_ms
    from shared.models.definitions import TaskDef

    td = TaskDef(
        name="t",
        retryLogic="EXPONENTIAL_BACKOFF",
        retryDelaySeconds=2,
        backoffJitterMs=500,
        maxRetryDelaySeconds=5,
    )
    delays = {
        seed: [retry_delay_ms(td, n, seed) for n in (1, 2, 3)] for seed in (f"task-{i}" for i in range(50))
    }
    for seed, (first, second, third) in delays.items():
        assert 2000 <= first <= 2500 and 4000 <= second <= 4500 and 5000 <= third <= 5500, (seed, first)
        assert [retry_delay_ms(td, n, seed) for n in (1, 2, 3)] == [first, second, third], "reproducible"
    assert len({d[0] for d in delays.values()}) > 10, "spread across executions"
    assert retry_delay_ms(TaskDef(name="t", retryDelaySeconds=3), 1, "x") == 3000, "no jitter unless asked"


def test_retry_timer_carries_the_jitter() -> None:
    definition = three_step_def(retryCount=1, retryDelaySeconds=1, backoffJitterMs=250)
    d = start(definition)
    d = decide(definition, d.state, [result(d.state, "a", TaskStatus.FAILED)], NOW)
    [arm] = [m for m in d.outbox if isinstance(m, TimerRequest) and m.action == "arm"]
    assert NOW + 1000 <= arm.fire_at <= NOW + 1250
    again = decide(
        definition, start(definition).state, [result(start(definition).state, "a", TaskStatus.FAILED)], NOW
    )
    assert [m.fire_at for m in again.outbox if isinstance(m, TimerRequest)] == [arm.fire_at], (
        "same decision, same delay"
    )


@pytest.mark.parametrize("policy", ["RETRY", "TIME_OUT_WF", "ALERT_ONLY"])
def test_task_timeout_policies(policy: str) -> None:
    definition = three_step_def(
        timeoutSeconds=60, responseTimeoutSeconds=30, timeoutPolicy=policy, retryCount=1
    )
    d = handed_out(definition, start(definition), "a", NOW)
    # Heartbeats keep the response timeout away, but not the task's own timeout.
    for at in (NOW + 25_000, NOW + 50_000):
        d = decide(definition, d.state, [result(d.state, "a", TaskStatus.IN_PROGRESS)], at)
    d = look_again(definition, d, NOW + 60_000)
    first = (
        d.state.tasks["a"]
        if policy == "ALERT_ONLY"
        else next(t for t in d.tasks if t.reference_task_name == "a" and t.retry_count == 0)
    )
    events = [m.event for m in d.outbox if isinstance(m, WorkflowEvent)]
    if policy == "RETRY":
        assert first.status is TaskStatus.TIMED_OUT and d.state.tasks["a"].retry_count == 1
        assert d.state.status is WorkflowStatus.RUNNING
    elif policy == "TIME_OUT_WF":
        assert first.status is TaskStatus.TIMED_OUT and d.state.status is WorkflowStatus.TIMED_OUT
        assert events == ["timed_out"] and "timeoutSeconds" in d.state.reason_for_incompletion
    else:
        assert first.status is TaskStatus.IN_PROGRESS and events == ["timeout_alert"]
        d = decide(definition, d.state, [result(d.state, "a", TaskStatus.IN_PROGRESS)], NOW + 70_000)
        d = look_again(definition, d, NOW + 90_000)
        assert not [m for m in d.outbox if isinstance(m, WorkflowEvent)], "one alert only"


def test_total_timeout_across_attempts_is_not_retried() -> None:
    definition = three_step_def(totalTimeoutSeconds=100, retryCount=5, retryDelaySeconds=0)
    d = start(definition)
    d = decide(definition, d.state, [result(d.state, "a", TaskStatus.FAILED)], NOW + 40_000)
    d = decide(definition, d.state, [result(d.state, "a", TaskStatus.FAILED)], NOW + 80_000)
    assert d.state.tasks["a"].retry_count == 2 and d.state.tasks["a"].first_scheduled_time == NOW
    [armed] = [t for t in d.state.timers.values() if t.purpose == "deadline"]
    assert armed.fire_at == NOW + 100_000, "armed at the first attempt's deadline"
    fired = TimerFired(id="f-total", workflow_id="wf-1", timer_id=armed.timer_id)
    d = decide(definition, d.state, [fired], NOW + 100_000)
    assert (  # timed out for good: the workflow is TIMED_OUT (Conductor)
        d.state.status is WorkflowStatus.TIMED_OUT
        and "totalTimeoutSeconds" in d.state.reason_for_incompletion
    )
    assert d.state.tasks["a"].retry_count == 2, "no further attempt"


def test_failure_workflow_starts_with_the_failed_executions_details() -> None:
    from shared.models.messages import StartWorkflow

    definition = three_step_def().model_copy(update={"failure_workflow": "cleanup"})
    d = start(definition, {"n": 1})
    d = decide(definition, d.state, [result(d.state, "a", output_data={"n": 2})], NOW + 1)
    failing = d.state.tasks["b"]
    d = decide(
        definition,
        d.state,
        [
            result(
                d.state, "b", TaskStatus.FAILED_WITH_TERMINAL_ERROR, reason_for_incompletion="card declined"
            )
        ],
        NOW + 2,
    )
    assert d.state.status is WorkflowStatus.FAILED
    [started] = [m for m in d.outbox if isinstance(m, StartWorkflow)]
    assert started.name == "cleanup" and d.state.failure_workflow_id == started.workflow_id
    assert d.state.output["conductor.failure_workflow"] == started.workflow_id
    assert started.input["workflowId"] == "wf-1" and started.input["failureStatus"] == "FAILED"
    assert (
        started.input["failureTaskId"] == failing.task_id and started.input["failedReferenceTaskName"] == "b"
    )
    assert "card declined" in started.input["reason"] and started.input["input"] == {"n": 1}
    # Its id is derived from the failed workflow's: a replayed decision starts the same one.
    from shared.core.ids import failure_workflow_id

    assert started.workflow_id == failure_workflow_id("wf-1") != failure_workflow_id("wf-2")


def test_no_failure_workflow_for_completed_or_terminated() -> None:
    from shared.models.messages import StartWorkflow

    definition = three_step_def().model_copy(update={"failure_workflow": "cleanup"})
    d = start(definition)
    d = decide(definition, d.state, [TerminateWorkflow(id="t", workflow_id="wf-1")], NOW)
    assert d.state.status is WorkflowStatus.TERMINATED
    assert not [m for m in d.outbox if isinstance(m, StartWorkflow)]
