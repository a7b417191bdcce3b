"""The walk (shared/core/walk.py): executions created and numbered in Conductor's waves, the step
budget of one decision and its continuation, idempotent decisions, and how failures that the
workflow tolerates (optional, permissive) or not (timed out, cancelled) end it."""

from __future__ import annotations

from typing import Any

import pytest

from shared.core.invariants import invariant_violations
from shared.core.run import Limits
from shared.models.messages import DecideRequest, TaskMessage
from shared.models.runtime import TaskStatus, WorkflowStatus
from tests.unit.tasktypes.builders import (
    WF_ID,
    Flow,
    do_while,
    fork,
    inline,
    join,
    noop,
    simple,
    switch,
    task,
    workflow,
)

# ---- waves -----------------------------------------------------------------------------


def test_a_sequence_of_server_side_tasks_runs_in_one_decision_in_order() -> None:
    f = Flow(workflow(noop("a"), inline("b", "1"), noop("c"), simple("d")))
    assert [(t.reference_task_name, t.seq) for t in f.history()] == [("a", 1), ("b", 2), ("c", 3), ("d", 4)]
    assert f.dispatched() == ["d"]
    assert f.state.next_seq == 5


def test_fork_heads_and_join_come_before_the_branches_second_tasks() -> None:
    definition = workflow(
        fork("f", [noop("b1"), noop("b2"), simple("b3")], [noop("c1"), simple("c2")], [simple("d1")]),
        join("j", "b3", "c2", "d1"),
    )
    f = Flow(definition)
    assert f.order() == ["f", "b1", "c1", "d1", "j", "b2", "c2", "b3"]
    assert f.dispatched() == ["d1", "c2", "b3"]


def test_worker_results_continue_each_branch_in_list_order() -> None:
    definition = workflow(
        fork("f", [simple("b1"), simple("b2")], [simple("c1"), simple("c2")]), join("j", "b2", "c2")
    )
    f = Flow(definition)
    f.send(f.result("c1"), f.result("b1"))
    assert f.order() == ["f", "b1", "c1", "j", "b2", "c2"]


# ---- the step budget -------------------------------------------------------------------


def run_to_rest(f: Flow) -> int:
    """Deliver the decide requests a decision addresses to itself until there are none."""
    rounds = 0
    while requests := f.outbox(DecideRequest):
        [request] = requests
        assert request.workflow_id == WF_ID
        f.send(request)
        rounds += 1
    return rounds


def test_the_budget_stops_a_decision_and_asks_for_the_next_one() -> None:
    definition = workflow(*[noop(f"n{i}") for i in range(5)], simple("s"))
    f = Flow(definition, limits=Limits(max_steps=2))
    assert f.order() == ["n0", "n1"]
    assert f.state.status is WorkflowStatus.RUNNING
    assert f.decision.outbox == [
        DecideRequest(
            id=f"continue:{WF_ID}:0:3",
            workflow_id=WF_ID,
            reason="step budget of one decision reached; continuing",
        )
    ]
    f.send(f.outbox(DecideRequest)[0])
    assert f.order() == ["n0", "n1", "n2", "n3"]
    assert f.outbox(DecideRequest)[0].id == f"continue:{WF_ID}:0:5"
    assert run_to_rest(f) == 1
    assert f.order() == ["n0", "n1", "n2", "n3", "n4", "s"]
    assert f.dispatched() == ["s"]


def test_worker_tasks_do_not_count_against_the_budget() -> None:
    f = Flow(
        workflow(fork("f", [simple("a")], [simple("b")], [simple("c")]), join("j", "a", "b", "c")),
        limits=Limits(max_steps=2),
    )
    assert f.order() == ["f", "a", "b", "c", "j"]
    assert f.outbox(DecideRequest) == []


@pytest.mark.parametrize("steps", [1, 2, 3, 5])
def test_a_loop_split_by_the_budget_ends_as_it_would_in_one_decision(steps: int) -> None:
    definition = workflow(
        do_while(
            "loop", "$.loop.iteration < 4", inline("a", "$.i * 2", i="${loop.output.iteration}"), noop("b")
        ),
        simple("after", inputParameters={"last": "${a.output.result}"}),
    )
    whole = Flow(definition)
    split = Flow(definition, limits=Limits(max_steps=steps))
    assert run_to_rest(split) >= 1
    assert [(t.reference_task_name, t.seq, t.status) for t in split.history()] == [
        (t.reference_task_name, t.seq, t.status) for t in whole.history()
    ]
    assert split.task("loop").output_data == whole.task("loop").output_data
    assert split.task("after").input_data == {"last": 8}


# ---- idempotency -----------------------------------------------------------------------


def busy_definition() -> Any:
    return workflow(
        inline("rand", "[Math.random(), Date.now()]"),
        fork(
            "f",
            [do_while("loop", "$.loop.iteration < 2", simple("body"))],
            [
                switch(
                    "s",
                    "$.r[0] > 2 ? 'never' : 'go'",
                    {"go": [simple("go")]},
                    evaluator="javascript",
                    r="${rand.output.result}",
                )
            ],
        ),
        join("j", "loop", "go"),
        task("SUB_WORKFLOW", "sub", subWorkflowParam={"name": "child"}),
    )


def test_the_same_events_on_the_same_state_decide_the_same_thing() -> None:
    f = Flow(busy_definition())
    again = Flow(busy_definition())
    assert f.decision == again.decision
    events = [f.result("body", output={"v": 1}), f.result("go", output={"g": 1})]
    before = f.state.model_copy(deep=True)
    first = f.decide(*events)
    second = f.decide(*events)
    assert first == second
    assert f.state == before, "decide never mutates the state it is given"
    assert first.changed and first.tasks and first.outbox


def test_a_redelivered_batch_after_its_commit_changes_nothing() -> None:
    f = Flow(busy_definition())
    events = [f.result("body", output={"v": 1}), f.result("go")]
    f.send(*events)
    replay = f.decide(*events)
    assert not replay.changed and replay.outbox == [] and replay.tasks == []
    assert {n.code for n in replay.notes} == {"result_superseded", "result_task_ended"}


# ---- tolerated failures ----------------------------------------------------------------


def test_an_optional_task_failing_is_completed_with_errors_and_the_workflow_completes() -> None:
    f = Flow(workflow(simple("a", optional=True), simple("b")))
    f.fail("a", "meh")
    assert f.task("a").status is TaskStatus.COMPLETED_WITH_ERRORS
    assert f.dispatched() == ["b"]
    f.complete("b", {"x": 1})
    assert f.state.status is WorkflowStatus.COMPLETED and f.state.output == {"x": 1}


def test_a_permissive_task_failing_lets_the_workflow_go_on_then_fails_it_at_the_end() -> None:
    f = Flow(workflow(simple("a", permissive=True), simple("b")))
    f.fail("a", "nope")
    assert f.task("a").status is TaskStatus.FAILED
    assert f.state.status is WorkflowStatus.RUNNING and f.dispatched() == ["b"]
    f.complete("b")
    assert f.state.status is WorkflowStatus.FAILED
    assert (
        f.state.reason_for_incompletion == f"Task {f.task('a').task_id} (a) failed with status FAILED: nope"
    )
    assert f.events() == ["failed"]


def test_a_permissive_task_in_a_switch_case_lets_the_case_go_on() -> None:
    definition = workflow(
        switch("s", "k", {"x": [simple("x1", permissive=True), simple("x2")]}, k="x"), simple("after")
    )
    f = Flow(definition)
    f.fail("x1")
    assert f.dispatched() == ["x2"]
    f.complete("x2")
    assert f.dispatched() == ["after"]
    f.complete("after")
    assert f.state.status is WorkflowStatus.FAILED


def test_a_permissive_task_with_retries_is_retried_first() -> None:
    f = Flow(workflow(simple("a", permissive=True, retries=1), simple("b")))
    f.fail("a")
    assert f.task("a").retry_count == 1 and f.dispatched() == ["a"]
    f.complete("a")
    f.complete("b")
    assert f.state.status is WorkflowStatus.COMPLETED


# ---- failures that end the workflow ----------------------------------------------------


def test_a_task_that_timed_out_for_good_times_the_workflow_out() -> None:
    definition = workflow(
        fork(
            "f",
            [simple("a", taskDefinition={"name": "a", "retryCount": 0, "responseTimeoutSeconds": 10})],
            [simple("b")],
        ),
        join("j", "a", "b"),
    )
    f = Flow(definition)
    f.send(f.result("a", TaskStatus.IN_PROGRESS))
    f.look(at=f.now + 10_000)
    assert f.task("a").status is TaskStatus.TIMED_OUT
    assert f.state.status is WorkflowStatus.TIMED_OUT
    assert f.state.reason_for_incompletion == (
        f"Task {f.task('a').task_id} (a) failed with status TIMED_OUT: "
        "no response from a worker for 10s (responseTimeoutSeconds)"
    )
    assert (f.task("b").status, f.task("j").status) == (TaskStatus.CANCELED, TaskStatus.CANCELED)
    assert f.events() == ["timed_out"]


def test_a_task_that_was_cancelled_terminates_the_workflow() -> None:
    f = Flow(workflow(task("SUB_WORKFLOW", "sub", subWorkflowParam={"name": "child"}), simple("after")))
    f.child_ended("sub", "TERMINATED", reason="by an operator")
    assert f.task("sub").status is TaskStatus.CANCELED
    assert f.state.status is WorkflowStatus.TERMINATED
    assert f.events() == ["terminated"]
    assert "after" not in f.state.tasks


def test_states_the_walk_commits_keep_the_invariants() -> None:
    definition = workflow(
        fork("f", [do_while("loop", "$.loop.iteration < 2", simple("body"))], [task("WAIT", "w")]),
        join("j", "loop", "w"),
        simple("after"),
    )
    f = Flow(definition)
    f.complete("body")
    f.complete("body")
    f.signal("w")
    f.complete("after")
    assert f.state.status is WorkflowStatus.COMPLETED
    for decision in f.decisions:
        assert invariant_violations(decision.state) == []
    assert [m.reference_task_name for d in f.decisions for m in d.outbox if isinstance(m, TaskMessage)] == [
        "body__1",
        "body__2",
        "after",
    ]
