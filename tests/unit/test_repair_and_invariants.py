"""Lost messages, late results and the state invariants, in the pure core (issue 4, points 3, 6, 7)."""

from __future__ import annotations

import random

import pytest

from shared.core import decide
from shared.core.invariants import invariant_violations
from shared.models.definitions import WorkflowDef
from shared.models.messages import DecideRequest, Signal, TimerFired, TimerRequest
from shared.models.runtime import TaskStatus, WorkflowStatus
from tests.unit.factories import NOW, dispatched, result, start, three_step_def

MINUTE = 60_000


def stale_request(since: int, wf_id: str = "wf-1") -> DecideRequest:
    return DecideRequest(id=f"sweep:{since}", workflow_id=wf_id, reason="stale", stale_before=since)


def test_a_late_result_of_a_superseded_attempt_is_rejected_with_a_code_and_changes_nothing() -> None:
    definition = three_step_def(retryCount=1, retryDelaySeconds=0, responseTimeoutSeconds=5)
    d = start(definition)
    first = d.state.tasks["a"]
    d = decide(definition, d.state, [result(d.state, "a", TaskStatus.IN_PROGRESS)], NOW)
    timed_out = decide(definition, d.state, [], NOW + 6000)
    assert timed_out.state.tasks["a"].task_id != first.task_id  # retried as a new execution
    late = result(d.state, "a", output_data={"n": 99})
    assert late.task_id == first.task_id
    after = decide(definition, timed_out.state, [late], NOW + 7000)
    assert not after.changed and after.state == timed_out.state
    assert [(r.code, first.task_id in r.message) for r in after.notes] == [("result_superseded", True)]


@pytest.mark.parametrize(
    ("status", "code"),
    [(TaskStatus.CANCELED, "result_status_not_allowed"), (TaskStatus.SKIPPED, "result_status_not_allowed")],
)
def test_a_worker_cannot_report_a_status_the_machine_reserves_for_itself(
    status: TaskStatus, code: str
) -> None:
    definition = three_step_def()
    d = start(definition)
    after = decide(definition, d.state, [result(d.state, "a", status)], NOW + 1)
    assert [r.code for r in after.notes] == [code]
    assert after.state.tasks["a"].status is TaskStatus.SCHEDULED


def test_results_signals_and_timers_after_the_end_are_rejected_with_codes() -> None:
    definition = three_step_def()
    d = start(definition)
    ref_state = d.state
    d = decide(definition, d.state, [result(d.state, "a", TaskStatus.FAILED_WITH_TERMINAL_ERROR)], NOW)
    assert d.state.status is WorkflowStatus.FAILED
    late = [
        result(ref_state, "a", output_data={"n": 1}),
        Signal(id="s", workflow_id="wf-1", task_ref_name="a", output={}),
        TimerFired(id="t", workflow_id="wf-1", timer_id="nope"),
    ]
    after = decide(definition, d.state, late, NOW + 1)
    assert [r.code for r in after.notes] == [
        "result_workflow_ended",
        "signal_workflow_ended",
        "timer_not_pending",
    ]
    assert not after.changed


def test_a_stale_request_dispatches_again_a_task_whose_dispatch_was_lost() -> None:
    definition = three_step_def()
    d = start(definition)
    [lost] = dispatched(d)
    later = NOW + 10 * MINUTE
    repaired = decide(definition, d.state, [stale_request(later - 5 * MINUTE)], later)
    [again] = dispatched(repaired)
    assert again.task_id == lost.task_id and again.id != lost.id and again.poll_count == 2
    assert repaired.repairs and repaired.changed
    # The first delivery's result still counts (same execution), the second is then rejected.
    done = decide(definition, repaired.state, [result(repaired.state, "a", output_data={"n": 2})], later + 1)
    assert done.state.tasks["b"].status is TaskStatus.SCHEDULED


def test_a_stale_request_leaves_recent_and_in_progress_tasks_alone() -> None:
    definition = three_step_def()
    d = start(definition)
    recent = decide(definition, d.state, [stale_request(NOW - 1)], NOW + MINUTE)
    assert dispatched(recent) == [] and not recent.repairs
    d = decide(definition, d.state, [result(d.state, "a", TaskStatus.IN_PROGRESS)], NOW)
    working = decide(definition, d.state, [stale_request(NOW + MINUTE)], NOW + 2 * MINUTE)
    assert dispatched(working) == []  # IN_PROGRESS: the response timeout covers a lost result


def test_a_plain_decide_request_never_redispatches() -> None:
    definition = three_step_def()
    d = start(definition)
    look = decide(definition, d.state, [DecideRequest(id="x", workflow_id="wf-1")], NOW + 60 * MINUTE)
    assert dispatched(look) == [] and not look.changed


def test_a_stale_request_fires_a_retry_timer_whose_firing_was_lost() -> None:
    definition = three_step_def(retryCount=1, retryDelaySeconds=5)
    d = start(definition)
    d = decide(definition, d.state, [result(d.state, "a", TaskStatus.FAILED)], NOW)
    [arm] = [m for m in d.outbox if isinstance(m, TimerRequest)]
    assert dispatched(d) == []
    later = NOW + 10 * MINUTE
    repaired = decide(definition, d.state, [stale_request(later - 5 * MINUTE)], later)
    [retry] = dispatched(repaired)
    assert retry.task_id == d.state.tasks["a"].task_id and retry.retry_count == 1
    assert arm.timer_id not in repaired.state.timers
    cancels = [m for m in repaired.outbox if isinstance(m, TimerRequest) and m.action == "cancel"]
    assert [c.timer_id for c in cancels] == [arm.timer_id]
    # The real firing, when it finally comes, changes nothing.
    real = TimerFired(id="real", workflow_id="wf-1", timer_id=arm.timer_id)
    again = decide(definition, repaired.state, [real], later + 1)
    assert [r.code for r in again.notes] == ["timer_not_pending"] and dispatched(again) == []


def test_a_stale_request_enforces_a_response_timeout_whose_deadline_timer_was_lost() -> None:
    definition = three_step_def(retryCount=1, responseTimeoutSeconds=5)
    d = start(definition)
    d = decide(definition, d.state, [result(d.state, "a", TaskStatus.IN_PROGRESS)], NOW)
    later = NOW + 10 * MINUTE
    repaired = decide(definition, d.state, [stale_request(later - 5 * MINUTE)], later)
    assert [t.status for t in repaired.tasks if t.retried] == [TaskStatus.TIMED_OUT]
    assert len(dispatched(repaired)) == 1


def wait_then_task() -> WorkflowDef:
    return WorkflowDef.model_validate(
        {
            "name": "w",
            "tasks": [
                {"name": "approve", "taskReferenceName": "approval", "type": "WAIT"},
                {"name": "t", "taskReferenceName": "t", "taskDefinition": {"name": "t", "retryCount": 0}},
            ],
        }
    )


def test_a_stale_request_never_touches_a_wait_task() -> None:
    definition = wait_then_task()
    d = start(definition)
    look = decide(definition, d.state, [stale_request(NOW + 60 * MINUTE)], NOW + 61 * MINUTE)
    assert not look.changed and look.state.tasks["approval"].status is TaskStatus.IN_PROGRESS


def test_invariants_flag_a_running_workflow_with_nothing_live() -> None:
    definition = three_step_def()
    d = start(definition)
    assert invariant_violations(d.state) == []
    stuck = d.state.model_copy(deep=True)
    stuck.tasks["a"].status = TaskStatus.COMPLETED
    [problem] = invariant_violations(stuck)
    assert "RUNNING with no task scheduled or in progress and no timer armed" in problem
    dangling = stuck.model_copy(deep=True)
    dangling.status = WorkflowStatus.COMPLETED
    dangling.tasks["a"].status = TaskStatus.IN_PROGRESS
    assert "still live" in invariant_violations(dangling)[0]


def test_every_state_the_core_commits_satisfies_the_invariants() -> None:
    """Random event sequences (results of any status, duplicates, stale and late events, timers
    firing, signals, stale requests) never make the core commit a state that breaks them."""
    definitions = [
        three_step_def(retryCount=2, retryDelaySeconds=1, responseTimeoutSeconds=3),
        wait_then_task(),
    ]
    statuses = [
        TaskStatus.COMPLETED,
        TaskStatus.FAILED,
        TaskStatus.IN_PROGRESS,
        TaskStatus.FAILED_WITH_TERMINAL_ERROR,
    ]
    for seed in range(300):
        rng = random.Random(seed)
        definition = rng.choice(definitions)
        d = start(definition, {"n": 1})
        now = NOW
        seen = [d.state]
        for _step in range(12):
            now += rng.choice([0, 500, 2000, 4000, 60_000])
            state = d.state
            events: list = []
            live = [ref for ref, t in state.tasks.items() if not t.status.is_terminal]
            choice = rng.random()
            if live and choice < 0.5:
                ref = rng.choice(live)
                old = rng.choice(seen)
                source = old if ref in old.tasks and rng.random() < 0.2 else state
                if ref in source.tasks:
                    events.append(
                        result(source, ref, rng.choice(statuses), output_data={"n": rng.randint(0, 9)})
                    )
                events.append(
                    Signal(id=f"s{now}", workflow_id="wf-1", task_ref_name=ref, output={"ok": True})
                )
            elif state.timers and choice < 0.8:
                timer_id = rng.choice(sorted(state.timers))
                events.append(TimerFired(id=f"t{now}", workflow_id="wf-1", timer_id=timer_id))
            else:
                events.append(stale_request(now - rng.choice([0, 1000, 30_000])))
            d = decide(definition, state, events * rng.choice([1, 2]), now)
            assert invariant_violations(d.state) == [], f"seed {seed}: {d.state}"
            seen.append(d.state)
