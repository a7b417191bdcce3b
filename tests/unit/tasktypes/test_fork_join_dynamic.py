"""FORK_JOIN_DYNAMIC: branches made at run time from `forkTaskInputs` or from a list of tasks; the
FORK record, the JOIN's joinOn, TaskDefs asked for by name, refusals (docs/research/
conductor-operators.md, FORK_JOIN_DYNAMIC; shared/core/tasktypes/fork_dynamic.py)."""

from __future__ import annotations

from typing import Any

import pytest

from shared.core import ids
from shared.models.definitions import TaskDef
from shared.models.messages import StartWorkflow, TaskMessage
from shared.models.runtime import TaskStatus, WorkflowStatus
from tests.unit.tasktypes.builders import Flow, do_while, join, simple, task, workflow


def simple_style(**inputs: Any) -> dict[str, Any]:
    return task(
        "FORK_JOIN_DYNAMIC",
        "df",
        inputParameters={"forkTaskName": "work", "forkTaskInputs": "${workflow.input.items}", **inputs},
    )


def fanout(items: Any, **kw: Any) -> Flow:
    definition = workflow(simple_style(), join("j"), simple("after", inputParameters={"all": "${j.output}"}))
    return Flow(definition, {"items": items}, **kw)


def test_the_task_def_of_a_forked_simple_task_is_asked_for_and_nothing_is_decided_meanwhile() -> None:
    f = fanout([{"a": 1}])
    assert f.decision.needs_task_defs == {"work"}
    assert (f.decision.changed, f.decision.tasks, f.decision.outbox) == (False, [], [])
    assert f.state.tasks == {}
    f.task_defs["work"] = None
    f.send(f.start_message)
    assert f.decision.needs_task_defs == set()
    assert f.dispatched() == ["_work_0"]


def test_forked_branches_and_join_are_created_with_the_fork_in_branch_order() -> None:
    f = fanout([{"a": 1}, 5], task_defs={"work": None})
    assert [(t.reference_task_name, t.seq, t.task_type, t.status) for t in f.history()] == [
        ("df", 1, "FORK", TaskStatus.COMPLETED),
        ("_work_0", 2, "work", TaskStatus.SCHEDULED),
        ("_work_1", 3, "work", TaskStatus.SCHEDULED),
        ("j", 4, "JOIN", TaskStatus.IN_PROGRESS),
    ]
    assert [(m.reference_task_name, m.input_data) for m in f.outbox(TaskMessage)] == [
        ("_work_0", {"a": 1, "__index": 0}),
        ("_work_1", {"input": 5, "__index": 1}),
    ]
    df = f.task("df")
    assert df.input_data["forkedTasks"] == ["_work_0", "_work_1"]
    assert [d["taskReferenceName"] for d in df.input_data["forkedTaskDefs"]] == ["_work_0", "_work_1"]
    assert f.task("j").input_data == {"joinOn": ["_work_0", "_work_1"]}


def test_the_join_collects_every_forked_output() -> None:
    f = fanout([1, 2], task_defs={"work": None})
    f.complete("_work_1", {"r": 1})
    assert f.task("j").status is TaskStatus.IN_PROGRESS
    f.complete("_work_0", {"r": 0})
    assert f.task("j").output_data == {"_work_0": {"r": 0}, "_work_1": {"r": 1}}
    assert f.task("after").input_data == {"all": {"_work_0": {"r": 0}, "_work_1": {"r": 1}}}


def test_an_empty_list_makes_a_join_that_completes_at_once() -> None:
    f = fanout([], task_defs={"work": None})
    assert f.order() == ["df", "j", "after"]
    assert f.task("j").input_data == {"joinOn": []} and f.task("j").status is TaskStatus.COMPLETED


def test_a_forked_task_runs_under_its_registered_task_def() -> None:
    registered = TaskDef(name="work", retryCount=1, retryDelaySeconds=0, responseTimeoutSeconds=20)
    f = fanout([1], task_defs={"work": registered})
    assert [m.response_timeout_seconds for m in f.outbox(TaskMessage)] == [20]
    f.fail("_work_0")
    assert f.task("_work_0").retry_count == 1 and f.dispatched() == ["_work_0"]


def test_a_forked_task_without_a_task_def_gets_no_retries() -> None:
    f = fanout([1], task_defs={"work": None})
    f.fail("_work_0", "nope")
    assert f.state.status is WorkflowStatus.FAILED
    assert f.task("j").status is TaskStatus.CANCELED


def test_optional_is_copied_to_the_branches() -> None:
    definition = workflow({**simple_style(), "optional": True}, join("j"), simple("after"))
    f = Flow(definition, {"items": [1, 2]}, task_defs={"work": None})
    f.fail("_work_0")
    assert f.task("_work_0").status is TaskStatus.COMPLETED_WITH_ERRORS
    f.complete("_work_1")
    assert f.task("j").status is TaskStatus.COMPLETED_WITH_ERRORS
    assert f.dispatched() == ["after"]


def test_a_system_fork_task_type_names_the_branches_after_the_type() -> None:
    df = task(
        "FORK_JOIN_DYNAMIC",
        "df",
        inputParameters={
            "forkTaskType": "INLINE",
            "forkTaskInputs": [{"expression": "$.__index + 40"}, {"expression": "2"}],
        },
    )
    f = Flow(workflow(df, join("j")))
    assert f.order() == ["df", "_INLINE_0", "_INLINE_1", "j"]
    assert f.state.status is WorkflowStatus.COMPLETED
    assert f.state.output == {"_INLINE_0": {"result": 40}, "_INLINE_1": {"result": 2}}


def test_fork_task_workflow_starts_one_child_per_element() -> None:
    df = task(
        "FORK_JOIN_DYNAMIC",
        "df",
        inputParameters={
            "forkTaskWorkflow": "child",
            "forkTaskWorkflowVersion": "2",
            "forkTaskInputs": "${workflow.input.items}",
        },
    )
    f = Flow(workflow(df, join("j")), {"items": [{"a": 1}, {"b": 2}]})
    starts = f.outbox(StartWorkflow)
    assert [(s.name, s.version, s.input) for s in starts] == [
        ("child", 2, {"a": 1, "__index": 0}),
        ("child", 2, {"b": 2, "__index": 1}),
    ]
    assert [s.workflow_id for s in starts] == [
        ids.child_workflow_id(f.task("_child_0").task_id),
        ids.child_workflow_id(f.task("_child_1").task_id),
    ]
    f.child_ended("_child_0", "COMPLETED", {"o": 1})
    f.child_ended("_child_1", "COMPLETED", {"o": 2})
    assert f.task("j").output_data == {
        "_child_0": {"subWorkflowId": starts[0].workflow_id, "o": 1},
        "_child_1": {"subWorkflowId": starts[1].workflow_id, "o": 2},
    }
    assert f.state.status is WorkflowStatus.COMPLETED


def list_style(tasks: Any, inputs: Any, **kw: Any) -> Flow:
    df = task(
        "FORK_JOIN_DYNAMIC",
        "df",
        dynamicForkTasksParam="tasks",
        dynamicForkTasksInputParamName="inputs",
        inputParameters={"tasks": "${workflow.input.tasks}", "inputs": "${workflow.input.inputs}"},
    )
    return Flow(workflow(df, join("j")), {"tasks": tasks, "inputs": inputs}, **kw)


def test_a_list_of_tasks_with_their_inputs_by_reference() -> None:
    tasks = [
        {"name": "x", "taskReferenceName": "x1", "inputParameters": {"own": True}},
        {
            "name": "y",
            "taskReferenceName": "y1",
            "type": "INLINE",
            "inputParameters": {"expression": "$.v * 2"},
        },
    ]
    f = list_style(tasks, {"x1": {"k": 1}, "y1": {"v": 21}}, task_defs={"x": None})
    assert f.order() == ["df", "x1", "y1", "j"]
    assert [(m.reference_task_name, m.task_type, m.input_data) for m in f.outbox(TaskMessage)] == [
        ("x1", "x", {"own": True, "k": 1})
    ]
    assert f.task("y1").output_data == {"result": 42}
    f.complete("x1", {"done": 1})
    assert f.task("j").output_data == {"x1": {"done": 1}, "y1": {"result": 42}}


@pytest.mark.parametrize(
    ("tasks", "inputs", "reason"),
    [
        ([{"name": "x"}], {}, "Input 'tasks'[0].taskReferenceName: Field required"),
        ("nope", {}, "Input 'tasks' is invalid: it must be a list of workflow tasks"),
        (
            [{"name": "x", "taskReferenceName": "x1"}],
            [],
            "Input to the dynamically forked tasks is not a map: 'inputs'",
        ),
        (
            [{"name": "x", "taskReferenceName": "x1", "type": "SWITCH"}],
            {},
            "branch x1: a SWITCH cannot be a dynamic fork branch in Cairn",
        ),
        (
            [{"name": "x", "taskReferenceName": "df"}],
            {},
            "branch df: duplicate or reserved task reference name",
        ),
        (
            [{"name": "x", "taskReferenceName": "x__1"}],
            {},
            "branch x__1: duplicate or reserved task reference name",
        ),
        (
            [{"name": "x", "taskReferenceName": "x1"}, {"name": "x", "taskReferenceName": "x1"}],
            {},
            "branch x1: duplicate or reserved task reference name",
        ),
    ],
)
def test_inputs_that_make_no_branches_fail_the_fork_terminally(tasks: Any, inputs: Any, reason: str) -> None:
    f = list_style(tasks, inputs, task_defs={"x": None})
    df = f.task("df")
    assert (df.status, df.reason_for_incompletion) == (TaskStatus.FAILED_WITH_TERMINAL_ERROR, reason)
    assert f.state.status is WorkflowStatus.FAILED
    assert f.order() == ["df"]


def test_fork_task_inputs_that_are_not_a_list_fail_the_fork() -> None:
    f = fanout(3, task_defs={"work": None})
    assert f.task("df").status is TaskStatus.FAILED_WITH_TERMINAL_ERROR
    assert (
        f.task("df").reason_for_incompletion
        == "forkTaskInputs: required (a list), or dynamicForkTasksParam and its input"
    )
    assert f.state.status is WorkflowStatus.FAILED


def test_a_dynamic_fork_in_a_loop_forks_afresh_each_iteration() -> None:
    df = task(
        "FORK_JOIN_DYNAMIC",
        "df",
        inputParameters={"forkTaskName": "w", "forkTaskInputs": ["${loop.output.iteration}"]},
    )
    f = Flow(workflow(do_while("loop", "$.loop.iteration < 2", df, join("j"))), task_defs={"w": None})
    assert f.order() == ["loop", "df__1", "_w_0__1", "j__1"]
    assert f.task("j").input_data == {"joinOn": ["_w_0__1"]}
    assert f.task("_w_0").input_data == {"input": 1, "__index": 0}
    f.complete("_w_0", {"i": 1})
    assert f.order()[4:] == ["df__2", "_w_0__2", "j__2"]
    assert f.task("_w_0").input_data == {"input": 2, "__index": 0}
    f.complete("_w_0", {"i": 2})
    assert f.task("loop").output_data["2"] == {"df": {}, "j": {"_w_0__2": {"i": 2}}, "_w_0": {"i": 2}}
    assert f.state.status is WorkflowStatus.COMPLETED
