"""FORK_JOIN: the FORK record, branch heads and the JOIN created together, branches advancing on
their own, failure of one branch failing the workflow (docs/research/conductor-operators.md,
FORK_JOIN)."""

from __future__ import annotations

from shared.models.messages import TerminateWorkflow
from shared.models.runtime import TaskStatus, WorkflowStatus
from tests.unit.tasktypes.builders import Flow, fork, join, noop, simple, switch, task, workflow


def two_branches() -> Flow:
    return Flow(
        workflow(
            simple("a"),
            fork("f", [simple("b1"), simple("b2")], [simple("c1")]),
            join("j", "b2", "c1"),
            simple("z", inputParameters={"joined": "${j.output}"}),
        )
    )


def test_fork_branch_heads_and_join_are_created_together_in_that_order() -> None:
    f = two_branches()
    f.complete("a")
    assert [(t.reference_task_name, t.seq, t.status) for t in f.history()] == [
        ("a", 1, TaskStatus.COMPLETED),
        ("f", 2, TaskStatus.COMPLETED),
        ("b1", 3, TaskStatus.SCHEDULED),
        ("c1", 4, TaskStatus.SCHEDULED),
        ("j", 5, TaskStatus.IN_PROGRESS),
    ]
    fork_record = f.task("f")
    assert (fork_record.task_type, fork_record.task_def_name, fork_record.kind) == (
        "FORK",
        "FORK",
        "FORK_JOIN",
    )
    assert f.dispatched() == ["b1", "c1"]


def test_branches_advance_independently_and_later_tasks_come_after_the_join() -> None:
    f = two_branches()
    f.complete("a")
    f.complete("b1", {"v": 1})
    assert f.dispatched() == ["b2"]
    assert f.task("b2").seq == 6 > f.task("j").seq
    assert f.task("j").status is TaskStatus.IN_PROGRESS
    f.complete("c1", {"c": 3})
    assert f.dispatched() == [] and f.task("j").status is TaskStatus.IN_PROGRESS
    f.complete("b2", {"b": 2})
    assert f.task("j").status is TaskStatus.COMPLETED
    assert f.task("j").output_data == {"b2": {"b": 2}, "c1": {"c": 3}}
    assert f.dispatched() == ["z"]
    assert f.task("z").input_data == {"joined": {"b2": {"b": 2}, "c1": {"c": 3}}}
    f.complete("z", {"end": 1})
    assert f.state.status is WorkflowStatus.COMPLETED and f.state.output == {"end": 1}


def test_results_in_one_batch_for_both_branches_complete_the_join_in_one_decision() -> None:
    f = Flow(workflow(fork("f", [simple("b")], [simple("c")]), join("j", "b", "c"), simple("z")))
    f.send(f.result("b", output={"x": 1}), f.result("c", output={"y": 2}))
    assert f.task("j").status is TaskStatus.COMPLETED
    assert f.dispatched() == ["z"]


def test_a_branch_task_failing_for_good_fails_the_workflow_and_cancels_the_rest() -> None:
    f = two_branches()
    f.complete("a")
    f.fail("b1", "card declined")
    assert f.state.status is WorkflowStatus.FAILED
    assert f.task("c1").status is TaskStatus.CANCELED
    assert f.task("j").status is TaskStatus.CANCELED
    assert f.state.reason_for_incompletion == (
        f"Task {f.task('b1').task_id} (b1) failed with status FAILED: card declined"
    )
    assert f.events() == ["failed"]


def test_a_branch_task_with_retries_is_retried_and_the_join_waits_for_the_retry() -> None:
    f = Flow(workflow(fork("f", [simple("b", retries=1)], [simple("c")]), join("j", "b", "c")))
    f.fail("b")
    assert f.task("b").retry_count == 1 and f.task("b").status is TaskStatus.SCHEDULED
    assert f.order() == ["f", "b", "c", "j", "b"]
    f.complete("c")
    f.complete("b", {"second": True})
    assert f.task("j").output_data == {"b": {"second": True}}
    assert f.state.status is WorkflowStatus.COMPLETED


def test_server_side_branches_run_in_waves() -> None:
    definition = workflow(
        fork("f", [noop("b1"), noop("b2"), noop("b3")], [noop("c1"), noop("c2")]),
        join("j", "b3", "c2"),
        noop("z"),
    )
    f = Flow(definition)
    assert f.order() == ["f", "b1", "c1", "j", "b2", "c2", "b3", "z"]
    assert f.state.status is WorkflowStatus.COMPLETED


def test_a_switch_at_a_branch_head_expands_with_the_fork() -> None:
    definition = workflow(
        fork(
            "f",
            [switch("s", "k", {"x": [noop("x1"), noop("x2")]}, k="x"), noop("b2")],
            [noop("c1"), simple("c2")],
        ),
        join("j", "b2", "c2"),
    )
    f = Flow(definition)
    assert f.order() == ["f", "s", "x1", "c1", "j", "x2", "c2", "b2"]
    assert f.dispatched() == ["c2"]


def test_a_nested_fork_creates_its_own_heads_and_join_inside_the_outer_wave() -> None:
    definition = workflow(
        fork(
            "f",
            [fork("g", [simple("g1")], [simple("h1")]), join("gj", "g1", "h1"), simple("b2")],
            [simple("c1")],
        ),
        join("j", "b2", "c1"),
    )
    f = Flow(definition)
    assert f.order() == ["f", "g", "g1", "h1", "gj", "c1", "j"]
    f.complete("g1")
    f.complete("h1")
    assert f.task("gj").status is TaskStatus.COMPLETED
    assert f.dispatched() == ["b2"]


def test_terminating_the_workflow_cancels_every_branch() -> None:
    f = Flow(workflow(fork("f", [simple("b")], [task("WAIT", "w")]), join("j", "b", "w")))
    f.terminate("stop")
    assert [(t.reference_task_name, t.status) for t in f.history()] == [
        ("f", TaskStatus.COMPLETED),
        ("b", TaskStatus.CANCELED),
        ("w", TaskStatus.CANCELED),
        ("j", TaskStatus.CANCELED),
    ]
    assert f.state.status is WorkflowStatus.TERMINATED
    assert f.outbox(TerminateWorkflow) == []
