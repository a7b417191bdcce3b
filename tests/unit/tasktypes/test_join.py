"""JOIN and EXCLUSIVE_JOIN: what they wait for, their output, and how failures of the joined tasks
end them (docs/research/conductor-operators.md, JOIN and EXCLUSIVE_JOIN)."""

from __future__ import annotations

from typing import Any

import pytest

from shared.models.runtime import TaskStatus, WorkflowStatus
from tests.unit.tasktypes.builders import Flow, fork, join, simple, switch, task, workflow


def forked(*join_on: str, a: dict[str, Any] | None = None) -> Flow:
    return Flow(
        workflow(
            fork("f", [simple("a", **(a or {}))], [simple("b")], [simple("c")]),
            join("j", *join_on),
            simple("z"),
        )
    )


def test_join_records_its_join_on_and_is_in_progress_until_all_are_done() -> None:
    f = forked("a", "b")
    j = f.task("j")
    assert (j.task_type, j.task_def_name, j.status) == ("JOIN", "JOIN", TaskStatus.IN_PROGRESS)
    assert j.input_data == {"joinOn": ["a", "b"]}
    f.complete("a", {"x": 1})
    assert f.task("j").status is TaskStatus.IN_PROGRESS
    assert f.task("j").output_data == {"a": {"x": 1}}, "partial output while waiting"
    f.complete("b", {"y": 2})
    assert f.task("j").status is TaskStatus.COMPLETED
    assert f.task("j").output_data == {"a": {"x": 1}, "b": {"y": 2}}


def test_join_waits_only_for_the_refs_it_names() -> None:
    f = forked("a")
    f.complete("a", {"x": 1})
    assert f.task("j").status is TaskStatus.COMPLETED
    assert f.dispatched() == ["z"]
    assert f.status("b") is TaskStatus.SCHEDULED and f.status("c") is TaskStatus.SCHEDULED
    f.complete("z")
    assert f.state.status is WorkflowStatus.RUNNING, "the other branches are still live"
    f.complete("b")
    f.complete("c")
    assert f.state.status is WorkflowStatus.COMPLETED


def test_refs_with_an_empty_output_are_left_out_of_the_join_output() -> None:
    f = forked("a", "b")
    f.complete("a", {})
    f.complete("b", {"y": 2})
    assert f.task("j").output_data == {"b": {"y": 2}}


def test_an_empty_join_on_completes_at_once() -> None:
    f = forked()
    assert f.task("j").status is TaskStatus.COMPLETED and f.task("j").output_data == {}
    assert f.dispatched() == ["a", "b", "c", "z"]


def test_an_optional_joined_failure_makes_the_join_completed_with_errors() -> None:
    f = forked("a", "b", a={"optional": True})
    f.fail("a", "meh")
    assert f.task("a").status is TaskStatus.COMPLETED_WITH_ERRORS
    f.complete("b", {"y": 2})
    j = f.task("j")
    assert j.status is TaskStatus.COMPLETED_WITH_ERRORS
    assert j.reason_for_incompletion == f"a/{f.task('a').task_id} completed with errors"
    assert f.dispatched() == ["z"]
    f.complete("z")
    f.complete("c")
    assert f.state.status is WorkflowStatus.COMPLETED


def test_a_permissive_joined_failure_fails_the_join_once_all_are_done() -> None:
    f = forked("a", "b", a={"permissive": True})
    f.fail("a", "nope")
    assert f.task("j").status is TaskStatus.IN_PROGRESS, "waits for the others first"
    assert f.state.status is WorkflowStatus.RUNNING
    f.complete("b")
    assert f.task("j").status is TaskStatus.FAILED
    assert f.task("j").reason_for_incompletion == "nope"
    assert f.state.status is WorkflowStatus.FAILED
    assert f.task("c").status is TaskStatus.CANCELED
    assert "z" not in f.state.tasks


def test_a_permissive_failure_not_joined_fails_the_workflow_at_its_end() -> None:
    f = forked("b", a={"permissive": True})
    f.fail("a", "nope")
    f.complete("b")
    f.complete("c")
    assert f.task("j").status is TaskStatus.COMPLETED
    f.complete("z")
    assert f.state.status is WorkflowStatus.FAILED
    assert (
        f.state.reason_for_incompletion == f"Task {f.task('a').task_id} (a) failed with status FAILED: nope"
    )


# ---- EXCLUSIVE_JOIN ----------------------------------------------------------------------


def exclusive(kind: str, **last: Any) -> Flow:
    definition = workflow(
        switch(
            "s",
            "k",
            {"a": [simple("a1"), simple("a2", **last)], "b": [simple("b1")]},
            [simple("d1")],
            k="${workflow.input.k}",
        ),
        task("EXCLUSIVE_JOIN", "ej", joinOn=["a2", "b1"], defaultExclusiveJoinTask=["d1"]),
        simple("after", inputParameters={"got": "${ej.output}"}),
    )
    return Flow(definition, {"k": kind})


@pytest.mark.parametrize(
    ("kind", "outputs", "expected"),
    [
        ("a", {"a1": {"x": 1}, "a2": {"y": 2}}, {"y": 2}),
        ("b", {"b1": {"z": 3}}, {"z": 3}),
        ("other", {"d1": {"w": 4}}, {"w": 4}),
    ],
)
def test_exclusive_join_outputs_the_case_that_ran_flat(
    kind: str, outputs: dict[str, dict[str, Any]], expected: dict[str, Any]
) -> None:
    f = exclusive(kind)
    while (due := f.scheduled()) and due != ["after"]:
        f.complete(due[0], outputs[due[0]])
    ej = f.task("ej")
    assert (ej.task_type, ej.task_def_name, ej.status) == (
        "EXCLUSIVE_JOIN",
        "EXCLUSIVE_JOIN",
        TaskStatus.COMPLETED,
    )
    assert ej.input_data == {"joinOn": ["a2", "b1"], "defaultExclusiveJoinTask": ["d1"]}
    assert ej.output_data == expected
    assert f.task("after").input_data == {"got": expected}


def test_exclusive_join_is_created_when_the_case_ends() -> None:
    f = exclusive("a")
    f.complete("a1")
    assert "ej" not in f.state.tasks
    f.complete("a2", {"y": 2})
    assert f.order() == ["s", "a1", "a2", "ej", "after"]


def test_exclusive_join_fails_with_a_permissive_chosen_task_that_failed() -> None:
    f = exclusive("a", permissive=True)
    f.complete("a1")
    f.fail("a2", "bad")
    assert f.task("ej").status is TaskStatus.FAILED
    assert f.task("ej").reason_for_incompletion == "bad"
    assert f.state.status is WorkflowStatus.FAILED
