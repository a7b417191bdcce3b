"""SET_VARIABLE: every input key becomes workflow.variables[key], replaced whole; over 256 KB the
task fails terminally and the variables stay as they were (shared/core/tasktypes/set_variable.py)."""

from __future__ import annotations

from shared.models.runtime import TaskStatus, WorkflowStatus
from tests.unit.tasktypes.builders import Flow, do_while, simple, task, workflow


def test_inputs_become_variables_replacing_whole_values_and_keeping_the_rest() -> None:
    node = task(
        "SET_VARIABLE", "sv", inputParameters={"a": "${workflow.input.a}", "nested": {"x": 1}, "gone": None}
    )
    reader = simple(
        "after",
        inputParameters={
            "a": "${workflow.variables.a}",
            "keep": "${workflow.variables.keep}",
            "n": "${workflow.variables.nested}",
        },
    )
    f = Flow(workflow(node, reader, variables={"keep": "k", "nested": {"y": 2}}), {"a": 5})
    assert f.state.variables == {"keep": "k", "nested": {"x": 1}, "a": 5, "gone": None}
    sv = f.task("sv")
    assert (sv.status, sv.output_data, sv.task_type) == (TaskStatus.COMPLETED, {}, "SET_VARIABLE")
    assert f.task("after").input_data == {"a": 5, "keep": "k", "n": {"x": 1}}


def test_a_later_set_variable_overwrites_and_each_loop_iteration_sees_the_last_value() -> None:
    count = task("SET_VARIABLE", "count", inputParameters={"n": "${workflow.variables.n}0"})
    f = Flow(workflow(do_while("loop", "$.loop.iteration < 3", count), variables={"n": "1"}))
    assert f.state.variables == {"n": "1000"}
    assert [t.input_data for t in f.history() if t.kind == "SET_VARIABLE"] == [
        {"n": "10"},
        {"n": "100"},
        {"n": "1000"},
    ]


def test_variables_over_the_limit_fail_the_task_and_are_not_changed() -> None:
    node = task("SET_VARIABLE", "sv", inputParameters={"small": 1, "blob": "${workflow.input.blob}"})
    f = Flow(workflow(node, variables={"before": True}), {"blob": "x" * (256 * 1024)})
    sv = f.task("sv")
    assert sv.status is TaskStatus.FAILED_WITH_TERMINAL_ERROR
    assert sv.reason_for_incompletion == (
        "The variables payload size: 256 kilobytes is greater than the permissible limit: 256 kilobytes"
    )
    assert f.state.variables == {"before": True}
    assert f.state.status is WorkflowStatus.FAILED


def test_just_under_the_limit_is_accepted() -> None:
    overhead = len('{"blob":""}')
    node = task("SET_VARIABLE", "sv", inputParameters={"blob": "${workflow.input.blob}"})
    f = Flow(workflow(node), {"blob": "x" * (256 * 1024 - overhead)})
    assert f.task("sv").status is TaskStatus.COMPLETED
    assert f.state.status is WorkflowStatus.COMPLETED
