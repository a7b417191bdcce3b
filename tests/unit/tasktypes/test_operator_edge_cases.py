"""Edge cases where the first version of the tree core contradicted its own docstrings or
Conductor's semantics (docs/research/conductor-operators.md): tolerated failures of operators,
budget splits, Conductor's numbering around forks, nested iteration references, retries that
re-resolve their input, permissive cancellations. Each of these failed before its fix."""

from __future__ import annotations

from shared.core.invariants import invariant_violations
from shared.core.run import Limits
from shared.models.messages import DecideRequest, StartWorkflow, SubWorkflowEnded, TaskMessage
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

# ---- tolerated failures of operators leave the workflow stuck ----------------------------


def test_an_optional_switch_whose_script_fails_lets_the_workflow_go_on() -> None:
    node = switch("s", "$.a.b.c", {"x": [simple("x1")]}, evaluator="javascript")
    f = Flow(workflow({**node, "optional": True}, simple("after")))
    assert f.task("s").status is TaskStatus.COMPLETED_WITH_ERRORS
    assert invariant_violations(f.state) == []
    assert f.dispatched() == ["after"]


def test_a_permissive_switch_whose_script_fails_lets_the_workflow_go_on() -> None:
    node = switch("s", "$.a.b.c", {"x": [simple("x1")]}, evaluator="javascript")
    f = Flow(workflow({**node, "permissive": True}, simple("after")))
    assert f.task("s").status is TaskStatus.FAILED
    assert f.dispatched() == ["after"]
    f.complete("after")
    assert f.state.status is WorkflowStatus.FAILED


def test_an_optional_loop_whose_condition_fails_lets_the_workflow_go_on() -> None:
    f = Flow(workflow({**do_while("loop", "$.nope.x", simple("body")), "optional": True}, simple("after")))
    f.complete("body")
    assert f.task("loop").status is TaskStatus.COMPLETED_WITH_ERRORS
    assert invariant_violations(f.state) == []
    assert f.dispatched() == ["after"]


def test_an_optional_dynamic_fork_with_bad_input_does_not_leave_the_workflow_stuck() -> None:
    dynamic = task(
        "FORK_JOIN_DYNAMIC",
        "df",
        optional=True,
        inputParameters={"forkTaskName": "w", "forkTaskInputs": "${workflow.input.items}"},
    )
    f = Flow(workflow(dynamic, join("j"), simple("after")), {"items": 5})
    assert invariant_violations(f.state) == []


# ---- the step budget -------------------------------------------------------------------


def test_a_decision_stopped_by_the_budget_commits_a_state_that_keeps_the_invariants() -> None:
    f = Flow(workflow(*[noop(f"n{i}") for i in range(4)]), limits=Limits(max_steps=2))
    assert f.outbox(DecideRequest)
    assert invariant_violations(f.state) == []


def test_a_budget_split_fork_numbers_its_join_before_the_branches_later_tasks() -> None:
    definition = workflow(
        fork("f", [noop("b1"), noop("b2")], [noop("c1"), noop("c2")]), join("j", "b2", "c2")
    )
    whole = Flow(definition)
    assert whole.order() == ["f", "b1", "c1", "j", "b2", "c2"]
    split = Flow(definition, limits=Limits(max_steps=3))
    split.send(split.outbox(DecideRequest)[0])
    assert split.order() == whole.order()


# ---- Conductor's order -----------------------------------------------------------------


def test_a_loop_at_a_branch_head_starts_its_body_after_the_fork_s_heads_and_join() -> None:
    definition = workflow(
        fork("f", [do_while("loop", "false", simple("b"))], [simple("c")]), join("j", "loop", "c")
    )
    assert Flow(definition).order() == ["f", "loop", "c", "j", "b__1"]


# ---- expressions -----------------------------------------------------------------------


def test_a_nested_iteration_reference_reads_that_iteration() -> None:
    inner = do_while(
        "inner",
        "$.inner.iteration < 2",
        inline("body", "[$.o, $.i]", o="${outer.output.iteration}", i="${inner.output.iteration}"),
    )
    after = simple("after", inputParameters={"v": "${body__2__1.output.result}"})
    f = Flow(workflow(do_while("outer", "$.outer.iteration < 3", inner), after))
    assert f.record("body__2__1").output_data == {"result": [2, 1]}
    assert f.task("after").input_data == {"v": [2, 1]}


# ---- retries ---------------------------------------------------------------------------


def test_a_retried_sub_workflow_starts_its_child_with_the_original_input() -> None:
    node = task(
        "SUB_WORKFLOW",
        "sub",
        retryCount=1,
        subWorkflowParam={"name": "child"},
        inputParameters={"x": "${workflow.input.x}"},
    )
    f = Flow(workflow(node), {"x": 5})
    assert f.outbox(StartWorkflow)[0].input == {"x": 5}
    f.child_ended("sub", "FAILED", reason="flaky")
    [again] = f.outbox(StartWorkflow)
    assert again.input == {"x": 5}
    assert f.task("sub").input_data["workflowInput"] == {"x": 5}


def test_a_retry_resolves_its_inputs_again() -> None:
    definition = workflow(
        fork(
            "f",
            [simple("a", retries=1, inputParameters={"v": "${workflow.variables.v}"})],
            [simple("b"), task("SET_VARIABLE", "sv", inputParameters={"v": 2})],
        ),
        join("j", "a", "sv"),
        variables={"v": 1},
    )
    f = Flow(definition)
    assert f.task("a").input_data == {"v": 1}
    f.complete("b")
    f.fail("a")
    assert [m.input_data for m in f.outbox(TaskMessage)] == [{"v": 2}]


# ---- endings ---------------------------------------------------------------------------


def test_a_permissive_task_that_was_cancelled_fails_the_workflow_at_its_end() -> None:
    node = task("SUB_WORKFLOW", "sub", permissive=True, subWorkflowParam={"name": "child"})
    f = Flow(workflow(node, simple("after")))
    f.child_ended("sub", "TERMINATED", reason="by an operator")
    assert f.task("sub").status is TaskStatus.CANCELED and f.dispatched() == ["after"]
    f.complete("after")
    assert f.state.status is WorkflowStatus.FAILED


# ---- rejections ------------------------------------------------------------------------


def test_the_end_of_a_child_the_task_does_not_run_is_rejected_with_a_note() -> None:
    f = Flow(workflow(task("SUB_WORKFLOW", "sub", subWorkflowParam={"name": "child"})))
    stray = SubWorkflowEnded(
        id="stray",
        workflow_id=WF_ID,
        task_id=f.task("sub").task_id,
        sub_workflow_id="someone-else",
        status="COMPLETED",
    )
    decision = f.decide(stray)
    assert decision.state.tasks["sub"].status is TaskStatus.IN_PROGRESS
    assert [n.code for n in decision.notes] == ["subworkflow_result_ignored"]


# ---- records ---------------------------------------------------------------------------


def test_a_decision_record_s_input_holds_only_the_case() -> None:
    node = task(
        "DECISION",
        "d",
        caseValueParam="k",
        inputParameters={"k": "${workflow.input.k}"},
        decisionCases={"a": [simple("a1")]},
    )
    f = Flow(workflow(node), {"k": "a"})
    assert f.task("d").input_data == {"case": "a", "hasChildren": "true"}
