"""TERMINATE: ends the workflow at once with terminationStatus; its output becomes the workflow's;
live tasks are cancelled; FAILED and TERMINATED start the failureWorkflow (shared/core/tasktypes/
terminate.py, docs/research/conductor-operators.md TERMINATE)."""

from __future__ import annotations

from typing import Any

import pytest

from shared.models.messages import StartWorkflow, TerminateWorkflow
from shared.models.runtime import TaskStatus, WorkflowStatus
from tests.unit.tasktypes.builders import Flow, fork, join, simple, switch, task, workflow


def terminate(status: Any = "COMPLETED", **inputs: Any) -> dict[str, Any]:
    return task("TERMINATE", "t", inputParameters={"terminationStatus": status, **inputs})


@pytest.mark.parametrize(
    ("status", "event", "failure_workflow"),
    [("COMPLETED", "completed", False), ("FAILED", "failed", True), ("TERMINATED", "terminated", True)],
)
def test_terminate_ends_the_workflow_with_its_status_reason_and_output(
    status: str, event: str, failure_workflow: bool
) -> None:
    node = terminate(
        status, terminationReason="${workflow.input.why}", workflowOutput={"o": "${workflow.input.o}"}
    )
    definition = workflow(node, simple("never"), outputParameters={"ignored": 1}, failureWorkflow="cleanup")
    f = Flow(definition, {"why": "done early", "o": 7})
    t = f.task("t")
    assert (t.status, t.output_data) == (TaskStatus.COMPLETED, {"o": 7})
    assert f.state.status is WorkflowStatus(status)
    assert f.state.reason_for_incompletion == "done early"
    assert f.order() == ["t"]
    assert f.events() == [event]
    started = f.outbox(StartWorkflow)
    if failure_workflow:
        assert [s.name for s in started] == ["cleanup"]
        assert f.state.output == {"o": 7, "conductor.failure_workflow": started[0].workflow_id}
    else:
        assert started == [] and f.state.output == {"o": 7}


def test_without_a_reason_the_workflow_says_which_task_ended_it() -> None:
    f = Flow(workflow(terminate("COMPLETED")))
    assert (
        f.state.reason_for_incompletion == f"Workflow is COMPLETED by TERMINATE task: {f.task('t').task_id}"
    )
    assert f.state.output == {}


@pytest.mark.parametrize(
    ("given", "output"), [([1, 2], {"output": [1, 2]}), ("text", {"output": "text"}), (None, {})]
)
def test_a_workflow_output_that_is_not_a_map_is_wrapped(given: Any, output: dict[str, Any]) -> None:
    f = Flow(workflow(terminate("COMPLETED", workflowOutput="${workflow.input.o}")), {"o": given})
    assert f.task("t").output_data == output
    assert f.state.output == output


def test_terminate_in_a_branch_cancels_the_other_branches_and_the_join() -> None:
    definition = workflow(
        fork(
            "f",
            [simple("b1"), terminate("FAILED", terminationReason="stop here")],
            [task("SUB_WORKFLOW", "sub", subWorkflowParam={"name": "c"})],
        ),
        join("j", "t", "sub"),
        simple("after"),
    )
    f = Flow(definition)
    child_id = f.task("sub").sub_workflow_id
    f.complete("b1")
    assert f.state.status is WorkflowStatus.FAILED and f.state.reason_for_incompletion == "stop here"
    assert [(t.reference_task_name, t.status) for t in f.history()] == [
        ("f", TaskStatus.COMPLETED),
        ("b1", TaskStatus.COMPLETED),
        ("sub", TaskStatus.CANCELED),
        ("j", TaskStatus.CANCELED),
        ("t", TaskStatus.COMPLETED),
    ]
    assert [m.workflow_id for m in f.outbox(TerminateWorkflow)] == [child_id]


def test_terminate_in_a_switch_case_stops_the_flow_after_the_switch() -> None:
    definition = workflow(
        switch(
            "s",
            "k",
            {"stop": [terminate("COMPLETED", workflowOutput={"why": "early"})]},
            k="${workflow.input.k}",
        ),
        simple("after"),
    )
    f = Flow(definition, {"k": "stop"})
    assert f.state.status is WorkflowStatus.COMPLETED and f.state.output == {"why": "early"}
    assert "after" not in f.state.tasks
    g = Flow(definition, {"k": "go"})
    assert g.dispatched() == ["after"]
