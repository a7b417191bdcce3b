"""SWITCH and the legacy DECISION: the record, the case chosen, default cases, the walk on after
the case, script errors (docs/research/conductor-operators.md, SWITCH and DECISION)."""

from __future__ import annotations

from typing import Any

import pytest

from shared.models.runtime import TaskStatus, WorkflowStatus
from tests.unit.tasktypes.builders import Flow, inline, simple, switch, task, workflow


def by_kind(kind: Any) -> Flow:
    definition = workflow(
        switch(
            "s",
            "kind",
            {"a": [simple("a1"), simple("a2")], "b": [simple("b1")], "empty": []},
            [simple("d1")],
            kind="${workflow.input.kind}",
        ),
        simple("after", inputParameters={"case": "${s.output.selectedCase}"}),
    )
    return Flow(definition, {} if kind is None else {"kind": kind})


def test_value_param_switch_records_its_case_and_starts_the_case_head_with_it() -> None:
    f = by_kind("a")
    s = f.task("s")
    assert (s.task_type, s.task_def_name, s.status) == ("SWITCH", "SWITCH", TaskStatus.COMPLETED)
    assert s.input_data == {"kind": "a", "case": "a", "hasChildren": "true"}
    assert s.output_data == {"evaluationResult": ["a"], "selectedCase": "a"}
    assert f.order() == ["s", "a1"]
    assert f.dispatched() == ["a1"]


def test_the_case_runs_in_order_and_the_flow_goes_on_after_the_switch() -> None:
    f = by_kind("a")
    f.complete("a1")
    assert f.dispatched() == ["a2"]
    f.complete("a2")
    assert f.dispatched() == ["after"]
    assert f.task("after").input_data == {"case": "a"}
    f.complete("after", {"done": True})
    assert f.state.status is WorkflowStatus.COMPLETED
    assert f.order() == ["s", "a1", "a2", "after"]
    assert f.state.output == {"done": True}


def test_an_unmatched_value_runs_the_default_case() -> None:
    f = by_kind("zzz")
    assert f.task("s").output_data == {"evaluationResult": ["zzz"], "selectedCase": "zzz"}
    assert f.dispatched() == ["d1"]


def test_a_missing_value_is_the_text_null_and_runs_the_default_case() -> None:
    f = by_kind(None)
    assert f.task("s").input_data["case"] == "null"
    assert f.task("s").output_data["selectedCase"] == "null"
    assert f.dispatched() == ["d1"]


def test_a_matched_empty_case_runs_nothing_not_the_default() -> None:
    f = by_kind("empty")
    assert "hasChildren" not in f.task("s").input_data
    assert f.order() == ["s", "after"]
    assert f.dispatched() == ["after"]


def test_no_case_and_no_default_goes_straight_on() -> None:
    definition = workflow(switch("s", "k", {"x": [simple("x1")]}, k="${workflow.input.k}"), simple("after"))
    f = Flow(definition, {"k": "other"})
    assert f.dispatched() == ["after"]


@pytest.mark.parametrize(
    ("n", "case"),
    [(5, "big"), (1, "1"), (1.0, "1"), (1.5, "1.5"), (True, "true"), (None, "null")],
)
def test_javascript_values_become_case_text_as_java_writes_them(n: Any, case: str) -> None:
    cases = {c: [simple(f"run_{i}")] for i, c in enumerate(["big", "1", "1.5", "true", "null"])}
    definition = workflow(
        switch(
            "s",
            "(typeof $.n === 'number' && $.n > 2) ? 'big' : $.n",
            cases,
            evaluator="javascript",
            n="${workflow.input.n}",
        )
    )
    f = Flow(definition, {"n": n})
    assert f.task("s").output_data == {"evaluationResult": [case], "selectedCase": case}
    assert f.dispatched() == [cases[case][0]["taskReferenceName"]]


def test_graaljs_is_the_same_engine() -> None:
    definition = workflow(switch("s", "$.k + '!'", {"go!": [simple("go")]}, evaluator="graaljs", k="go"))
    assert Flow(definition).dispatched() == ["go"]


def test_a_script_error_fails_the_switch_and_the_workflow_without_retry() -> None:
    definition = workflow(
        switch("s", "$.a.b.c", {"x": [simple("x1")]}, evaluator="javascript", a="${workflow.input.a}"),
        simple("after"),
    )
    f = Flow(definition)
    s = f.task("s")
    assert s.status is TaskStatus.FAILED and s.retry_count == 0
    assert (
        s.reason_for_incompletion
        == "Error evaluating the script `TypeError: cannot read property 'b' of null`"
    )
    assert f.state.status is WorkflowStatus.FAILED
    assert f.order() == ["s"]
    assert f.events() == ["failed"]


def test_a_runaway_switch_script_is_stopped_by_the_sandbox() -> None:
    definition = workflow(switch("s", "while (true) {}", {"x": [simple("x1")]}, evaluator="javascript"))
    f = Flow(definition)
    assert f.task("s").status is TaskStatus.FAILED
    assert f.task("s").reason_for_incompletion == "Script not evaluated within 0.3 seconds, interrupted."
    assert f.state.status is WorkflowStatus.FAILED


def test_server_side_tasks_of_a_case_run_in_the_same_decision() -> None:
    definition = workflow(
        switch(
            "s",
            "k",
            {
                "x": [
                    inline("i1", "$.v + 1", v="${workflow.input.v}"),
                    inline("i2", "$.v * 10", v="${i1.output.result}"),
                ]
            },
            k="x",
        ),
        simple("after", inputParameters={"v": "${i2.output.result}"}),
    )
    f = Flow(definition, {"v": 1})
    assert f.order() == ["s", "i1", "i2", "after"]
    assert f.task("after").input_data == {"v": 20}


def test_nested_switches_choose_at_each_level() -> None:
    inner = switch("inner", "k2", {"p": [simple("p1")]}, [simple("q1")], k2="${workflow.input.k2}")
    definition = workflow(
        switch("outer", "k1", {"x": [inner, simple("x2")]}, k1="${workflow.input.k1}"), simple("after")
    )
    f = Flow(definition, {"k1": "x", "k2": "nope"})
    assert f.order() == ["outer", "inner", "q1"]
    f.complete("q1")
    assert f.dispatched() == ["x2"]
    f.complete("x2")
    assert f.dispatched() == ["after"]


# ---- DECISION ----------------------------------------------------------------------------


def decision(**fields: Any) -> dict[str, Any]:
    return task(
        "DECISION",
        "d",
        inputParameters={"k": "${workflow.input.k}"},
        decisionCases={"a": [simple("a1")], "empty": [], "null": [simple("n1")]},
        defaultCase=[simple("def")],
        **fields,
    )


def test_decision_by_case_value_param_outputs_case_output() -> None:
    f = Flow(workflow(decision(caseValueParam="k"), simple("after")), {"k": "a"})
    d = f.task("d")
    assert (d.task_type, d.task_def_name, d.status) == ("DECISION", "DECISION", TaskStatus.COMPLETED)
    assert d.output_data == {"caseOutput": ["a"]}
    assert d.input_data["case"] == "a"
    assert f.dispatched() == ["a1"]
    f.complete("a1")
    assert f.dispatched() == ["after"]


def test_decision_falls_back_to_the_default_for_an_empty_matched_case_too() -> None:
    f = Flow(workflow(decision(caseValueParam="k")), {"k": "empty"})
    assert f.task("d").output_data == {"caseOutput": ["empty"]}
    assert f.dispatched() == ["def"]


def test_decision_number_values_are_case_text() -> None:
    f = Flow(workflow(decision(caseValueParam="k")), {"k": 7})
    assert f.task("d").output_data == {"caseOutput": ["7"]}
    assert f.dispatched() == ["def"]


def test_decision_case_expression_is_javascript_over_the_input() -> None:
    expression = "$.k === 'a' ? 'a' : null"
    f = Flow(workflow(decision(caseExpression=expression)), {"k": "a"})
    assert f.dispatched() == ["a1"]
    f = Flow(workflow(decision(caseExpression=expression)), {"k": "b"})
    assert f.task("d").output_data == {"caseOutput": ["null"]}
    assert f.dispatched() == ["n1"]


def test_decision_script_error_fails_the_workflow() -> None:
    f = Flow(workflow(decision(caseExpression="$.k.x.y")), {})
    assert f.task("d").status is TaskStatus.FAILED
    assert "cannot read property 'x' of null" in (f.task("d").reason_for_incompletion or "")
    assert f.state.status is WorkflowStatus.FAILED
