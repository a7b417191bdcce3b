"""The code engine's decisions, without I/O: turns, actions, history, events, stalls."""

from __future__ import annotations

from shared.core.tasktypes.wait import TIMER_WAIT
from shared.models.messages import (
    PauseWorkflow,
    RaiseEvent,
    ResumeWorkflow,
    RetryWorkflow,
    StartWorkflow,
    SubWorkflowEnded,
    TaskMessage,
    TerminateWorkflow,
    TimerFired,
)
from shared.models.runtime import TaskStatus, WorkflowStatus
from tests.unit.code_harness import CodeHarness, is_turn


def schedule(action_id: int, name: str, value: object = None) -> dict[str, object]:
    return {"type": "ScheduleTask", "id": action_id, "name": name, "input": value}


def complete(action_id: int, result: object) -> dict[str, object]:
    return {
        "type": "CompleteOrchestration",
        "id": action_id,
        "orchestrationStatus": "COMPLETED",
        "result": result,
    }


def test_a_start_hands_the_first_turn_to_the_app_runtime() -> None:
    h = CodeHarness(input_=42, app="shop")
    [turn] = [m for m in h.last.outbox if is_turn(m)]
    assert turn.task_type == "orchestrations.shop"
    item = h.turn()
    assert item["turn"] == 1 and item["historyLength"] == 0 and item["pastEvents"] == []
    assert [e["type"] for e in item["newEvents"]] == ["OrchestratorStarted", "ExecutionStarted"]
    assert item["newEvents"][1]["input"] == 42 and item["newEvents"][1]["instanceId"] == "code-1"
    assert h.state.status is WorkflowStatus.RUNNING and h.history == {}


def test_a_chain_of_activities_runs_turn_by_turn_and_records_its_history() -> None:
    h = CodeHarness(input_=1)
    h.answer(schedule(1, "step1", 1))
    [message] = [m for m in h.last.outbox if isinstance(m, TaskMessage) and not is_turn(m)]
    assert message.task_type == "step1" and message.input_data == {"input": 1}
    assert h.events_of() == ["OrchestratorStarted", "ExecutionStarted", "TaskScheduled"]
    h.complete("step1_1", 2)
    item = h.turn()
    assert item["turn"] == 2 and item["historyLength"] == 3 and len(item["pastEvents"]) == 3
    assert [e["type"] for e in item["newEvents"]] == ["OrchestratorStarted", "TaskCompleted"]
    assert item["newEvents"][1] == {**item["newEvents"][1], "taskScheduledId": 1, "result": 2}
    h.answer(complete(2, [2]))
    assert h.state.status is WorkflowStatus.COMPLETED
    assert h.state.output == {"result": [2]}
    assert h.events_of()[-1] == "ExecutionCompleted"
    assert [t.reference_task_name for t in h.records.values()] == ["step1_1"]
    assert "orchestrator" not in h.state.tasks and h.state.code.actions == {}  # type: ignore[union-attr]


def test_events_that_arrive_during_a_turn_wait_for_the_next_one() -> None:
    h = CodeHarness()
    h.answer(schedule(1, "a"), schedule(2, "b"))
    h.complete("a_1", "A")  # turn 2 goes out with a's result
    h.complete("b_2", "B")  # arrives while turn 2 is out
    item = h.turn()
    assert item["turn"] == 2 and [e["type"] for e in item["newEvents"]] == [
        "OrchestratorStarted",
        "TaskCompleted",
    ]
    h.answer()  # turn 2 asks for nothing: b's result goes out in turn 3, after turn 2 in the history
    item = h.turn()
    assert item["turn"] == 3 and item["newEvents"][1]["taskScheduledId"] == 2
    assert h.events_of()[-2:] == ["OrchestratorStarted", "TaskCompleted"]


def test_a_failed_activity_is_the_orchestrators_to_handle() -> None:
    h = CodeHarness()
    h.answer(schedule(1, "flaky"))
    h.fail("flaky_1", "boom", errorType="ValueError", stackTrace="trace")
    [_, failed] = h.turn()["newEvents"]
    assert failed["type"] == "TaskFailed" and failed["taskScheduledId"] == 1
    assert failed["failureDetails"] == {"errorType": "ValueError", "message": "boom", "stackTrace": "trace"}
    assert h.state.status is WorkflowStatus.RUNNING  # no engine-side retry, no failed workflow


def test_a_lost_activity_is_handed_out_again_before_the_orchestrator_hears_of_it() -> None:
    h = CodeHarness()
    h.answer(schedule(1, "slow"))
    first = h.activity("slow_1")
    h.send(h.result(first, TaskStatus.IN_PROGRESS, {}))  # a worker took it, then went silent
    h.send(advance_ms=3_600_000 + 2000)  # its response timeout passes with no word
    again = h.activity("slow_1")
    assert again.task_id != first.task_id and again.retry_count == 1
    assert "orchestrator" not in h.state.tasks  # the orchestrator was not bothered


def test_a_timer_fires_into_the_next_turn() -> None:
    h = CodeHarness()
    fire_at = h.now + 60_000
    h.answer({"type": "CreateTimer", "id": 1, "fireAt": fire_at})
    [timer] = [t for t in h.state.timers.values() if t.purpose == TIMER_WAIT]
    assert timer.fire_at == fire_at
    h.send(TimerFired(id="f1", workflow_id="code-1", timer_id=timer.timer_id))
    [_, fired] = h.turn()["newEvents"]
    assert fired["type"] == "TimerFired" and fired["timerId"] == 1


def test_an_external_event_is_buffered_for_the_next_turn() -> None:
    h = CodeHarness()
    h.answer()
    h.send(RaiseEvent(id="e1", workflow_id="code-1", name="approval", input={"by": "ann"}))
    [_, raised] = h.turn()["newEvents"]
    assert raised == {**raised, "type": "EventRaised", "name": "approval", "input": {"by": "ann"}}


def test_a_child_is_started_through_the_outbox_and_its_end_comes_back() -> None:
    h = CodeHarness()
    h.answer(
        {"type": "CreateSubOrchestration", "id": 1, "name": "child", "instanceId": "code-1:0001", "input": 5}
    )
    [start] = [m for m in h.last.outbox if isinstance(m, StartWorkflow)]
    assert (start.workflow_id, start.kind, start.app, start.input) == (
        "code-1:0001",
        None,  # the decider makes it a JSON child if one of that name is registered, else code
        "app",
        {"input": 5},
    )
    task = h.activity("child_1")
    h.send(
        SubWorkflowEnded(
            id="end", workflow_id="code-1", task_id=task.task_id, sub_workflow_id="code-1:0001",
            status="COMPLETED", output={"result": 25}, kind="code",
        )
    )  # fmt: skip
    [_, ended] = h.turn()["newEvents"]
    assert ended == {**ended, "type": "SubOrchestrationInstanceCompleted", "taskScheduledId": 1, "result": 25}


def test_an_answer_for_an_old_turn_is_ignored() -> None:
    h = CodeHarness()
    h.answer(schedule(1, "a"))
    h.complete("a_1", 1)
    decision = h.send(h.result(h.turn_task(), TaskStatus.COMPLETED, {"turn": 1, "actions": []}))
    assert [n.code for n in decision.notes] == ["turn_superseded"]
    assert h.turn()["turn"] == 2


def test_an_unreadable_answer_stalls_the_execution_and_keeps_its_events() -> None:
    h = CodeHarness()
    h.send(h.result(h.turn_task(), TaskStatus.COMPLETED, {"turn": 1, "actions": [{"type": "Bogus"}]}))
    assert h.state.status is WorkflowStatus.STALLED
    assert h.state.code.stall.reason == "INVALID_RESPONSE"  # type: ignore[union-attr]
    assert "orchestrator" not in h.state.tasks and h.history == {}
    h.send(RaiseEvent(id="e1", workflow_id="code-1", name="nudge"))  # something new: try again
    types = [e["type"] for e in h.turn()["newEvents"]]
    assert types == ["OrchestratorStarted", "ExecutionStarted", "EventRaised"]
    h.answer(complete(1, "ok"))
    assert h.state.status is WorkflowStatus.COMPLETED and h.state.code.stall is None  # type: ignore[union-attr]


def test_an_action_id_the_history_used_is_nondeterminism() -> None:
    h = CodeHarness()
    h.answer(schedule(1, "a"))
    h.complete("a_1", 1)
    h.answer(schedule(1, "b"))
    assert h.state.status is WorkflowStatus.STALLED
    assert h.state.code.stall.reason == "NONDETERMINISM"  # type: ignore[union-attr]
    assert "action 1" in h.state.code.stall.description  # type: ignore[union-attr]


def test_patches_must_keep_the_historys_as_a_prefix() -> None:
    h = CodeHarness()
    h.answer(schedule(1, "a"), version={"patches": ["p1"]})
    assert h.history[0][0]["version"] == {"patches": ["p1"]}
    h.complete("a_1", 1)
    h.answer(version={"patches": ["p1", "p2"]})  # a new patch after the old one: fine
    assert h.state.code.patches == ["p1", "p2"]  # type: ignore[union-attr]
    assert h.history[0][3]["version"] == {"patches": ["p2"]}  # only what is new is recorded
    h.send(RaiseEvent(id="e1", workflow_id="code-1", name="x"))
    h.answer(version={"patches": ["p2"]})  # the code no longer takes p1
    assert h.state.status is WorkflowStatus.STALLED
    stall = h.state.code.stall  # type: ignore[union-attr]
    assert (
        stall.reason == "PATCH_MISMATCH"
        and "['p1', 'p2']" in stall.description
        and "['p2']" in stall.description
    )


def test_a_stall_the_runtime_reports_waits_for_the_next_event() -> None:
    h = CodeHarness()
    h.answer(stall={"reason": "VERSION_NOT_AVAILABLE", "description": "Version not available: v1"})
    assert h.state.status is WorkflowStatus.STALLED
    assert not [m for m in h.last.outbox if is_turn(m)]  # no turn again until something happens
    h.send(RaiseEvent(id="e1", workflow_id="code-1", name="go"))
    assert h.turn()["turn"] == 2


def test_pause_holds_turns_until_resume() -> None:
    h = CodeHarness()
    h.answer(schedule(1, "a"))
    h.send(PauseWorkflow(id="p", workflow_id="code-1"))
    assert h.state.status is WorkflowStatus.PAUSED
    h.complete("a_1", 1)
    assert "orchestrator" not in h.state.tasks
    h.send(ResumeWorkflow(id="r", workflow_id="code-1"))
    types = [e["type"] for e in h.turn()["newEvents"]]
    assert types == ["OrchestratorStarted", "ExecutionSuspended", "TaskCompleted", "ExecutionResumed"]


def test_terminate_cancels_what_is_live_and_records_it() -> None:
    h = CodeHarness()
    h.answer(schedule(1, "a"))
    h.send(TerminateWorkflow(id="t", workflow_id="code-1", reason="stop"))
    assert h.state.status is WorkflowStatus.TERMINATED and h.state.output == {"result": "stop"}
    assert h.events_of()[-2:] == ["ExecutionTerminated", "ExecutionCompleted"]
    assert h.state.tasks["a_1"].status is TaskStatus.CANCELED


def test_operations_for_json_workflows_are_refused() -> None:
    h = CodeHarness()
    h.send(RetryWorkflow(id="r", workflow_id="code-1"))
    [record] = h.state.operations
    assert not record.applied and "code workflow" in (record.reason or "")


def test_continue_as_new_starts_a_new_generation_with_the_events_not_taken() -> None:
    h = CodeHarness(input_=0)
    h.answer(schedule(1, "a"))
    h.complete("a_1", 1)
    carry = {"type": "EventRaised", "name": "x", "input": 7}
    h.answer(
        {"type": "CompleteOrchestration", "id": 2, "orchestrationStatus": "CONTINUED_AS_NEW", "result": 1,
         "carryoverEvents": [carry]}
    )  # fmt: skip
    assert h.state.status is WorkflowStatus.RUNNING and h.state.epoch == 1
    assert h.events_of(0)[-1] == "ExecutionCompleted"
    item = h.turn()
    assert item["generation"] == 1 and item["historyLength"] == 0
    types = [e["type"] for e in item["newEvents"]]
    assert types == ["OrchestratorStarted", "ExecutionStarted", "EventRaised"]
    assert item["newEvents"][1]["input"] == 1 and h.state.input == {"input": 1}
    assert h.state.is_superseded(h.records[next(iter(h.records))].seq)


def test_a_start_under_the_id_of_a_finished_instance_runs_it_again() -> None:
    h = CodeHarness(input_=1)
    h.answer(complete(1, "first"))
    assert h.state.status is WorkflowStatus.COMPLETED
    again = StartWorkflow(
        id="m-again", workflow_id="code-1", name="wf", input={"input": 2}, kind="code", app="b"
    )
    h.send(again)
    assert h.state.status is WorkflowStatus.RUNNING and h.state.output == {} and h.state.epoch == 1
    assert h.state.code.app == "b" and h.turn_task().task_type == "orchestrations.b"  # type: ignore[union-attr]
    assert h.turn()["newEvents"][1]["input"] == 2


def test_timer_purpose_is_the_wait_timers() -> None:
    h = CodeHarness()
    h.answer({"type": "CreateTimer", "id": 1, "fireAt": h.now + 5})
    assert [t.purpose for t in h.state.timers.values() if t.task_id] == [TIMER_WAIT]


def test_a_json_childs_whole_output_is_the_result() -> None:
    h = CodeHarness()
    h.answer(
        {
            "type": "CreateSubOrchestration",
            "id": 1,
            "name": "json_child",
            "instanceId": "c1",
            "input": {"a": 1},
        }
    )
    task = h.activity("json_child_1")
    h.send(
        SubWorkflowEnded(
            id="end", workflow_id="code-1", task_id=task.task_id, sub_workflow_id="c1",
            status="COMPLETED", output={"sum": 3},
        )
    )  # fmt: skip
    [_, ended] = h.turn()["newEvents"]
    assert ended["result"] == {"sum": 3}


def test_a_turn_lost_with_its_runtime_is_handed_out_again_with_its_events() -> None:
    h = CodeHarness()
    first = h.turn_task()
    h.send(h.result(first, TaskStatus.IN_PROGRESS, {}))  # a runtime took it, then died
    h.send(advance_ms=60_000 + 1000)
    again = h.turn_task()
    assert again.task_id != first.task_id and not again.status.is_terminal
    assert [e["type"] for e in h.turn()["newEvents"]] == ["OrchestratorStarted", "ExecutionStarted"]
    assert h.turn()["turn"] == 2 and any("lost" in r for r in h.last.repairs)
    h.answer(complete(1, "ok"))
    assert h.state.status is WorkflowStatus.COMPLETED


def test_an_activitys_registered_task_def_is_honoured_and_kept() -> None:
    from shared.models.definitions import TaskDef

    h = CodeHarness()
    h.registered["slow"] = TaskDef(
        name="slow", response_timeout_seconds=5, retry_count=1, retry_delay_seconds=0
    )
    h.answer(schedule(1, "slow"))
    [message] = [m for m in h.last.outbox if isinstance(m, TaskMessage) and not is_turn(m)]
    assert message.response_timeout_seconds == 5
    h.registered.clear()  # later edits do not change a running instance
    for _ in range(2):
        h.send(h.result(h.activity("slow_1"), TaskStatus.IN_PROGRESS, {}))
        h.send(advance_ms=6000)
    [_, failed] = h.turn()["newEvents"]  # retried once, then the orchestrator hears of it
    assert failed["type"] == "TaskFailed" and failed["failureDetails"]["errorType"] == "TimeoutError"
    assert [t.retry_count for t in h.records.values()] == [0, 1]


def test_the_sweeper_leaves_a_stalled_or_waiting_instance_alone() -> None:
    from shared.core.attention import attention_at
    from shared.core.invariants import invariant_violations

    h = CodeHarness()
    h.answer()  # waits for an event, forever if need be: healthy, nothing due
    assert attention_at(h.state) is None and invariant_violations(h.state) == []
    h.send(RaiseEvent(id="e1", workflow_id="code-1", name="x"))
    h.answer(stall={"reason": "PATCH_MISMATCH", "description": "changed"})
    assert h.state.status is WorkflowStatus.STALLED
    assert attention_at(h.state) is None and invariant_violations(h.state) == []
