"""Lifecycle operations in the pure core: pause, resume, skip, restart, rerun, retry, terminate
with triggerFailureWorkflow (shared/core/operations.py)."""

from __future__ import annotations

from typing import Any

from shared.core.invariants import invariant_violations
from shared.models.definitions import WorkflowDef
from shared.models.messages import (
    PauseWorkflow,
    RerunWorkflow,
    RestartWorkflow,
    ResumeWorkflow,
    RetryWorkflow,
    Signal,
    SkipTask,
    StartWorkflow,
    TaskResult,
    TerminateWorkflow,
    TimerFired,
)
from shared.models.runtime import TaskStatus, WorkflowStatus
from tests.unit.factories import three_step_def
from tests.unit.operations_harness import Harness


def simple(ref: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": "t",
        "taskReferenceName": ref,
        "inputParameters": {"n": "${workflow.input.n}"},
        "taskDefinition": {"name": "t", "retryCount": 0, "retryDelaySeconds": 0},
        **extra,
    }


def definition(*tasks: dict[str, Any], **extra: Any) -> WorkflowDef:
    return WorkflowDef.model_validate({"name": "ops", "version": 1, "tasks": list(tasks), **extra})


def fork_of(*branches: list[dict[str, Any]], join_on: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A FORK_JOIN `f` of these branches and its JOIN `j`."""
    fork = {"name": "f", "taskReferenceName": "f", "type": "FORK_JOIN", "forkTasks": list(branches)}
    return fork, {"name": "j", "taskReferenceName": "j", "type": "JOIN", "joinOn": join_on}


def last_operation(h: Harness) -> tuple[str, bool, str | None]:
    record = h.state.operations[-1]
    return record.operation, record.applied, record.reason


def assert_healthy(h: Harness) -> None:
    assert invariant_violations(h.state) == []


# ---- pause and resume ------------------------------------------------------------------------


def test_a_paused_workflow_records_results_and_schedules_nothing_until_resumed() -> None:
    h = Harness(three_step_def(), {"n": 1})
    h.send(PauseWorkflow(id=h.command_id(), workflow_id="wf-1"))
    assert h.state.status is WorkflowStatus.PAUSED
    h.finish("a", n=2)
    assert h.task("a").status is TaskStatus.COMPLETED and h.task("a").output_data == {"n": 2}
    assert h.dispatched() == [] and "b" not in h.state.tasks
    assert_healthy(h)
    h.send(ResumeWorkflow(id=h.command_id(), workflow_id="wf-1"))
    assert h.state.status is WorkflowStatus.RUNNING
    assert h.dispatched() == ["b"] and h.task("b").input_data["n"] == 2
    assert [r.operation for r in h.state.operations] == ["pause", "resume"]


def test_a_retry_while_paused_is_held_and_handed_out_on_resume() -> None:
    h = Harness(three_step_def(retryCount=2), {"n": 1})
    h.send(PauseWorkflow(id=h.command_id(), workflow_id="wf-1"))
    h.finish("a", TaskStatus.FAILED)
    retry = h.task("a")
    assert retry.retry_count == 1 and retry.status is TaskStatus.SCHEDULED
    assert h.dispatched() == [] and h.state.held == [retry.task_id]
    assert_healthy(h)
    h.send(ResumeWorkflow(id=h.command_id(), workflow_id="wf-1"))
    assert h.dispatched() == ["a"] and h.state.held == []


def test_a_wait_timer_that_fires_while_paused_takes_effect_on_resume() -> None:
    wait = {
        "name": "w",
        "taskReferenceName": "w",
        "type": "WAIT",
        "inputParameters": {"duration": "5 seconds"},
    }
    h = Harness(definition(wait, simple("after")))
    [timer] = [t for t in h.state.timers.values() if t.purpose == "wait"]
    h.send(PauseWorkflow(id=h.command_id(), workflow_id="wf-1"))
    h.send(TimerFired(id="fired", workflow_id="wf-1", timer_id=timer.timer_id))
    assert h.task("w").status is TaskStatus.COMPLETED and "after" not in h.state.tasks
    h.send(ResumeWorkflow(id=h.command_id(), workflow_id="wf-1"))
    assert h.dispatched() == ["after"]


def test_pause_and_resume_refuse_what_does_not_apply_and_change_nothing_else() -> None:
    h = Harness(three_step_def(), {"n": 1})
    h.send(ResumeWorkflow(id=h.command_id(), workflow_id="wf-1"))
    assert last_operation(h) == ("resume", False, "the workflow is RUNNING, not PAUSED")
    assert h.state.status is WorkflowStatus.RUNNING
    h.send(PauseWorkflow(id=h.command_id(), workflow_id="wf-1"))
    h.send(PauseWorkflow(id=h.command_id(), workflow_id="wf-1"))
    assert last_operation(h) == ("pause", True, "already PAUSED")
    h.send(TerminateWorkflow(id=h.command_id(), workflow_id="wf-1"))
    assert h.state.status is WorkflowStatus.TERMINATED
    h.send(PauseWorkflow(id=h.command_id(), workflow_id="wf-1"))
    operation, applied, reason = last_operation(h)
    assert (operation, applied) == ("pause", False) and "has ended (TERMINATED)" in str(reason)
    assert h.state.status is WorkflowStatus.TERMINATED


# ---- skip ------------------------------------------------------------------------------------


def test_skip_of_a_running_task_ends_it_skipped_with_the_given_output_and_goes_on() -> None:
    h = Harness(three_step_def(), {"n": 1})
    h.send(SkipTask(id=h.command_id(), workflow_id="wf-1", task_reference_name="a", task_output={"n": 7}))
    assert h.task("a").status is TaskStatus.SKIPPED and h.task("a").output_data == {"n": 7}
    assert h.dispatched() == ["b"] and h.task("b").input_data["label"] == "b-7"


def test_skip_of_a_task_not_yet_run_applies_when_the_walk_reaches_it() -> None:
    h = Harness(three_step_def(), {"n": 1})
    h.send(SkipTask(id=h.command_id(), workflow_id="wf-1", task_reference_name="b", task_output={"n": 5}))
    assert "b" not in h.state.tasks and h.state.pending_skips
    h.finish("a", n=2)
    assert h.task("b").status is TaskStatus.SKIPPED and h.dispatched() == ["c"]
    assert h.task("c").input_data["n"] == 5 and not h.state.pending_skips


def test_skip_of_a_waiting_task_completes_the_list_past_it() -> None:
    wait = {"name": "w", "taskReferenceName": "w", "type": "WAIT"}
    h = Harness(definition(wait, simple("after")))
    h.send(SkipTask(id=h.command_id(), workflow_id="wf-1", task_reference_name="w", task_output={"ok": True}))
    assert h.task("w").status is TaskStatus.SKIPPED and h.dispatched() == ["after"]
    h.send(Signal(id="late-signal", workflow_id="wf-1", task_ref_name="w"))
    assert h.task("w").status is TaskStatus.SKIPPED


def test_skip_refuses_unknown_finished_and_fork_tasks() -> None:
    fork, join = fork_of([simple("x")], [simple("y")], join_on=["x", "y"])
    h = Harness(definition(simple("first"), fork, join))
    h.send(SkipTask(id=h.command_id(), workflow_id="wf-1", task_reference_name="nope"))
    assert last_operation(h) == ("skip_task", False, "the workflow has no task 'nope'")
    h.send(SkipTask(id=h.command_id(), workflow_id="wf-1", task_reference_name="f"))
    assert last_operation(h)[1] is False and "FORK_JOIN" in str(last_operation(h)[2])
    h.finish("first")
    h.send(SkipTask(id=h.command_id(), workflow_id="wf-1", task_reference_name="first"))
    assert last_operation(h) == ("skip_task", False, "task 'first' has already ended (COMPLETED)")


# ---- restart ---------------------------------------------------------------------------------


def _failed_three_steps() -> Harness:
    h = Harness(three_step_def(), {"n": 1})
    h.finish("a", n=2)
    h.finish("b", TaskStatus.FAILED)
    assert h.state.status is WorkflowStatus.FAILED
    return h


def test_restart_runs_a_finished_workflow_again_in_a_new_epoch() -> None:
    h = _failed_three_steps()
    old_a = h.records[next(iter(h.records))].task_id
    h.send(RestartWorkflow(id=h.command_id(), workflow_id="wf-1", epoch=0))
    assert h.state.status is WorkflowStatus.RUNNING and h.state.epoch == 1
    assert h.dispatched() == ["a"] and h.task("a").task_id != old_a
    assert [t.reference_task_name for t in h.visible()] == ["a"]
    assert old_a in h.records  # the earlier run stays readable by task id
    h.finish("a", n=2)
    h.finish("b", n=3)
    h.finish("c", n=4)
    assert h.state.status is WorkflowStatus.COMPLETED and h.state.output == {"result": 4, "first": 2}
    assert_healthy(h)


def test_restart_with_latest_definitions_runs_the_fixed_definition() -> None:
    h = _failed_three_steps()
    fixed = definition(simple("only"), version=2)
    fixed = fixed.model_copy(update={"name": "pipeline"})
    h.latest = fixed
    h.send(RestartWorkflow(id=h.command_id(), workflow_id="wf-1", use_latest_definitions=True))
    assert h.definition.version == 2 and h.state.workflow_version == 2
    assert h.dispatched() == ["only"]
    h.finish("only")
    assert h.state.status is WorkflowStatus.COMPLETED


def test_restart_refuses_a_running_workflow_and_a_redelivery_for_an_earlier_run() -> None:
    h = Harness(three_step_def(), {"n": 1})
    h.send(RestartWorkflow(id=h.command_id(), workflow_id="wf-1"))
    assert last_operation(h)[1] is False and "RUNNING" in str(last_operation(h)[2])
    h.send(TerminateWorkflow(id=h.command_id(), workflow_id="wf-1"))
    command = RestartWorkflow(id=h.command_id(), workflow_id="wf-1", epoch=0)
    h.send(command)
    h.send(TerminateWorkflow(id=h.command_id(), workflow_id="wf-1"))
    h.send(command.model_copy(update={"id": h.command_id()}))  # the same command, again
    assert h.state.status is WorkflowStatus.TERMINATED and h.state.epoch == 1
    assert "meant for run 0" in str(last_operation(h)[2])


# ---- retry -----------------------------------------------------------------------------------


def test_retry_runs_the_failed_task_again_in_place_and_the_workflow_goes_on() -> None:
    h = _failed_three_steps()
    failed = h.task("b")
    h.send(RetryWorkflow(id=h.command_id(), workflow_id="wf-1"))
    assert h.state.status is WorkflowStatus.RUNNING and h.dispatched() == ["b"]
    retried = h.task("b")
    assert retried.retry_count == failed.retry_count + 1 and retried.retried_task_id == failed.task_id
    assert h.records[failed.task_id].retried
    assert [t.reference_task_name for t in h.visible()] == ["a", "b", "b"]
    h.finish("b", n=3)
    h.finish("c", n=4)
    assert h.state.status is WorkflowStatus.COMPLETED and h.state.output["result"] == 4


def test_retry_refuses_a_completed_workflow() -> None:
    h = Harness(definition(simple("a")))
    h.finish("a")
    h.send(RetryWorkflow(id=h.command_id(), workflow_id="wf-1"))
    assert last_operation(h) == ("retry", False, "the workflow COMPLETED: there is nothing to retry")
    assert h.state.status is WorkflowStatus.COMPLETED


def test_retry_in_a_fork_reruns_the_failed_branch_and_the_cancelled_one() -> None:
    fork, join = fork_of([simple("x")], [simple("y")], join_on=["x", "y"])
    h = Harness(definition(fork, join, simple("after")))
    h.finish("x", TaskStatus.FAILED)
    assert h.state.status is WorkflowStatus.FAILED and h.task("y").status is TaskStatus.CANCELED
    h.send(RetryWorkflow(id=h.command_id(), workflow_id="wf-1"))
    assert sorted(h.dispatched()) == ["x", "y"] and h.task("j").status is TaskStatus.IN_PROGRESS
    h.finish("x", v=1)
    h.finish("y", v=2)
    assert h.dispatched() == ["after"]
    assert h.task("j").output_data == {"x": {"v": 1}, "y": {"v": 2}}


# ---- rerun -----------------------------------------------------------------------------------


def test_rerun_from_a_task_keeps_what_ran_before_it_and_takes_new_input() -> None:
    h = Harness(three_step_def(), {"n": 1})
    h.finish("a", n=2)
    h.finish("b", n=3)
    h.finish("c", n=4)
    b = h.task("b")
    h.send(
        RerunWorkflow(
            id=h.command_id(), workflow_id="wf-1", re_run_from_task_id=b.task_id, task_input={"n": 30}
        )
    )
    assert h.state.status is WorkflowStatus.RUNNING and h.dispatched() == ["b"]
    assert h.task("b").task_id != b.task_id and h.task("b").input_data == {"n": 30}
    assert [t.reference_task_name for t in h.visible()] == ["a", "b"]
    h.finish("b", n=31)
    h.finish("c", n=32)
    assert h.state.output == {"result": 32, "first": 2}


def test_rerun_from_a_loop_iteration_keeps_the_earlier_iterations() -> None:
    loop = {
        "name": "loop",
        "taskReferenceName": "loop",
        "type": "DO_WHILE",
        "loopCondition": "$.loop['iteration'] < 3",
        "loopOver": [simple("body")],
    }
    h = Harness(definition(loop, simple("after")))
    for i in (1, 2, 3):
        h.finish(f"body__{i}", i=i)
    h.finish("after")
    assert h.state.status is WorkflowStatus.COMPLETED
    second = next(t for t in h.records.values() if t.reference_task_name == "body__2")
    h.send(RerunWorkflow(id=h.command_id(), workflow_id="wf-1", re_run_from_task_id=second.task_id))
    assert h.dispatched() == ["body__2"]
    assert h.task("loop").status is TaskStatus.IN_PROGRESS and h.task("loop").iteration == 2
    assert h.task("loop").output_data == {"iteration": 2, "1": {"body": {"i": 1}}}
    h.finish("body__2", i=20)
    h.finish("body__3", i=30)
    h.finish("after")
    assert h.state.status is WorkflowStatus.COMPLETED
    assert h.task("loop").output_data["2"] == {"body": {"i": 20}}
    refs = [t.reference_task_name for t in h.visible()]
    assert refs == ["loop", "body__1", "body__2", "body__3", "after"]


def test_rerun_from_a_task_in_a_fork_branch_keeps_the_other_branch() -> None:
    fork, join = fork_of([simple("x1"), simple("x2")], [simple("y")], join_on=["x2", "y"])
    h = Harness(definition(fork, join))
    h.finish("x1", v="x1")
    h.finish("y", v="y")
    h.finish("x2", v="x2")
    assert h.state.status is WorkflowStatus.COMPLETED
    x2 = h.task("x2")
    h.send(RerunWorkflow(id=h.command_id(), workflow_id="wf-1", re_run_from_task_id=x2.task_id))
    assert h.dispatched() == ["x2"] and h.task("j").status is TaskStatus.IN_PROGRESS
    assert h.task("y").status is TaskStatus.COMPLETED
    h.finish("x2", v="again")
    assert h.state.status is WorkflowStatus.COMPLETED
    assert h.task("j").output_data == {"x2": {"v": "again"}, "y": {"v": "y"}}


def test_rerun_refuses_a_task_of_another_run() -> None:
    h = _failed_three_steps()
    old_b = h.task("b").task_id
    h.send(RestartWorkflow(id=h.command_id(), workflow_id="wf-1"))
    h.send(TerminateWorkflow(id=h.command_id(), workflow_id="wf-1"))
    h.send(RerunWorkflow(id=h.command_id(), workflow_id="wf-1", re_run_from_task_id=old_b))
    assert last_operation(h)[1] is False and "no task execution" in str(last_operation(h)[2])


# ---- terminate -------------------------------------------------------------------------------


def test_terminate_with_trigger_failure_workflow_starts_it() -> None:
    h = Harness(three_step_def().model_copy(update={"failure_workflow": "cleanup"}), {"n": 1})
    h.send(TerminateWorkflow(id=h.command_id(), workflow_id="wf-1", trigger_failure_workflow=True))
    starts = [m for m in h.last.outbox if isinstance(m, StartWorkflow)]
    assert [s.name for s in starts] == ["cleanup"] and starts[0].input["failureStatus"] == "TERMINATED"
    h2 = Harness(h.definition, {"n": 1})
    h2.send(TerminateWorkflow(id=h2.command_id(), workflow_id="wf-1"))
    assert not [m for m in h2.last.outbox if isinstance(m, StartWorkflow)]


def test_update_variables_sets_and_appends_and_refuses_an_ended_workflow() -> None:
    from shared.models.messages import UpdateVariables

    h = Harness(three_step_def().model_copy(update={"variables": {"seen": ["a"]}}), {"n": 1})
    h.send(
        UpdateVariables(
            id=h.command_id(), workflow_id="wf-1", variables={"seen": "b", "n": 2}, append_array=True
        )
    )
    assert h.state.variables == {"seen": ["a", "b"], "n": 2}
    h.send(UpdateVariables(id=h.command_id(), workflow_id="wf-1", variables={"seen": []}))
    assert h.state.variables == {"seen": [], "n": 2}
    h.send(TerminateWorkflow(id=h.command_id(), workflow_id="wf-1"))
    h.send(UpdateVariables(id=h.command_id(), workflow_id="wf-1", variables={"late": 1}))
    assert last_operation(h)[1] is False and "late" not in h.state.variables


def test_rerun_keeps_a_parallel_branch_that_ran_after_the_task() -> None:
    """Seq order is not dependency order: `y` was created after `x` (the fork makes its branch
    heads in order), but does not depend on it; Conductor would run it again."""
    fork, join = fork_of([simple("x")], [simple("y")], join_on=["x", "y"])
    h = Harness(definition(fork, join))
    h.finish("x", v=1)
    h.finish("y", v=2)
    x, y = h.task("x"), h.task("y")
    assert y.seq > x.seq
    h.send(RerunWorkflow(id=h.command_id(), workflow_id="wf-1", re_run_from_task_id=x.task_id))
    assert h.dispatched() == ["x"] and h.task("y").task_id == y.task_id
    h.finish("x", v=10)
    assert h.task("j").output_data == {"x": {"v": 10}, "y": {"v": 2}}
    assert [t.reference_task_name for t in h.visible()] == ["f", "y", "x", "j"]


# ---- found in review -------------------------------------------------------------------------


def test_rerun_inside_the_loop_of_a_failed_workflow_takes_the_loop_up_at_that_iteration() -> None:
    loop = {
        "name": "loop",
        "taskReferenceName": "loop",
        "type": "DO_WHILE",
        "loopCondition": "$.loop['iteration'] < 3",
        "loopOver": [simple("a"), simple("body")],
    }
    h = Harness(definition(loop))
    h.finish("a__1")
    h.finish("body__1")
    h.finish("a__2")
    h.finish("body__2", TaskStatus.FAILED)
    assert h.state.status is WorkflowStatus.FAILED and h.task("loop").status is TaskStatus.CANCELED
    failed = h.task("body__2")
    h.send(RerunWorkflow(id=h.command_id(), workflow_id="wf-1", re_run_from_task_id=failed.task_id))
    assert h.dispatched() == ["body__2"]
    assert h.task("loop").status is TaskStatus.IN_PROGRESS and h.task("loop").iteration == 2
    h.finish("body__2")
    h.finish("a__3")
    h.finish("body__3")
    assert h.state.status is WorkflowStatus.COMPLETED
    assert_healthy(h)


def test_rerun_before_a_dynamic_fork_makes_its_branches_again() -> None:
    prep = simple("prep")
    fork = {
        "name": "dyn",
        "taskReferenceName": "dyn",
        "type": "FORK_JOIN_DYNAMIC",
        "dynamicForkTasksParam": "tasks",
        "dynamicForkTasksInputParamName": "inputs",
        "inputParameters": {"tasks": "${prep.output.tasks}", "inputs": "${prep.output.inputs}"},
    }
    join = {"name": "j", "taskReferenceName": "j", "type": "JOIN"}
    h = Harness(definition(prep, fork, join))

    def branches(n: int) -> dict[str, Any]:
        refs = [f"w{i}" for i in range(n)]
        return {
            "tasks": [{"name": "t", "taskReferenceName": r, "type": "SIMPLE"} for r in refs],
            "inputs": {r: {} for r in refs},
        }

    h.finish("prep", **branches(3))
    for i in range(3):
        h.finish(f"w{i}")
    assert h.state.status is WorkflowStatus.COMPLETED
    h.send(RerunWorkflow(id=h.command_id(), workflow_id="wf-1", re_run_from_task_id=h.task("prep").task_id))
    h.finish("prep", **branches(1))
    assert h.dispatched() == ["w0"] and sorted(h.state.dynamic_nodes) == ["w0"]
    h.finish("w0", v=1)
    assert h.state.status is WorkflowStatus.COMPLETED and h.task("j").output_data == {"w0": {"v": 1}}


def test_a_callback_that_falls_due_while_paused_is_handed_out_on_resume() -> None:
    h = Harness(three_step_def(), {"n": 1})
    task = h.task("a")
    h.send(
        TaskResult(
            id="progress",
            workflow_instance_id="wf-1",
            task_id=task.task_id,
            status=TaskStatus.IN_PROGRESS,
            callback_after_seconds=5,
        )
    )
    [callback] = [t for t in h.state.timers.values() if t.purpose == "dispatch"]
    h.send(PauseWorkflow(id=h.command_id(), workflow_id="wf-1"))
    h.send(TimerFired(id="fired", workflow_id="wf-1", timer_id=callback.timer_id))
    assert h.dispatched() == [] and h.state.held == [task.task_id]
    h.send(ResumeWorkflow(id=h.command_id(), workflow_id="wf-1"))
    assert h.dispatched() == ["a"]


def test_a_skip_of_a_later_iteration_skips_that_iteration() -> None:
    loop = {
        "name": "loop",
        "taskReferenceName": "loop",
        "type": "DO_WHILE",
        "loopCondition": "$.loop['iteration'] < 3",
        "loopOver": [simple("body")],
    }
    h = Harness(definition(loop))
    h.send(SkipTask(id=h.command_id(), workflow_id="wf-1", task_reference_name="body__3"))
    h.finish("body__1")
    assert h.task("body__2").status is TaskStatus.SCHEDULED
    h.finish("body__2")
    assert h.task("body__3").status is TaskStatus.SKIPPED and h.state.status is WorkflowStatus.COMPLETED


def test_terminating_a_paused_workflow_leaves_nothing_held() -> None:
    h = Harness(three_step_def(retryCount=1), {"n": 1})
    h.send(PauseWorkflow(id=h.command_id(), workflow_id="wf-1"))
    h.finish("a", TaskStatus.FAILED)
    assert h.state.held
    h.send(TerminateWorkflow(id=h.command_id(), workflow_id="wf-1"))
    assert h.state.held == [] and h.state.status is WorkflowStatus.TERMINATED
    assert_healthy(h)
