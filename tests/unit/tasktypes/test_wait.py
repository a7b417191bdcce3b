"""WAIT beyond tests/unit/test_timed_wait.py: a signal that fails it, its timer when the workflow
ends, and a timed WAIT inside a loop (a timer per iteration)."""

from __future__ import annotations

from shared.models.messages import TimerRequest
from shared.models.runtime import TaskStatus, WorkflowStatus
from tests.unit.tasktypes.builders import NOW, Flow, do_while, simple, task, timer_arms, workflow


def test_a_failing_signal_fails_the_wait_and_the_workflow() -> None:
    f = Flow(workflow(task("WAIT", "w"), simple("after")))
    f.signal("w", {"reason": "rejected"}, TaskStatus.FAILED)
    assert f.task("w").status is TaskStatus.FAILED and f.task("w").reason_for_incompletion == "rejected"
    assert f.state.status is WorkflowStatus.FAILED


def test_terminating_the_workflow_cancels_a_timed_wait_and_its_timer() -> None:
    f = Flow(workflow(task("WAIT", "w", inputParameters={"duration": "1h"})))
    [arm] = timer_arms(f.decision)
    f.terminate()
    assert f.task("w").status is TaskStatus.CANCELED
    cancels = [m.timer_id for m in f.outbox(TimerRequest) if m.action == "cancel"]
    assert cancels == [arm.timer_id] and f.state.timers == {}
    late = f.decide(*[])
    assert not late.changed


def test_a_timed_wait_in_a_loop_arms_its_own_timer_each_iteration() -> None:
    f = Flow(
        workflow(
            do_while("loop", "$.loop.iteration < 2", task("WAIT", "w", inputParameters={"duration": "1s"}))
        )
    )
    [first] = timer_arms(f.decision)
    assert first.fire_at == NOW + 1000
    f.fire(first.timer_id, at=NOW + 1000)
    assert f.task("w").reference_task_name == "w__2"
    [second] = timer_arms(f.decision)
    assert second.timer_id != first.timer_id and second.fire_at == NOW + 2000
    f.fire(second.timer_id, at=NOW + 2000)
    assert f.state.status is WorkflowStatus.COMPLETED
    assert f.order() == ["loop", "w__1", "w__2"]
