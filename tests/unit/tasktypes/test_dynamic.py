"""DYNAMIC: a worker task named at run time. The decision asks for the chosen name's TaskDef
(`needs_task_defs`), decides nothing meanwhile, and on the second call dispatches the task under
that name and its TaskDef (shared/core/tasktypes/dynamic.py)."""

from __future__ import annotations

from typing import Any

from shared.models.definitions import TaskDef
from shared.models.messages import TaskMessage
from shared.models.runtime import TaskStatus, WorkflowStatus
from tests.unit.tasktypes.builders import Flow, do_while, simple, task, workflow


def dynamic(name: Any = "charge", **kw: Any) -> Flow:
    node = task(
        "DYNAMIC",
        "dyn",
        dynamicTaskNameParam="taskToRun",
        inputParameters={"taskToRun": "${workflow.input.name}", "v": "${workflow.input.v}"},
    )
    definition = workflow(simple("first"), node, simple("after", inputParameters={"r": "${dyn.output.r}"}))
    return Flow(definition, {"name": name, "v": 3}, **kw)


def test_the_chosen_name_s_task_def_is_asked_for_and_the_whole_decision_waits_for_it() -> None:
    f = dynamic()
    before = f.state
    decision = f.send(f.result("first"))
    assert decision.needs_task_defs == {"charge"}
    assert (decision.changed, decision.tasks, decision.outbox, decision.state) == (False, [], [], before)
    assert f.task("first").status is TaskStatus.SCHEDULED, "not even the result was applied"


def test_with_the_task_def_the_task_is_dispatched_under_the_chosen_name() -> None:
    f = dynamic()
    result = f.result("first")
    f.send(result)
    f.task_defs["charge"] = TaskDef(
        name="charge", retryCount=1, retryDelaySeconds=0, responseTimeoutSeconds=20
    )
    decision = f.send(result)
    assert decision.needs_task_defs == set()
    dyn = f.task("dyn")
    assert (dyn.task_type, dyn.task_def_name, dyn.kind, dyn.status) == (
        "charge",
        "charge",
        "SIMPLE",
        TaskStatus.SCHEDULED,
    )
    [message] = f.outbox(TaskMessage)
    assert (message.task_type, message.task_def_name, message.reference_task_name) == (
        "charge",
        "charge",
        "dyn",
    )
    assert message.input_data == {"taskToRun": "charge", "v": 3}
    assert message.response_timeout_seconds == 20


def test_the_chosen_task_def_s_retries_apply() -> None:
    f = dynamic(task_defs={"charge": TaskDef(name="charge", retryCount=1, retryDelaySeconds=0)})
    f.complete("first")
    first = f.task("dyn")
    f.fail("dyn")
    retry = f.task("dyn")
    assert (retry.retry_count, retry.retried_task_id, retry.task_type) == (1, first.task_id, "charge")
    assert f.dispatched() == ["dyn"]
    f.complete("dyn", {"r": 1})
    assert f.task("after").input_data == {"r": 1}


def test_an_unregistered_name_runs_with_no_retries() -> None:
    f = dynamic(task_defs={"charge": None})
    f.complete("first")
    assert f.outbox(TaskMessage)[0].task_type == "charge"
    f.fail("dyn", "nope")
    assert f.state.status is WorkflowStatus.FAILED
    assert f.task("dyn").retry_count == 0


def test_a_missing_name_fails_the_task_terminally() -> None:
    f = dynamic(name=None)
    f.complete("first")
    dyn = f.task("dyn")
    assert dyn.status is TaskStatus.FAILED_WITH_TERMINAL_ERROR
    assert dyn.reason_for_incompletion == (
        "Cannot map a dynamic task based on the parameter and input. Parameter= taskToRun, "
        "input= {'taskToRun': None, 'v': 3}"
    )
    assert f.state.status is WorkflowStatus.FAILED
    assert f.decision.needs_task_defs == set()


def test_a_name_that_cannot_be_a_topic_fails_the_task() -> None:
    f = dynamic(name="bad name!")
    f.complete("first")
    assert f.task("dyn").status is TaskStatus.FAILED_WITH_TERMINAL_ERROR
    assert "('bad name!' is not a usable task name)" in (f.task("dyn").reason_for_incompletion or "")


def test_a_dynamic_task_in_a_loop_may_choose_another_name_each_iteration() -> None:
    node = task(
        "DYNAMIC",
        "dyn",
        dynamicTaskNameParam="n",
        inputParameters={"n": "${workflow.input.names[${loop.output.iteration}]}"},
    )
    f = Flow(workflow(do_while("loop", "$.loop.iteration < 2", node)), {"names": ["x", "a", "b"]})
    assert f.decision.needs_task_defs == {"a"}
    f.task_defs["a"] = None
    f.send(f.start_message)
    assert [m.task_type for m in f.outbox(TaskMessage)] == ["a"]
    decision = f.send(f.result("dyn", output={"o": 1}))
    assert decision.needs_task_defs == {"b"}
    f.task_defs["b"] = None
    f.send(f.result("dyn", output={"o": 1}))
    assert [(m.reference_task_name, m.task_type) for m in f.outbox(TaskMessage)] == [("dyn__2", "b")]
    f.complete("dyn", {"o": 2})
    assert f.task("loop").output_data == {"iteration": 2, "1": {"dyn": {"o": 1}}, "2": {"dyn": {"o": 2}}}
