"""Validation of task trees (shared/core/validation.py and each type's `problems`): every refusal
names the field where the problem sits, at any depth."""

from __future__ import annotations

from typing import Any

import pytest

from shared.core.validation import DefinitionError, parse_workflow_def
from tests.unit.tasktypes.builders import do_while, fork, inline, join, simple, switch, task


def problems(*tasks: dict[str, Any], **fields: Any) -> list[tuple[str, str]]:
    with pytest.raises(DefinitionError) as caught:
        parse_workflow_def({"name": "w", "tasks": list(tasks), **fields})
    return caught.value.problems


def test_a_valid_tree_parses() -> None:
    parsed = parse_workflow_def(
        {
            "name": "w",
            "tasks": [
                fork(
                    "f", [switch("s", "k", {"x": [do_while("l", "true", simple("b"))]}, k="x")], [simple("c")]
                ),
                join("j", "b", "c"),
                inline("i", "(function () { return 1; })()"),
            ],
        }
    )
    assert [t.task_reference_name for t in parsed.all_tasks()] == ["f", "s", "l", "b", "c", "j", "i"]


# ---- structure -------------------------------------------------------------------------


def test_a_fork_not_followed_by_a_join() -> None:
    assert problems(fork("f", [simple("a")]), simple("x")) == [
        ("tasks[0]", "a FORK_JOIN must be followed by a JOIN in the same list")
    ]
    assert problems(simple("z"), fork("f", [simple("a")])) == [
        ("tasks[1]", "a FORK_JOIN must be followed by a JOIN in the same list")
    ]


def test_a_dynamic_fork_not_followed_by_a_join() -> None:
    dynamic = task("FORK_JOIN_DYNAMIC", "d", inputParameters={"forkTaskInputs": []})
    assert problems(dynamic) == [
        ("tasks[0]", "a FORK_JOIN_DYNAMIC must be followed by a JOIN in the same list")
    ]


def test_a_fork_deep_in_the_tree_not_followed_by_a_join() -> None:
    nested = do_while("l", "true", switch("s", "k", {"x": [fork("f", [simple("a")])]}, k="x"))
    assert problems(nested) == [
        ("tasks[0].loopOver[0].decisionCases.x[0]", "a FORK_JOIN must be followed by a JOIN in the same list")
    ]


def test_a_join_that_follows_no_fork() -> None:
    assert problems(simple("x"), join("j", "x")) == [
        ("tasks[1]", "a JOIN must follow a FORK_JOIN or FORK_JOIN_DYNAMIC")
    ]


def test_a_join_naming_refs_that_are_not_in_its_fork() -> None:
    assert problems(simple("x"), fork("f", [simple("a")], [simple("b")]), join("j", "a", "zz", "x", "b")) == [
        ("tasks[2].joinOn[1]", "'zz' is not a task of the fork 'f'"),
        ("tasks[2].joinOn[2]", "'x' is not a task of the fork 'f'"),
    ]


def test_a_join_may_name_tasks_at_any_depth_of_its_fork() -> None:
    branch = [switch("s", "k", {"x": [simple("deep")]}, k="x")]
    parse_workflow_def({"name": "w", "tasks": [fork("f", branch, [simple("b")]), join("j", "deep", "b")]})


def test_double_underscore_is_reserved_in_references() -> None:
    assert problems(simple("a__1")) == [
        ("tasks[0].taskReferenceName", "'__' is reserved: loop iterations run as ref__N")
    ]
    assert problems(do_while("l", "true", simple("b__x"))) == [
        ("tasks[0].loopOver[0].taskReferenceName", "'__' is reserved: loop iterations run as ref__N")
    ]


def test_workflow_is_a_reserved_reference() -> None:
    assert problems(simple("workflow")) == [
        ("tasks[0].taskReferenceName", "'workflow' is reserved for ${workflow...}")
    ]


def test_duplicate_references_at_any_depth() -> None:
    tree = [simple("a"), fork("f", [simple("b")], [do_while("l", "true", simple("a"))]), join("j", "b")]
    assert problems(*tree) == [
        (
            "tasks[1].forkTasks[1][0].loopOver[0].taskReferenceName",
            "duplicate taskReferenceName 'a' (also at tasks[0])",
        )
    ]
    assert problems(switch("s", "k", {"x": [simple("a")]}, [simple("a")])) == [
        (
            "tasks[0].defaultCase[0].taskReferenceName",
            "duplicate taskReferenceName 'a' (also at tasks[0].decisionCases.x[0])",
        )
    ]


# ---- operator fields on the wrong type -------------------------------------------------


def test_loop_over_on_a_simple_task() -> None:
    assert problems(simple("a", loopOver=[simple("b")])) == [
        ("tasks[0].loopOver", "only a DO_WHILE task takes loopOver, not SIMPLE")
    ]


def test_each_misplaced_operator_field_is_named() -> None:
    node = simple(
        "a", decisionCases={"x": []}, expression="k", forkTasks=[[simple("q")]], sink="kafka:x", joinOn=["a"]
    )
    assert problems(node) == [
        ("tasks[0].decisionCases", "only a SWITCH or DECISION task takes decisionCases, not SIMPLE"),
        ("tasks[0].expression", "only a SWITCH task takes expression, not SIMPLE"),
        ("tasks[0].forkTasks", "only a FORK_JOIN task takes forkTasks, not SIMPLE"),
        ("tasks[0].joinOn", "only a JOIN or EXCLUSIVE_JOIN task takes joinOn, not SIMPLE"),
        ("tasks[0].sink", "only a EVENT task takes sink, not SIMPLE"),
    ]


def test_a_loop_condition_on_a_switch() -> None:
    node = switch("s", "k", {"x": []}, k="x")
    node["loopCondition"] = "true"
    assert problems(node) == [
        ("tasks[0].loopCondition", "only a DO_WHILE task takes loopCondition, not SWITCH")
    ]


# ---- per type --------------------------------------------------------------------------


def test_switch_without_cases() -> None:
    assert problems(task("SWITCH", "s", evaluatorType="value-param", expression="k")) == [
        ("tasks[0].decisionCases", "a SWITCH needs at least one case")
    ]


def test_switch_without_evaluator_or_expression_and_with_an_unknown_evaluator() -> None:
    assert problems(task("SWITCH", "s", decisionCases={"a": []})) == [
        ("tasks[0].evaluatorType", "required: value-param or javascript"),
        ("tasks[0].expression", "required: the input key (value-param) or the script"),
    ]
    assert problems(task("SWITCH", "s", evaluatorType="python", expression="k", decisionCases={"a": []})) == [
        ("tasks[0].evaluatorType", "'python' is not supported (value-param, javascript, graaljs)")
    ]


def test_switch_javascript_that_does_not_parse() -> None:
    node = task("SWITCH", "s", evaluatorType="javascript", expression="$.a +* 2", decisionCases={"a": []})
    assert problems(node) == [
        ("tasks[0].expression", "JavaScript does not parse: SyntaxError: unexpected token in expression: '*'")
    ]


def test_decision_without_a_value_or_with_an_expression_that_does_not_parse() -> None:
    assert problems(task("DECISION", "d", decisionCases={"a": []})) == [
        ("tasks[0].caseValueParam", "required: caseValueParam or caseExpression")
    ]
    assert problems(task("DECISION", "d", caseExpression="(", decisionCases={"a": []})) == [
        (
            "tasks[0].caseExpression",
            "JavaScript does not parse: SyntaxError: unexpected token in expression: ''",
        )
    ]


@pytest.mark.parametrize(
    ("status", "shown"),
    [
        ("DONE", "'DONE'"),
        ("${workflow.input.s}", "'${workflow.input.s}'"),
        (None, "None"),
        ("completed", "'completed'"),
    ],
)
def test_terminate_with_a_bad_or_expression_status(status: Any, shown: str) -> None:
    inputs = {} if status is None else {"terminationStatus": status}
    assert problems(task("TERMINATE", "t", inputParameters=inputs)) == [
        (
            "tasks[0].inputParameters.terminationStatus",
            f"must be written as one of COMPLETED, FAILED, TERMINATED (got {shown})",
        )
    ]


def test_an_optional_terminate() -> None:
    node = task("TERMINATE", "t", optional=True, inputParameters={"terminationStatus": "FAILED"})
    assert problems(node) == [("tasks[0].optional", "a TERMINATE task cannot be optional")]


def test_do_while_without_a_loop_condition_or_body() -> None:
    assert problems(task("DO_WHILE", "l", loopOver=[simple("b")])) == [
        ("tasks[0].loopCondition", "required (JavaScript; may be empty with items)")
    ]
    assert problems(task("DO_WHILE", "l", loopCondition="true")) == [
        ("tasks[0].loopOver", "a DO_WHILE needs the tasks of its body")
    ]


def test_do_while_with_a_condition_that_does_not_parse_or_a_bad_keep_last_n() -> None:
    assert problems(do_while("l", "$.x <", simple("b"))) == [
        (
            "tasks[0].loopCondition",
            "JavaScript does not parse: SyntaxError: unexpected token in expression: ''",
        )
    ]
    assert problems(do_while("l", "true", simple("b"), inputParameters={"keepLastN": 0})) == [
        ("tasks[0].inputParameters.keepLastN", "a whole number of iterations, at least 1")
    ]


def test_tasks_in_a_loop_body_are_checked_too() -> None:
    body = task("SWITCH", "s", evaluatorType="value-param", expression="k")
    assert problems(do_while("l", "true", body)) == [
        ("tasks[0].loopOver[0].decisionCases", "a SWITCH needs at least one case")
    ]


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("function (", "JavaScript does not parse: SyntaxError: function name expected"),
        ("return 1", "JavaScript does not parse: SyntaxError: return not in a function"),
    ],
)
def test_inline_javascript_that_does_not_parse(expression: str, message: str) -> None:
    assert problems(inline("i", expression)) == [("tasks[0].inputParameters.expression", message)]


def test_inline_without_expression_or_with_an_unknown_evaluator() -> None:
    assert problems(task("INLINE", "i", inputParameters={"evaluatorType": "javascript"})) == [
        ("tasks[0].inputParameters.expression", "required: the script to run")
    ]
    assert problems(task("INLINE", "i", inputParameters={"evaluatorType": "lua", "expression": "1"})) == [
        (
            "tasks[0].inputParameters.evaluatorType",
            "'lua' is not supported (javascript, graaljs, value-param)",
        )
    ]


def test_inline_expressions_built_at_run_time_are_not_parsed_at_registration() -> None:
    parse_workflow_def({"name": "w", "tasks": [inline("i", "${workflow.input.script}")]})


def test_sub_workflow_without_sub_workflow_param_or_name() -> None:
    assert problems(task("SUB_WORKFLOW", "s")) == [
        ("tasks[0].subWorkflowParam", "required: the name (and version) of the workflow to run")
    ]
    assert problems(task("SUB_WORKFLOW", "s", subWorkflowParam={"version": 1})) == [
        ("tasks[0].subWorkflowParam.name", "required (or an inline workflowDefinition)")
    ]
    assert problems(task("SUB_WORKFLOW", "s", subWorkflowParam={"name": "c", "bogus": 1})) == [
        ("tasks[0].subWorkflowParam.bogus", "unknown field (not a Conductor field Cairn knows)")
    ]


@pytest.mark.parametrize(
    ("sink", "message"),
    [
        (
            "sqs:queue",
            "sink 'sqs:queue' is not supported by Cairn: use kafka:<topic>, conductor or conductor:<queue>",
        ),
        (
            "conductor:a:b",
            "sink 'conductor:a:b': a conductor sink is `conductor` or `conductor:<queue>` "
            "(queue: letters, digits, '.', '_', '-')",
        ),
        (
            "kafka:bad topic",
            "sink 'kafka:bad topic': a Kafka topic name is letters, digits, '.', '_' and '-' (at most 249)",
        ),
        (None, "required: where to publish, kafka:<topic> or conductor"),
    ],
)
def test_event_with_a_sink_cairn_cannot_publish_to(sink: str | None, message: str) -> None:
    node = task("EVENT", "e") if sink is None else task("EVENT", "e", sink=sink)
    assert problems(node) == [("tasks[0].sink", message)]


def test_conductor_sinks_are_taken() -> None:
    for sink in ("conductor", "conductor:approvals"):
        parse_workflow_def({"name": "w", "tasks": [task("EVENT", "e", sink=sink)]})


def test_event_sinks_built_at_run_time_are_left_for_run_time() -> None:
    parse_workflow_def({"name": "w", "tasks": [task("EVENT", "e", sink="${workflow.input.sink}")]})


def test_http_without_a_request() -> None:
    assert problems(task("HTTP", "h")) == [
        ("tasks[0].inputParameters.http_request", "required: {uri, method, ...} of the request to make")
    ]
    assert problems(task("HTTP", "h", inputParameters={"uri": "https://x"})) == [
        ("tasks[0].inputParameters.http_request", "required: {uri, method, ...} of the request to make")
    ]
    assert problems(task("HTTP", "h", inputParameters={"http_request": {"uri": "https://x"}})) == [
        ("tasks[0].inputParameters.http_request.method", "required")
    ]
    parse_workflow_def(
        {"name": "w", "tasks": [task("HTTP", "h", inputParameters={"uri": "https://x", "method": "GET"})]}
    )


def test_other_operators_missing_what_they_need() -> None:
    assert problems(task("EXCLUSIVE_JOIN", "e")) == [
        ("tasks[0].joinOn", "an EXCLUSIVE_JOIN needs the tasks it joins")
    ]
    assert problems(task("DYNAMIC", "d")) == [
        ("tasks[0].dynamicTaskNameParam", "required: the input key that names the task to run")
    ]
    assert problems(task("JSON_JQ_TRANSFORM", "q")) == [
        ("tasks[0].inputParameters.queryExpression", "required: the jq program to run")
    ]
    assert problems(task("START_WORKFLOW", "s")) == [
        ("tasks[0].inputParameters.startWorkflow", "required: a StartWorkflowRequest (name, input, ...)")
    ]
    assert problems(task("START_WORKFLOW", "s", inputParameters={"startWorkflow": {"version": 1}})) == [
        ("tasks[0].inputParameters.startWorkflow.name", "required")
    ]
    assert problems(task("FORK_JOIN", "f"), join("j")) == [
        ("tasks[0].forkTasks", "a FORK_JOIN needs at least one branch")
    ]
    assert problems(task("FORK_JOIN", "f", forkTasks=[[simple("a")], []]), join("j")) == [
        ("tasks[0].forkTasks[1]", "an empty branch cannot run")
    ]
    [(path, message)] = problems(task("FORK_JOIN_DYNAMIC", "d"), join("j"))
    assert path == "tasks[0].dynamicForkTasksParam" and "forkTaskInputs" in message


def test_every_problem_of_a_tree_is_reported_at_once() -> None:
    tree = [
        simple("a__1"),
        fork("f", [task("TERMINATE", "t", inputParameters={"terminationStatus": "NOPE"})]),
        task("HTTP", "h"),
    ]
    assert [path for path, _ in problems(*tree)] == [
        "tasks[0].taskReferenceName",
        "tasks[1]",
        "tasks[1].forkTasks[0][0].inputParameters.terminationStatus",
        "tasks[2].inputParameters.http_request",
    ]


def test_join_on_written_on_the_fork_itself_is_accepted_as_conductor_does() -> None:
    """conductor-python's ForkTask writes joinOn on the FORK_JOIN node; Conductor ignores it."""
    forked = {**fork("f", [simple("a")], [simple("b")]), "joinOn": ["a", "b"]}
    parsed = parse_workflow_def({"name": "w", "tasks": [forked, join("j", "a", "b")]})
    assert parsed.tasks[0].join_on == ["a", "b"]


def test_an_inline_sub_workflow_definition_is_checked_with_the_parent() -> None:
    child = {
        "name": "kid",
        "inputTemplate": {"a": 1},
        "tasks": [{"name": "x", "taskReferenceName": "x", "type": "BOGUS"}],
    }
    node = {
        "name": "kid",
        "taskReferenceName": "kid",
        "type": "SUB_WORKFLOW",
        "subWorkflowParam": {"name": "kid", "workflowDefinition": child},
    }
    found = dict(problems(node))
    assert "tasks[0].subWorkflowParam.workflowDefinition.inputTemplate" in found
    assert found["tasks[0].subWorkflowParam.workflowDefinition.tasks[0].type"] == "unknown task type 'BOGUS'"
