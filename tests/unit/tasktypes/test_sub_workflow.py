"""SUB_WORKFLOW and START_WORKFLOW: the start message, the task while the child runs, the child's
end arriving as SubWorkflowEnded, the parent's end terminating the child, retries starting a new
child, and the child's side of the link (docs/research/conductor-operators.md, SUB_WORKFLOW and
START_WORKFLOW; shared/core/tasktypes/subworkflow.py)."""

from __future__ import annotations

import pytest

from shared.core import ids
from shared.models.messages import StartWorkflow, SubWorkflowEnded, TerminateWorkflow
from shared.models.runtime import TaskStatus, WorkflowStatus
from tests.unit.tasktypes.builders import WF_ID, Flow, fork, join, simple, task, workflow


def parent(**sub: object) -> Flow:
    node = task(
        "SUB_WORKFLOW",
        "sub",
        subWorkflowParam={"name": "child", "version": 3},
        inputParameters={"x": "${workflow.input.x}"},
        **sub,
    )
    return Flow(
        workflow(node, simple("after", inputParameters={"r": "${sub.output.res}"})),
        {"x": 5},
        correlation_id="corr",
    )


def test_the_child_is_started_with_the_input_and_a_link_to_the_parent_task() -> None:
    f = parent()
    sub = f.task("sub")
    child_id = ids.child_workflow_id(sub.task_id)
    assert f.outbox(StartWorkflow) == [
        StartWorkflow(
            id=f"start:{child_id}",
            workflow_id=child_id,
            name="child",
            version=3,
            input={"x": 5},
            correlation_id="corr",
            parent_workflow_id=WF_ID,
            parent_workflow_task_id=sub.task_id,
        )
    ]
    assert (sub.status, sub.sub_workflow_id, sub.output_data) == (
        TaskStatus.IN_PROGRESS,
        child_id,
        {"subWorkflowId": child_id},
    )
    assert sub.input_data == {
        "subWorkflowName": "child",
        "subWorkflowVersion": 3,
        "subWorkflowTaskToDomain": None,
        "subWorkflowDefinition": None,
        "priority": None,
        "workflowInput": {"x": 5},
    }
    assert f.dispatched() == []


def test_a_child_completing_completes_the_task_with_its_output_merged() -> None:
    f = parent()
    child_id = f.task("sub").sub_workflow_id
    f.child_ended("sub", "COMPLETED", {"res": 9})
    assert f.task("sub").status is TaskStatus.COMPLETED
    assert f.task("sub").output_data == {"subWorkflowId": child_id, "res": 9}
    assert f.dispatched() == ["after"] and f.task("after").input_data == {"r": 9}


@pytest.mark.parametrize(
    ("child", "task_status", "workflow_status", "event"),
    [
        ("FAILED", TaskStatus.FAILED, WorkflowStatus.FAILED, "failed"),
        ("TIMED_OUT", TaskStatus.TIMED_OUT, WorkflowStatus.TIMED_OUT, "timed_out"),
        ("TERMINATED", TaskStatus.CANCELED, WorkflowStatus.TERMINATED, "terminated"),
    ],
)
def test_a_child_ending_unsuccessfully_maps_to_the_task_and_the_parent(
    child: str, task_status: TaskStatus, workflow_status: WorkflowStatus, event: str
) -> None:
    f = parent()
    child_id = f.task("sub").sub_workflow_id
    f.child_ended("sub", child, {"partial": 1}, reason="child said no")
    sub = f.task("sub")
    assert sub.status is task_status
    assert sub.reason_for_incompletion == f"Sub workflow {child_id} failure reason: child said no"
    assert sub.output_data == {"subWorkflowId": child_id, "partial": 1}
    assert f.state.status is workflow_status
    assert f.events() == [event]
    assert f.outbox(TerminateWorkflow) == [], "the child has ended already"


def test_an_optional_sub_workflow_failing_is_tolerated() -> None:
    f = parent(optional=True)
    f.child_ended("sub", "FAILED", reason="x")
    assert f.task("sub").status is TaskStatus.COMPLETED_WITH_ERRORS
    assert f.dispatched() == ["after"]


def test_terminating_the_parent_terminates_the_child() -> None:
    f = parent()
    child_id = f.task("sub").sub_workflow_id
    f.terminate("stop")
    assert f.task("sub").status is TaskStatus.CANCELED
    assert f.outbox(TerminateWorkflow) == [
        TerminateWorkflow(
            id=f"terminate:{child_id}:parent:0",
            workflow_id=child_id,
            reason="Parent workflow has been terminated with status TERMINATED",
        )
    ]
    # The child's end, reported after that, finds no task waiting for it.
    late = f.decide(
        SubWorkflowEnded(
            id="late",
            workflow_id=WF_ID,
            task_id=f.task("sub").task_id,
            sub_workflow_id=child_id,
            status="TERMINATED",
        )
    )
    assert not late.changed and [n.code for n in late.notes] == ["subworkflow_result_ignored"]


def test_the_parent_failing_elsewhere_terminates_a_running_child() -> None:
    definition = workflow(
        fork("f", [task("SUB_WORKFLOW", "sub", subWorkflowParam={"name": "child"})], [simple("b")]),
        join("j", "sub", "b"),
    )
    f = Flow(definition)
    child_id = f.task("sub").sub_workflow_id
    f.fail("b", "broken")
    assert f.state.status is WorkflowStatus.FAILED
    assert [(m.workflow_id, m.reason) for m in f.outbox(TerminateWorkflow)] == [
        (child_id, "Parent workflow has been terminated with status FAILED")
    ]


def test_a_retried_sub_workflow_starts_a_new_child() -> None:
    f = parent(retryCount=1)
    first = f.task("sub")
    f.child_ended("sub", "FAILED", reason="x")
    retry = f.task("sub")
    assert retry.retry_count == 1 and retry.status is TaskStatus.IN_PROGRESS
    [started] = f.outbox(StartWorkflow)
    assert started.workflow_id == ids.child_workflow_id(retry.task_id) != first.sub_workflow_id
    assert retry.sub_workflow_id == started.workflow_id
    assert started.parent_workflow_task_id == retry.task_id
    # The first child's end, if it ever arrives again, is ignored.
    stale = f.decide(
        SubWorkflowEnded(
            id="stale",
            workflow_id=WF_ID,
            task_id=first.task_id,
            sub_workflow_id=first.sub_workflow_id or "",
            status="COMPLETED",
        )
    )
    assert not stale.changed and [n.code for n in stale.notes] == ["subworkflow_result_ignored"]


def test_an_inline_workflow_definition_names_the_child() -> None:
    inline_def = {"name": "inl", "version": 4, "tasks": [{"name": "t", "taskReferenceName": "t"}]}
    node = task("SUB_WORKFLOW", "sub", subWorkflowParam={"name": "ignored", "workflowDefinition": inline_def})
    f = Flow(workflow(node))
    [started] = f.outbox(StartWorkflow)
    assert (started.name, started.version, started.workflow_def) == ("inl", 4, inline_def)
    assert f.task("sub").input_data["subWorkflowDefinition"] == inline_def


def test_the_child_name_may_be_an_expression_and_the_version_left_to_the_latest() -> None:
    node = task("SUB_WORKFLOW", "sub", subWorkflowParam={"name": "${workflow.input.which}"})
    f = Flow(workflow(node), {"which": "billing"})
    [started] = f.outbox(StartWorkflow)
    assert (started.name, started.version) == ("billing", None)


# ---- the child's side ------------------------------------------------------------------


def test_a_child_reports_its_end_to_the_parent_task() -> None:
    f = Flow(workflow(simple("c")), {"x": 1}, wf_id="kid", parent=("wf-1", "parent-task"))
    f.complete("c", {"res": 2})
    assert f.outbox(SubWorkflowEnded) == [
        SubWorkflowEnded(
            id="kid:ended:0",
            workflow_id="wf-1",
            task_id="parent-task",
            sub_workflow_id="kid",
            status="COMPLETED",
            output={"res": 2},
        )
    ]


def test_a_child_terminated_by_its_parent_reports_terminated() -> None:
    f = Flow(workflow(simple("c")), wf_id="kid", parent=("wf-1", "parent-task"))
    f.terminate("Parent workflow has been terminated with status FAILED")
    [ended] = f.outbox(SubWorkflowEnded)
    assert (ended.status, ended.reason) == (
        "TERMINATED",
        "Parent workflow has been terminated with status FAILED",
    )


# ---- START_WORKFLOW ----------------------------------------------------------------------


def test_start_workflow_is_fire_and_forget_and_outputs_the_workflow_id() -> None:
    node = task(
        "START_WORKFLOW",
        "sw",
        inputParameters={
            "startWorkflow": {
                "name": "other",
                "version": 2,
                "input": {"k": "${workflow.input.k}"},
                "correlationId": "c2",
            }
        },
    )
    f = Flow(
        workflow(node, simple("after", inputParameters={"id": "${sw.output.workflowId}"})),
        {"k": 1},
        correlation_id="c1",
    )
    started_id = ids.started_workflow_id(f.task("sw").task_id)
    assert f.outbox(StartWorkflow) == [
        StartWorkflow(
            id=f"start:{started_id}",
            workflow_id=started_id,
            name="other",
            version=2,
            input={"k": 1},
            correlation_id="c2",
        )
    ]
    assert f.task("sw").status is TaskStatus.COMPLETED
    assert f.task("sw").output_data == {"workflowId": started_id}
    assert f.task("after").input_data == {"id": started_id}


def test_start_workflow_takes_the_callers_correlation_id_when_none_is_given() -> None:
    node = task("START_WORKFLOW", "sw", inputParameters={"startWorkflow": "${workflow.input.request}"})
    f = Flow(workflow(node), {"request": {"name": "x", "input": {"a": 1}}}, correlation_id="c1")
    [started] = f.outbox(StartWorkflow)
    assert (started.name, started.input, started.correlation_id, started.version) == (
        "x",
        {"a": 1},
        "c1",
        None,
    )
    assert started.parent_workflow_id is None
    assert f.state.status is WorkflowStatus.COMPLETED


def test_start_workflow_without_a_request_fails() -> None:
    node = task("START_WORKFLOW", "sw", inputParameters={"startWorkflow": "${workflow.input.request}"})
    f = Flow(workflow(node))
    assert f.task("sw").status is TaskStatus.FAILED
    assert f.task("sw").reason_for_incompletion == "Missing 'startWorkflow' in input data."
    assert f.outbox(StartWorkflow) == []
    assert f.state.status is WorkflowStatus.FAILED
