"""JSON_JQ_TRANSFORM: jq over the whole task input; `result` is the first value, `resultList` all
of them; an error fails the task (retriably) with `error` in the output (shared/core/tasktypes/
json_jq.py)."""

from __future__ import annotations

from typing import Any

import pytest

from shared.models.runtime import TaskStatus, WorkflowStatus
from tests.unit.tasktypes.builders import Flow, simple, task, workflow


def jq(query: str, **kw: Any) -> Flow:
    node = task(
        "JSON_JQ_TRANSFORM",
        "j",
        inputParameters={
            "queryExpression": query,
            "a": "${workflow.input.a}",
            "b": 2,
            "items": [{"n": 1}, {"n": 2}],
        },
        **kw,
    )
    return Flow(workflow(node), {"a": 1})


@pytest.mark.parametrize(
    ("query", "result", "result_list"),
    [
        (".a + .b", 3, [3]),
        (".items[] | .n", 1, [1, 2]),
        ("empty", None, []),
        (".queryExpression", ".queryExpression", [".queryExpression"]),
        ("{s: (.items | map(.n) | add)}", {"s": 3}, [{"s": 3}]),
        ("1.5, 2, 2.0", 1.5, [1.5, 2, 2]),
        ("now", 1_700_000_000, [1_700_000_000]),
    ],
)
def test_result_is_the_first_value_and_result_list_all_of_them(
    query: str, result: Any, result_list: list[Any]
) -> None:
    f = jq(query)
    j = f.task("j")
    assert (j.status, j.output_data) == (TaskStatus.COMPLETED, {"result": result, "resultList": result_list})
    assert j.task_type == "JSON_JQ_TRANSFORM"


@pytest.mark.parametrize(
    ("query", "error"), [(".a.c", 'Cannot index number with string ("c")'), ('error("boom")', "boom")]
)
def test_a_jq_error_fails_the_task_with_the_error_in_the_output(query: str, error: str) -> None:
    f = jq(query)
    j = f.task("j")
    assert (j.status, j.reason_for_incompletion, j.output_data) == (
        TaskStatus.FAILED,
        error,
        {"error": error},
    )
    assert f.state.status is WorkflowStatus.FAILED


def test_a_query_that_does_not_compile_fails_the_task() -> None:
    j = jq("syntax ((").task("j")
    assert j.status is TaskStatus.FAILED
    assert "syntax error" in j.output_data["error"] and "compile error" in (j.reason_for_incompletion or "")


def test_a_missing_query_fails_the_task() -> None:
    node = task("JSON_JQ_TRANSFORM", "j", inputParameters={"queryExpression": "${workflow.input.q}"})
    j = Flow(workflow(node)).task("j")
    assert (j.status, j.reason_for_incompletion, j.output_data) == (
        TaskStatus.FAILED,
        "Missing 'queryExpression' in input parameters",
        {"error": "Missing 'queryExpression' in input parameters"},
    )


def test_a_jq_failure_is_retried_per_its_retry_count() -> None:
    f = jq(".a.c", retryCount=1)
    assert [(t.retry_count, t.status) for t in f.history()] == [
        (0, TaskStatus.FAILED),
        (1, TaskStatus.FAILED),
    ]


def test_the_result_feeds_the_next_task() -> None:
    node = task(
        "JSON_JQ_TRANSFORM",
        "j",
        inputParameters={"queryExpression": "[.xs[] * 2]", "xs": "${workflow.input.xs}"},
    )
    f = Flow(workflow(node, simple("use", inputParameters={"v": "${j.output.result}"})), {"xs": [1, 2]})
    assert f.task("use").input_data == {"v": [2, 4]}
