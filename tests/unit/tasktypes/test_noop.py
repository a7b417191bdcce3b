"""NOOP: completes at once, with no input and no output (shared/core/tasktypes/noop.py)."""

from __future__ import annotations

from shared.models.runtime import TaskStatus, WorkflowStatus
from tests.unit.tasktypes.builders import Flow, noop, simple, task, workflow


def test_noop_completes_in_the_same_decision_without_input_or_output() -> None:
    f = Flow(
        workflow(task("NOOP", "n", inputParameters={"x": "${workflow.input.x}"}), simple("after")), {"x": 1}
    )
    n = f.task("n")
    assert (n.status, n.task_type, n.input_data, n.output_data) == (TaskStatus.COMPLETED, "NOOP", {}, {})
    assert f.order() == ["n", "after"]
    assert f.dispatched() == ["after"]


def test_a_workflow_of_noops_completes_in_its_first_decision() -> None:
    f = Flow(workflow(noop("a"), noop("b")))
    assert f.state.status is WorkflowStatus.COMPLETED
    assert f.state.output == {}
    assert f.events() == ["completed"]
    assert len(f.decisions) == 1
