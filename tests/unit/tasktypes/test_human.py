"""HUMAN: in progress until a person's signal (or a task update) completes or fails it; it never
times out and is not dispatched to workers (shared/core/tasktypes/wait.py, HumanTask)."""

from __future__ import annotations

from shared.models.messages import Signal
from shared.models.runtime import TaskStatus, WorkflowStatus
from tests.unit.tasktypes.builders import NOW, WF_ID, Flow, fork, join, simple, task, workflow


def approval() -> Flow:
    definition = workflow(
        task("HUMAN", "h", inputParameters={"who": "${workflow.input.who}"}),
        simple("after", inputParameters={"ok": "${h.output.ok}", "by": "${h.output.by}"}),
    )
    return Flow(definition, {"who": "ann"})


def test_human_is_in_progress_with_its_input_and_nothing_dispatched() -> None:
    f = approval()
    h = f.task("h")
    assert (h.status, h.task_type, h.input_data) == (TaskStatus.IN_PROGRESS, "HUMAN", {"who": "ann"})
    assert f.decision.outbox == []


def test_human_never_times_out() -> None:
    f = approval()
    later = f.look(at=NOW + 30 * 24 * 3600 * 1000)
    assert not later.changed and f.task("h").status is TaskStatus.IN_PROGRESS


def test_a_signal_completes_it_with_the_signal_output() -> None:
    f = approval()
    f.signal("h", {"ok": True, "by": "ann"})
    assert f.task("h").status is TaskStatus.COMPLETED
    assert f.task("h").output_data == {"ok": True, "by": "ann"}
    assert f.dispatched() == ["after"] and f.task("after").input_data == {"ok": True, "by": "ann"}


def test_a_task_update_completes_it_too() -> None:
    f = approval()
    f.complete("h", {"ok": False, "by": "bob"})
    assert f.task("h").status is TaskStatus.COMPLETED
    assert f.task("after").input_data == {"ok": False, "by": "bob"}


def test_a_failing_signal_fails_it_with_the_given_reason() -> None:
    f = approval()
    f.signal("h", {"reason": "no way"}, TaskStatus.FAILED)
    assert f.task("h").status is TaskStatus.FAILED
    assert f.task("h").reason_for_incompletion == "no way"
    assert f.state.status is WorkflowStatus.FAILED


def test_signals_it_cannot_take_are_rejected_with_a_reason() -> None:
    f = approval()
    canceled = f.decide(Signal(id="x", workflow_id=WF_ID, task_ref_name="h", status=TaskStatus.CANCELED))
    assert not canceled.changed and [n.code for n in canceled.notes] == ["signal_status_not_allowed"]
    f.signal("h", {"ok": True})
    again = f.decide(Signal(id="y", workflow_id=WF_ID, task_ref_name="h"))
    assert not again.changed and [n.code for n in again.notes] == ["signal_no_waiting_task"]
    worker_task = f.decide(Signal(id="z", workflow_id=WF_ID, task_ref_name="after"))
    assert [n.code for n in worker_task.notes] == ["signal_not_accepted"]


def test_a_human_task_in_a_branch_is_cancelled_with_the_workflow() -> None:
    f = Flow(workflow(fork("f", [task("HUMAN", "h")], [simple("b")]), join("j", "h", "b")))
    f.fail("b")
    assert f.task("h").status is TaskStatus.CANCELED
    assert f.state.status is WorkflowStatus.FAILED
