"""One workflow definition per operator, and nested combinations, for both servers.

`build_cases(prefix, http_base)` makes every case's definitions with names unique to one test
run (`<prefix>...`, task types included), so reruns on a kept Conductor never collide with an
earlier run's definitions. The first definition of a case is the one started; the others are its
children (registered with it, in one list). The SIMPLE task types are served by worker.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tests.conformance.operation_cases import Step, build_operation_cases

JS = "javascript"


@dataclass(frozen=True)
class Case:
    name: str
    workflows: list[dict[str, Any]]
    input: dict[str, Any] = field(default_factory=dict)
    human_output: dict[str, Any] | None = None
    """When set, every HUMAN task that is IN_PROGRESS is completed with this output through
    `POST /api/tasks`."""
    within_s: float = 60.0
    needs_conductor_kafka: bool = False
    """An EVENT to a `kafka:` sink: Conductor publishes only when it was started with Kafka event
    queues (CAIRN_LOCAL_CONDUCTOR_KAFKA_BOOTSTRAP), otherwise its task FAILS 'Unknown queue type'."""
    steps: tuple[Step, ...] = ()
    """Lifecycle operations to make on the started workflow, in order (operation_cases.py)."""
    idempotency_key: str | None = None
    """The first start carries this idempotencyKey (strategy FAIL, the clients' default)."""

    @property
    def main(self) -> dict[str, Any]:
        return self.workflows[0]


def task_defs(prefix: str) -> list[dict[str, Any]]:
    """The worker's task types: no retries (so a failure is final at once), except `flaky`."""
    common = {
        "ownerEmail": "conformance@example.com",
        "retryCount": 0,
        "retryLogic": "FIXED",
        "retryDelaySeconds": 1,
        "timeoutSeconds": 0,
        "timeoutPolicy": "TIME_OUT_WF",
        "responseTimeoutSeconds": 60,
    }
    defs = [{**common, "name": f"{prefix}{kind}"} for kind in ("echo", "fail", "once", "tools", "think")]
    defs.append({**common, "name": f"{prefix}flaky", "retryCount": 1})
    return defs


def build_cases(prefix: str, http_base: str = "http://127.0.0.1:9") -> dict[str, Case]:
    """`http_base`: the fixed HTTP server the HTTP cases call (tests/conformance/httpserver.py)."""

    def name(short: str) -> str:
        return f"{prefix}{short}"

    def wf(
        short: str, tasks: list[dict[str, Any]], out: dict[str, Any] | None = None, **extra: Any
    ) -> dict[str, Any]:
        return {
            "name": name(short),
            "version": 1,
            "schemaVersion": 2,
            "ownerEmail": "conformance@example.com",
            "timeoutSeconds": 0,
            "tasks": tasks,
            "outputParameters": out or {},
            **extra,
        }

    def simple(ref: str, kind: str = "echo", **inputs: Any) -> dict[str, Any]:
        return {"name": name(kind), "taskReferenceName": ref, "type": "SIMPLE", "inputParameters": inputs}

    def inline(ref: str, expression: str, **inputs: Any) -> dict[str, Any]:
        return {
            "name": ref,
            "taskReferenceName": ref,
            "type": "INLINE",
            "inputParameters": {"evaluatorType": JS, "expression": expression, **inputs},
        }

    def switch(
        ref: str,
        evaluator: str,
        expression: str,
        cases: dict[str, list[dict[str, Any]]],
        default: list[dict[str, Any]] | None = None,
        **inputs: Any,
    ) -> dict[str, Any]:
        task: dict[str, Any] = {
            "name": ref,
            "taskReferenceName": ref,
            "type": "SWITCH",
            "evaluatorType": evaluator,
            "expression": expression,
            "inputParameters": inputs,
            "decisionCases": cases,
        }
        if default is not None:
            task["defaultCase"] = default
        return task

    def fork(ref: str, branches: list[list[dict[str, Any]]]) -> dict[str, Any]:
        return {"name": ref, "taskReferenceName": ref, "type": "FORK_JOIN", "forkTasks": branches}

    def join(ref: str, join_on: list[str] | None = None) -> dict[str, Any]:
        task: dict[str, Any] = {"name": ref, "taskReferenceName": ref, "type": "JOIN"}
        if join_on is not None:
            task["joinOn"] = join_on
        return task

    def do_while(ref: str, condition: str, body: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        return {
            "name": ref,
            "taskReferenceName": ref,
            "type": "DO_WHILE",
            "loopCondition": condition,
            "loopOver": body,
            "inputParameters": extra.pop("inputParameters", {}),
            **extra,
        }

    def sub(ref: str, child: str, **inputs: Any) -> dict[str, Any]:
        return {
            "name": ref,
            "taskReferenceName": ref,
            "type": "SUB_WORKFLOW",
            "subWorkflowParam": {"name": name(child), "version": 1},
            "inputParameters": inputs,
        }

    cases = [
        # ---- SWITCH ------------------------------------------------------------------------------
        Case(
            "switch_value_param",
            [
                wf(
                    "switch_value_param",
                    [
                        switch(
                            "sw",
                            "value-param",
                            "kind",
                            {"a": [inline("case_a", "'took a'")], "b": [simple("case_b", x=2)]},
                            [inline("case_default", "'took default'")],
                            kind="${workflow.input.kind}",
                        ),
                        inline("after", "'after ' + $.c", c="${sw.output.selectedCase}"),
                    ],
                    {"case": "${sw.output.evaluationResult}", "b": "${case_b.output.doubled}"},
                )
            ],
            {"kind": "b"},
        ),
        Case(
            "switch_javascript",
            [
                wf(
                    "switch_javascript",
                    [
                        switch(
                            "sw_js",
                            JS,
                            "$.n > 5 ? 'big' : 'small'",
                            {"big": [inline("js_big", "'big'")], "small": [inline("js_small", "'small'")]},
                            [],
                            n="${workflow.input.n}",
                        ),
                        switch(
                            "sw_graal",
                            "graaljs",
                            "(function () { return $.n * 2; })()",
                            {"18": [simple("graal_18", x="${workflow.input.n}")]},
                            [inline("graal_default", "'default'")],
                            n="${workflow.input.n}",
                        ),
                        switch(
                            "sw_bool",
                            JS,
                            "$.n > 100",
                            {"true": [inline("bool_true", "true")], "false": [inline("bool_false", "false")]},
                            n="${workflow.input.n}",
                        ),
                    ],
                    {"js": "${sw_js.output.selectedCase}", "graal": "${sw_graal.output.evaluationResult}"},
                )
            ],
            {"n": 9},
        ),
        Case(
            "switch_empty_case",
            [
                wf(
                    "switch_empty_case",
                    [
                        switch(
                            "sw",
                            "value-param",
                            "kind",
                            {"skip": [], "other": [inline("other", "'other'")]},
                            [inline("default_task", "'default'")],
                            kind="${workflow.input.kind}",
                        ),
                        inline("after", "'after'"),
                    ],
                    {"selected": "${sw.output.selectedCase}", "default": "${default_task.output.result}"},
                )
            ],
            {"kind": "skip"},
        ),
        Case(
            "switch_default_case",
            [
                wf(
                    "switch_default_case",
                    [
                        switch(
                            "sw",
                            "value-param",
                            "kind",
                            {"a": [inline("case_a", "'a'")]},
                            [simple("default_simple", x=7), inline("default_inline", "$.d + 1", d=7)],
                            kind="${workflow.input.kind}",
                        ),
                    ],
                    {"selected": "${sw.output.selectedCase}", "d": "${default_simple.output.doubled}"},
                )
            ],
            {"kind": "zzz"},
        ),
        # ---- DECISION (legacy; Conductor 3.32 still accepts it) ---------------------------------
        Case(
            "decision",
            [
                wf(
                    "decision",
                    [
                        {
                            "name": "dec_param",
                            "taskReferenceName": "dec_param",
                            "type": "DECISION",
                            "caseValueParam": "k",
                            "inputParameters": {"k": "${workflow.input.k}"},
                            "decisionCases": {"a": [inline("dec_a", "'a'")], "b": [inline("dec_b", "'b'")]},
                            "defaultCase": [inline("dec_default", "'default'")],
                        },
                        {
                            "name": "dec_expr",
                            "taskReferenceName": "dec_expr",
                            "type": "DECISION",
                            "caseExpression": "$.n > 1 ? 'many' : 'one'",
                            "inputParameters": {"n": "${workflow.input.n}"},
                            "decisionCases": {"many": [simple("dec_many", x="${workflow.input.n}")]},
                        },
                        {
                            "name": "dec_empty",
                            "taskReferenceName": "dec_empty",
                            "type": "DECISION",
                            "caseValueParam": "k",
                            "inputParameters": {"k": "empty"},
                            "decisionCases": {"empty": []},
                            "defaultCase": [inline("dec_empty_default", "'fell back'")],
                        },
                    ],
                    {"param": "${dec_param.output.caseOutput}", "fallback": "${dec_empty_default.output}"},
                )
            ],
            {"k": "b", "n": 4},
        ),
        # ---- DO_WHILE ----------------------------------------------------------------------------
        Case(
            "do_while_condition",
            [
                wf(
                    "do_while_condition",
                    [
                        do_while(
                            "loop",
                            "if ($.loop['iteration'] < $.max) { true; } else { false; }",
                            [
                                simple("body_simple", x="${loop.output.iteration}"),
                                inline("body_inline", "$.d * 10", d="${body_simple.output.doubled}"),
                            ],
                            inputParameters={"max": "${workflow.input.max}"},
                        ),
                        inline("after", "$.last", last="${body_inline.output.result}"),
                    ],
                    {"loop": "${loop.output}", "last": "${after.output.result}"},
                )
            ],
            {"max": 3},
        ),
        Case(
            "do_while_items",
            [
                wf(
                    "do_while_items",
                    [
                        do_while(
                            "loop",
                            "",
                            [
                                inline(
                                    "item_inline",
                                    "$.item + '#' + $.index",
                                    item="${loop.output.loopItem}",
                                    index="${loop.output.loopIndex}",
                                ),
                                simple("item_simple", item="${loop.output.loopItem}"),
                            ],
                            items="${workflow.input.items}",
                        ),
                    ],
                    {"loop": "${loop.output}"},
                )
            ],
            {"items": ["p", "q", "r"]},
        ),
        Case(
            "do_while_keep_last_n",
            [
                wf(
                    "do_while_keep_last_n",
                    [
                        do_while(
                            "loop",
                            "$.loop['iteration'] < 4",
                            [inline("body", "$.i * $.i", i="${loop.output.iteration}")],
                            inputParameters={"keepLastN": 2},
                        ),
                    ],
                    {"loop": "${loop.output}", "last": "${body.output.result}"},
                )
            ],
        ),
        # ---- FORK_JOIN / JOIN / EXCLUSIVE_JOIN ---------------------------------------------------
        Case(
            "fork_join",
            [
                wf(
                    "fork_join",
                    [
                        fork(
                            "fork",
                            [
                                [simple("left", x=1)],
                                [inline("right1", "'R1'"), simple("right2", x="${right1.output.result}")],
                            ],
                        ),
                        join("join", ["left", "right2"]),
                    ],
                    {"join": "${join.output}"},
                )
            ],
        ),
        Case(
            "join_optional_failure",
            [
                wf(
                    "join_optional_failure",
                    [
                        fork(
                            "fork",
                            [
                                [{**simple("maybe", "fail", x=1), "optional": True}],
                                [simple("fine", x=2)],
                            ],
                        ),
                        join("join", ["maybe", "fine"]),
                        inline("after", "'after'"),
                    ],
                    {"join": "${join.output}"},
                )
            ],
        ),
        Case(
            "exclusive_join",
            [
                wf(
                    "exclusive_join",
                    [
                        switch(
                            "sw",
                            "value-param",
                            "kind",
                            {
                                "a": [inline("a1", "'a1'"), simple("a2", x=3)],
                                "b": [inline("b1", "'b1'")],
                            },
                            kind="${workflow.input.kind}",
                        ),
                        {
                            "name": "xjoin",
                            "taskReferenceName": "xjoin",
                            "type": "EXCLUSIVE_JOIN",
                            "joinOn": ["a2", "b1"],
                        },
                    ],
                    {"joined": "${xjoin.output}"},
                )
            ],
            {"kind": "a"},
        ),
        # ---- FORK_JOIN_DYNAMIC -------------------------------------------------------------------
        Case(
            "dynamic_fork_tasks_param",
            [
                wf(
                    "dynamic_fork_tasks_param",
                    [
                        inline(
                            "prep",
                            "(function () {"
                            " return {tasks: [$.a, $.b], inputs: {dfa: {x: 1}, dfb: {x: 2}}}; })()",
                            a={"name": name("echo"), "taskReferenceName": "dfa", "type": "SIMPLE"},
                            b={"name": name("echo"), "taskReferenceName": "dfb", "type": "SIMPLE"},
                        ),
                        {
                            "name": "dfork",
                            "taskReferenceName": "dfork",
                            "type": "FORK_JOIN_DYNAMIC",
                            "dynamicForkTasksParam": "dynamicTasks",
                            "dynamicForkTasksInputParamName": "dynamicTasksInput",
                            "inputParameters": {
                                "dynamicTasks": "${prep.output.result.tasks}",
                                "dynamicTasksInput": "${prep.output.result.inputs}",
                            },
                        },
                        join("djoin"),
                    ],
                    {"joined": "${djoin.output}"},
                )
            ],
        ),
        Case(
            "dynamic_fork_task_inputs",
            [
                wf(
                    "dynamic_fork_task_inputs",
                    [
                        {
                            "name": "dfork",
                            "taskReferenceName": "dfork",
                            "type": "FORK_JOIN_DYNAMIC",
                            "inputParameters": {
                                "forkTaskName": name("echo"),
                                "forkTaskInputs": "${workflow.input.inputs}",
                            },
                        },
                        join("djoin"),
                    ],
                    {"joined": "${djoin.output}"},
                )
            ],
            {"inputs": [{"x": 1}, {"x": 2, "tag": "two"}, 3]},
        ),
        # ---- SUB_WORKFLOW / START_WORKFLOW -------------------------------------------------------
        Case(
            "sub_workflow",
            [
                wf(
                    "sub_workflow",
                    [sub("sub", "sub_workflow_child", x="${workflow.input.x}")],
                    {"sub": "${sub.output}", "sum": "${sub.output.sum}"},
                ),
                wf(
                    "sub_workflow_child",
                    [
                        simple("child_simple", x="${workflow.input.x}"),
                        inline("child_sum", "$.d + 1", d="${child_simple.output.doubled}"),
                    ],
                    {"sum": "${child_sum.output.result}", "doubled": "${child_simple.output.doubled}"},
                ),
            ],
            {"x": 5},
        ),
        Case(
            "sub_workflow_failure",
            [
                wf(
                    "sub_workflow_failure",
                    [sub("sub", "sub_workflow_failure_child", x=1), inline("never", "'never'")],
                    {"sub": "${sub.output}"},
                ),
                wf(
                    "sub_workflow_failure_child",
                    [inline("child_first", "'first'"), simple("child_fail", "fail", x=1)],
                    {"first": "${child_first.output.result}"},
                ),
            ],
        ),
        Case(
            "start_workflow",
            [
                wf(
                    "start_workflow",
                    [
                        {
                            "name": "start",
                            "taskReferenceName": "start",
                            "type": "START_WORKFLOW",
                            "inputParameters": {
                                "startWorkflow": {
                                    "name": name("start_workflow_target"),
                                    "version": 1,
                                    "input": {"v": "${workflow.input.v}"},
                                }
                            },
                        },
                        inline("after", "'started'"),
                    ],
                    {"started": "${start.output.workflowId}"},
                ),
                wf("start_workflow_target", [inline("target", "$.v", v="${workflow.input.v}")]),
            ],
            {"v": 11},
        ),
        # ---- SET_VARIABLE / TERMINATE ------------------------------------------------------------
        Case(
            "set_variable",
            [
                wf(
                    "set_variable",
                    [
                        {
                            "name": "setvar",
                            "taskReferenceName": "setvar",
                            "type": "SET_VARIABLE",
                            "inputParameters": {
                                "counter": 41,
                                "label": "${workflow.input.label}",
                                "nested": {"k": [1, 2]},
                                "missing": "${workflow.input.nothing}",
                            },
                        },
                        inline("readvar", "$.c + 1", c="${workflow.variables.counter}"),
                        {
                            "name": "setvar2",
                            "taskReferenceName": "setvar2",
                            "type": "SET_VARIABLE",
                            "inputParameters": {"counter": "${readvar.output.result}"},
                        },
                    ],
                    {"variables": "${workflow.variables}", "read": "${readvar.output.result}"},
                )
            ],
            {"label": "L"},
        ),
        Case(
            "terminate_completed",
            [
                wf(
                    "terminate_completed",
                    [
                        inline("before", "'before'"),
                        {
                            "name": "term",
                            "taskReferenceName": "term",
                            "type": "TERMINATE",
                            "inputParameters": {
                                "terminationStatus": "COMPLETED",
                                "terminationReason": "done early",
                                "workflowOutput": {"early": True, "before": "${before.output.result}"},
                            },
                        },
                        inline("after", "'never'"),
                    ],
                    {"ignored": "outputParameters are not used after a TERMINATE"},
                )
            ],
        ),
        Case(
            "terminate_failed",
            [
                wf(
                    "terminate_failed",
                    [
                        fork(
                            "fork",
                            [
                                [
                                    {
                                        "name": "term",
                                        "taskReferenceName": "term",
                                        "type": "TERMINATE",
                                        "inputParameters": {
                                            "terminationStatus": "FAILED",
                                            "terminationReason": "bad input",
                                            "workflowOutput": "${workflow.input.why}",
                                        },
                                    }
                                ],
                                [{"name": "wait", "taskReferenceName": "wait", "type": "WAIT"}],
                            ],
                        ),
                        join("join", ["term", "wait"]),
                    ],
                    failureWorkflow=name("terminate_failed_handler"),
                ),
                wf("terminate_failed_handler", [inline("handle", "'handled'")]),
            ],
            {"why": "because"},
        ),
        # ---- INLINE / JSON_JQ_TRANSFORM / NOOP ---------------------------------------------------
        Case(
            "inline_result_types",
            [
                wf(
                    "inline_result_types",
                    [
                        inline("int", "$.a + 1", a="${workflow.input.a}"),
                        inline("float", "$.a / 4", a="${workflow.input.a}"),
                        inline("whole_float", "1.0"),
                        inline("string", "'s-' + $.a", a="${workflow.input.a}"),
                        inline(
                            "object",
                            "({a: $.a, list: [1, 'two'], inner: {deep: true}})",
                            a="${workflow.input.a}",
                        ),
                        inline("array", "[1, 'two', 3.5, true, [4]]"),
                        inline("boolean", "$.a > 1", a="${workflow.input.a}"),
                        inline("null", "null"),
                        inline("undefined", "(function () {})()"),
                        inline("es6", "(() => { const xs = [1, 2, 3]; return xs.map(x => x * 2); })()"),
                        inline("input_binding", "$.evaluatorType + ':' + typeof $.expression"),
                    ],
                    {"int": "${int.output.result}", "object": "${object.output.result}"},
                )
            ],
            {"a": 2},
        ),
        Case(
            "json_jq_transform",
            [
                wf(
                    "json_jq_transform",
                    [
                        {
                            "name": "jq",
                            "taskReferenceName": "jq",
                            "type": "JSON_JQ_TRANSFORM",
                            "inputParameters": {
                                "items": "${workflow.input.items}",
                                "queryExpression": (
                                    "{total: (.items | map(.n) | add), names: [.items[].name]}"
                                ),
                            },
                        },
                        {
                            "name": "jq_multi",
                            "taskReferenceName": "jq_multi",
                            "type": "JSON_JQ_TRANSFORM",
                            "inputParameters": {
                                "items": "${workflow.input.items}",
                                "queryExpression": ".items[] | .name",
                            },
                        },
                        {
                            "name": "jq_empty",
                            "taskReferenceName": "jq_empty",
                            "type": "JSON_JQ_TRANSFORM",
                            "inputParameters": {"queryExpression": "empty"},
                        },
                        {
                            "name": "jq_runtime_error",
                            "taskReferenceName": "jq_runtime_error",
                            "type": "JSON_JQ_TRANSFORM",
                            "optional": True,
                            "inputParameters": {"n": 1, "queryExpression": ".n.c"},
                        },
                        {
                            "name": "jq_parse_error",
                            "taskReferenceName": "jq_parse_error",
                            "type": "JSON_JQ_TRANSFORM",
                            "optional": True,
                            "inputParameters": {"queryExpression": "this is not jq ((("},
                        },
                        inline("after", "'after'"),
                    ],
                    {"result": "${jq.output.result}", "names": "${jq_multi.output.resultList}"},
                )
            ],
            {"items": [{"name": "a", "n": 1}, {"name": "b", "n": 2}]},
        ),
        Case(
            "noop",
            [
                wf(
                    "noop",
                    [
                        {
                            "name": "nothing",
                            "taskReferenceName": "nothing",
                            "type": "NOOP",
                            "inputParameters": {"a": 1},
                        },
                        inline("after", "'after'"),
                    ],
                    {"after": "${after.output.result}"},
                )
            ],
        ),
        # ---- HUMAN / DYNAMIC / WAIT / retries ----------------------------------------------------
        Case(
            "human",
            [
                wf(
                    "human",
                    [
                        {
                            "name": "approve",
                            "taskReferenceName": "approve",
                            "type": "HUMAN",
                            "inputParameters": {"what": "${workflow.input.what}"},
                        },
                        inline("after", "$.ok ? 'approved' : 'rejected'", ok="${approve.output.approved}"),
                    ],
                    {"decision": "${after.output.result}", "by": "${approve.output.by}"},
                )
            ],
            {"what": "a change"},
            human_output={"approved": True, "by": "conformance"},
        ),
        Case(
            "dynamic",
            [
                wf(
                    "dynamic",
                    [
                        {
                            "name": "dyn",
                            "taskReferenceName": "dyn",
                            "type": "DYNAMIC",
                            "dynamicTaskNameParam": "taskToRun",
                            "inputParameters": {"taskToRun": "${workflow.input.which}", "x": 21},
                        }
                    ],
                    {"doubled": "${dyn.output.doubled}"},
                )
            ],
            {"which": name("echo")},
        ),
        Case(
            "wait_duration",
            [
                wf(
                    "wait_duration",
                    [
                        {
                            "name": "wait",
                            "taskReferenceName": "wait",
                            "type": "WAIT",
                            "inputParameters": {"duration": "2 seconds"},
                        },
                        inline("after", "'waited'"),
                    ],
                    {"after": "${after.output.result}"},
                )
            ],
        ),
        Case(
            "retried_simple",
            [
                wf(
                    "retried_simple",
                    [simple("flaky", "flaky", x=4)],
                    {"attempt": "${flaky.output.attempt}"},
                )
            ],
        ),
        # ---- HTTP / EVENT (run by Cairn's system-task worker) -------------------------------------
        Case(
            "http",
            [
                wf(
                    "http",
                    [
                        {
                            "name": "http_json",
                            "taskReferenceName": "http_json",
                            "type": "HTTP",
                            "inputParameters": {
                                "http_request": {
                                    "uri": f"{http_base}/json",
                                    "method": "GET",
                                    "connectionTimeOut": 3000,
                                    "readTimeOut": 3000,
                                }
                            },
                        },
                        {
                            "name": "http_echo",
                            "taskReferenceName": "http_echo",
                            "type": "HTTP",
                            "inputParameters": {
                                "uri": f"{http_base}/echo",
                                "method": "POST",
                                "body": {"a": "${workflow.input.a}", "list": [1, 2]},
                            },
                        },
                        {
                            "name": "http_text",
                            "taskReferenceName": "http_text",
                            "type": "HTTP",
                            "inputParameters": {
                                "http_request": {
                                    "uri": f"{http_base}/text",
                                    "method": "GET",
                                    "accept": "text/plain",
                                }
                            },
                        },
                        {
                            "name": "http_number",
                            "taskReferenceName": "http_number",
                            "type": "HTTP",
                            "inputParameters": {
                                "http_request": {"uri": f"{http_base}/number", "method": "GET"}
                            },
                        },
                    ],
                    {
                        "status": "${http_json.output.response.statusCode}",
                        "hello": "${http_json.output.response.body.hello}",
                        "echoed": "${http_echo.output.response.body.body}",
                    },
                )
            ],
            {"a": "x"},
        ),
        Case(
            "http_not_found",
            [
                wf(
                    "http_not_found",
                    [
                        {
                            "name": "http_missing",
                            "taskReferenceName": "http_missing",
                            "type": "HTTP",
                            "optional": True,
                            "inputParameters": {
                                "http_request": {"uri": f"{http_base}/missing", "method": "GET"}
                            },
                        },
                        inline("after", "'after'"),
                    ],
                    {"status": "${http_missing.status}"},
                )
            ],
        ),
        Case(
            "event_kafka",
            [
                wf(
                    "event_kafka",
                    [
                        {
                            "name": "ev",
                            "taskReferenceName": "ev",
                            "type": "EVENT",
                            "sink": f"kafka:{prefix}events",
                            "inputParameters": {"hello": "${workflow.input.hello}", "n": 1},
                        },
                        inline("after", "'after'"),
                    ],
                    {"event": "${ev.output}"},
                )
            ],
            {"hello": "kafka"},
            needs_conductor_kafka=True,
        ),
        # ---- nested ------------------------------------------------------------------------------
        Case(
            "nested_switch_fork_loop_sub",
            [
                wf(
                    "nested_switch_fork_loop_sub",
                    [
                        do_while(
                            "loop",
                            "$.loop['iteration'] < 2",
                            [
                                fork(
                                    "fork",
                                    [
                                        [
                                            switch(
                                                "sw",
                                                "value-param",
                                                "it",
                                                {
                                                    "1": [
                                                        sub(
                                                            "sub",
                                                            "nested_child",
                                                            x="${loop.output.iteration}",
                                                        )
                                                    ],
                                                    "2": [
                                                        inline(
                                                            "second",
                                                            "'second ' + $.i",
                                                            i="${loop.output.iteration}",
                                                        )
                                                    ],
                                                },
                                                it="${loop.output.iteration}",
                                            )
                                        ],
                                        [simple("side", x="${loop.output.iteration}")],
                                    ],
                                ),
                                join("join", ["sw", "side"]),
                            ],
                        ),
                    ],
                    {"loop": "${loop.output}"},
                ),
                wf(
                    "nested_child",
                    [
                        {
                            "name": "child_wait",
                            "taskReferenceName": "child_wait",
                            "type": "WAIT",
                            "inputParameters": {"duration": "2 seconds"},
                        },
                        simple("child_simple", x="${workflow.input.x}"),
                    ],
                    {"doubled": "${child_simple.output.doubled}"},
                ),
            ],
        ),
        Case(
            "nested_loop_fork_sub_joined",
            [
                wf(
                    "nested_loop_fork_sub_joined",
                    [
                        do_while(
                            "loop",
                            "$.loop['iteration'] < 2",
                            [
                                fork(
                                    "fork",
                                    [
                                        [
                                            switch(
                                                "sw",
                                                JS,
                                                "$.it % 2 == 1 ? 'odd' : 'even'",
                                                {
                                                    "odd": [
                                                        inline(
                                                            "odd",
                                                            "'odd ' + $.i",
                                                            i="${loop.output.iteration}",
                                                        )
                                                    ],
                                                    "even": [simple("even", x="${loop.output.iteration}")],
                                                },
                                                it="${loop.output.iteration}",
                                            )
                                        ],
                                        [sub("sub", "nested_joined_child", x="${loop.output.iteration}")],
                                    ],
                                ),
                                join("join", ["sw", "sub"]),
                            ],
                        ),
                    ],
                    {"loop": "${loop.output}", "sub": "${sub.output.doubled}"},
                ),
                wf(
                    "nested_joined_child",
                    [simple("child_simple", x="${workflow.input.x}")],
                    {"doubled": "${child_simple.output.doubled}"},
                ),
            ],
        ),
        Case(
            "nested_do_while",
            [
                wf(
                    "nested_do_while",
                    [
                        do_while(
                            "outer",
                            "$.outer['iteration'] < 2",
                            [
                                do_while(
                                    "inner",
                                    "$.inner['iteration'] < 2",
                                    [
                                        inline(
                                            "body",
                                            "$.o * 10 + $.i",
                                            o="${outer.output.iteration}",
                                            i="${inner.output.iteration}",
                                        )
                                    ],
                                ),
                            ],
                        ),
                    ],
                    {"outer": "${outer.output}"},
                )
            ],
            within_s=30,
        ),
        Case(
            "optional_failure_last_task",
            [
                wf(
                    "optional_failure_last_task",
                    [
                        inline("first", "'first'"),
                        {
                            "name": "jq_last",
                            "taskReferenceName": "jq_last",
                            "type": "JSON_JQ_TRANSFORM",
                            "optional": True,
                            "inputParameters": {"n": 1, "queryExpression": ".n.c"},
                        },
                    ],
                )
            ],
        ),
        Case(
            "optional_failure_last_simple",
            [
                wf(
                    "optional_failure_last_simple",
                    [inline("first", "'first'"), {**simple("fail_last", "fail", x=1), "optional": True}],
                )
            ],
        ),
        Case(
            "inline_error",
            [
                wf(
                    "inline_error",
                    [
                        {
                            **inline("throws", "(function () { throw new Error('boom'); })()"),
                            "optional": True,
                        },
                        {**inline("type_error", "$.missing.deeper"), "optional": True},
                        inline("after", "'after'"),
                    ],
                )
            ],
        ),
        Case(
            "agent_loop",
            [
                wf(
                    "agent_loop",
                    [
                        simple("list_tools", "tools"),
                        do_while(
                            "loop",
                            "$.think['action'] != 'done'",
                            [
                                simple(
                                    "think",
                                    "think",
                                    turn="${loop.output.iteration}",
                                    tools="${list_tools.output.tools}",
                                ),
                                switch(
                                    "route",
                                    "value-param",
                                    "action",
                                    {
                                        "call": [
                                            simple(
                                                "act", tool="${think.output.tool}", x="${think.output.turn}"
                                            )
                                        ],
                                        "done": [],
                                    },
                                    action="${think.output.action}",
                                ),
                            ],
                        ),
                    ],
                    {
                        "turns": "${loop.output.iteration}",
                        "last": "${think.output}",
                        "acted": "${act.output.echo}",
                    },
                )
            ],
        ),
    ]
    cases.extend(build_operation_cases(prefix, Case))
    return {case.name: case for case in cases}
