"""INLINE: a script evaluated inside the decision, its value the output `result`; errors fail it
terminally, a timeout fails it retriably (shared/core/tasktypes/inline.py)."""

from __future__ import annotations

from typing import Any

import pytest

from shared.models.definitions import WorkflowDef
from shared.models.runtime import TaskStatus, WorkflowStatus
from tests.unit.tasktypes.builders import Flow, inline, simple, task, workflow


def run(expression: str, **inputs: Any) -> Flow:
    node = task(
        "INLINE",
        "i",
        inputParameters={
            "evaluatorType": "javascript",
            "expression": expression,
            "a": "${workflow.input.a}",
            "b": 2,
            **inputs,
        },
    )
    # model_validate, not registration: some of these scripts are refused there on purpose
    return Flow(WorkflowDef.model_validate({"name": "w", "tasks": [node]}), {"a": 1})


@pytest.mark.parametrize(
    ("expression", "result"),
    [
        ("$.a + $.b", 3),
        (
            "(function () { return {sum: $.a + $.b, list: [1, 'x', null], t: typeof $.expression}; })()",
            {"sum": 3, "list": [1, "x", None], "t": "string"},
        ),
        ("if ($.a > 0) { 'pos'; } else { 'neg'; }", "pos"),
        ("undefined", None),
        ("$.b / 4", 0.5),
    ],
)
def test_the_value_of_the_script_is_the_result(expression: str, result: Any) -> None:
    f = run(expression)
    i = f.task("i")
    assert (i.status, i.output_data) == (TaskStatus.COMPLETED, {"result": result})
    assert f.state.status is WorkflowStatus.COMPLETED


def test_the_evaluator_defaults_to_javascript_and_graaljs_is_the_same() -> None:
    f = Flow(workflow(task("INLINE", "i", inputParameters={"expression": "$.n * 2", "n": 4})))
    assert f.task("i").output_data == {"result": 8}
    assert run("$.a * 10", evaluatorType="graaljs").task("i").output_data == {"result": 10}


def test_value_param_reads_the_named_input() -> None:
    assert run("b", evaluatorType="value-param").task("i").output_data == {"result": 2}


@pytest.mark.parametrize(
    ("expression", "extra", "reason"),
    [
        ("$.missing.x", {}, "Error evaluating the script `TypeError: cannot read property 'x' of undefined`"),
        ("syntax error here(", {}, "Error evaluating the script `SyntaxError: expecting ';'`"),
        ("return 1", {}, "Error evaluating the script `SyntaxError: return not in a function`"),
        ("1", {"evaluatorType": "python"}, "Unknown evaluator 'python' in INLINE task."),
        ("  ", {}, "Empty 'expression' in INLINE task's input parameters."),
    ],
)
def test_script_errors_fail_the_task_terminally_with_the_error_in_the_output(
    expression: str, extra: dict[str, Any], reason: str
) -> None:
    f = run(expression, **extra)
    i = f.task("i")
    assert (i.status, i.reason_for_incompletion, i.output_data) == (
        TaskStatus.FAILED_WITH_TERMINAL_ERROR,
        reason,
        {"error": reason},
    )
    assert f.state.status is WorkflowStatus.FAILED


def test_a_timeout_fails_the_task_retriably_and_its_retries_are_used() -> None:
    node = task("INLINE", "i", retryCount=1, inputParameters={"expression": "while (true) {}"})
    f = Flow(workflow(node))
    attempts = [t for t in f.history() if t.reference_task_name == "i"]
    assert [(t.retry_count, t.status) for t in attempts] == [(0, TaskStatus.FAILED), (1, TaskStatus.FAILED)]
    assert attempts[0].output_data == {"error": "Script not evaluated within 0.3 seconds, interrupted."}
    assert f.state.status is WorkflowStatus.FAILED


def test_inline_results_flow_into_the_next_task_in_the_same_decision() -> None:
    f = Flow(
        workflow(
            inline("double", "$.n * 2", n="${workflow.input.n}"),
            simple("use", inputParameters={"v": "${double.output.result}"}),
        ),
        {"n": 21},
    )
    assert f.order() == ["double", "use"]
    assert f.task("use").input_data == {"v": 42}


def test_random_and_time_are_fixed_by_the_decision() -> None:
    expression = "[Math.random(), Date.now()]"
    first = Flow(workflow(inline("i", expression))).task("i").output_data["result"]
    again = Flow(workflow(inline("i", expression))).task("i").output_data["result"]
    other = Flow(workflow(inline("i", expression)), wf_id="wf-2").task("i").output_data["result"]
    assert first == again
    assert first[1] == other[1] == 1_700_000_000_000
    assert first[0] != other[0], "seeded by the execution id"
