"""HTTP and EVENT: worker tasks for Cairn's system-task worker. The decision only dispatches them
(with their inputs resolved, EVENT's sink added) and handles their results like any worker task's
(shared/core/tasktypes/system.py)."""

from __future__ import annotations

from shared.models.messages import TaskMessage
from shared.models.runtime import TaskStatus, WorkflowStatus
from tests.unit.tasktypes.builders import Flow, simple, task, timer_arms, workflow


def test_http_is_dispatched_on_the_http_topic_with_its_request_resolved() -> None:
    node = task(
        "HTTP",
        "call",
        inputParameters={"http_request": {"uri": "https://x/${workflow.input.id}", "method": "GET"}},
    )
    f = Flow(
        workflow(node, simple("after", inputParameters={"code": "${call.output.response.statusCode}"})),
        {"id": 7},
    )
    [message] = f.outbox(TaskMessage)
    assert (message.task_type, message.task_def_name, message.reference_task_name) == ("HTTP", "call", "call")
    assert message.input_data == {"http_request": {"uri": "https://x/7", "method": "GET"}}
    assert f.task("call").status is TaskStatus.SCHEDULED
    f.complete("call", {"response": {"statusCode": 200, "body": {"ok": True}}})
    assert f.task("after").input_data == {"code": 200}


def test_an_http_failure_without_a_task_def_is_not_retried() -> None:
    node = task("HTTP", "call", inputParameters={"uri": "https://x", "method": "POST"})
    f = Flow(workflow(node))
    f.fail("call", "Failed to invoke HTTP task due to: 500")
    assert f.state.status is WorkflowStatus.FAILED
    assert f.task("call").retry_count == 0


def test_an_http_task_def_s_retries_and_delay_apply() -> None:
    node = task(
        "HTTP",
        "call",
        taskDefinition={"name": "call", "retryCount": 2, "retryDelaySeconds": 5},
        inputParameters={"uri": "https://x", "method": "POST"},
    )
    f = Flow(workflow(node))
    f.fail("call")
    assert f.task("call").retry_count == 1 and f.task("call").status is TaskStatus.SCHEDULED
    assert f.dispatched() == []
    [arm] = timer_arms(f.decision)
    assert arm.fire_at == f.now + 5000
    f.fire(arm.timer_id, at=arm.fire_at)
    assert [(m.task_type, m.retry_count) for m in f.outbox(TaskMessage)] == [("HTTP", 1)]


def test_event_is_dispatched_with_its_sink_resolved_into_the_input() -> None:
    node = task(
        "EVENT",
        "ev",
        sink="kafka:${workflow.input.topic}",
        inputParameters={"payload": "${workflow.input.p}"},
    )
    f = Flow(workflow(node, simple("after")), {"topic": "orders", "p": {"a": 1}})
    [message] = f.outbox(TaskMessage)
    assert (message.task_type, message.reference_task_name) == ("EVENT", "ev")
    assert message.input_data == {"payload": {"a": 1}, "sink": "kafka:orders", "asyncComplete": False}
    f.complete("ev", {"event_produced": "kafka:orders"})
    assert f.dispatched() == ["after"]


def test_a_silent_system_worker_times_the_task_out_like_any_worker() -> None:
    node = task(
        "EVENT",
        "ev",
        sink="kafka:orders",
        taskDefinition={"name": "ev", "retryCount": 0, "responseTimeoutSeconds": 10},
    )
    f = Flow(workflow(node))
    f.send(f.result("ev", TaskStatus.IN_PROGRESS))
    f.look(at=f.now + 10_000)
    assert f.task("ev").status is TaskStatus.TIMED_OUT
    assert f.state.status is WorkflowStatus.TIMED_OUT
