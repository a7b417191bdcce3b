"""Limits at every edge (issue 12 point 1), on the pure side: payload shape and size, ids and
names, numbers a definition may carry, and the core's own checks of what it builds or is sent."""

from __future__ import annotations

import math
from typing import Any

import pytest
from pydantic import ValidationError

from shared.core import decide
from shared.core.decide import Limits
from shared.core.retry import retry_delay_seconds
from shared.core.waits import WaitSpecError, parse_duration_ms, parse_until_ms
from shared.models.definitions import TaskDef, WorkflowDef
from shared.models.limits import (
    MAX_TIME_MS,
    PayloadLimits,
    definition_limits,
    payload_bytes,
    payload_problems,
)
from shared.models.messages import Signal, StartWorkflow, TaskResult, TimerRequest
from shared.models.runtime import TaskStatus, WorkflowStatus
from tests.unit.factories import NOW, result, start, three_step_def

SMALL = PayloadLimits(max_bytes=2048, max_depth=4, max_keys=20)


def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


# ---- payloads ---------------------------------------------------------------------------------


def test_a_payload_within_the_limits_has_no_problem() -> None:
    assert payload_problems({"a": [1, 2.5, "x", None, True, {"b": {}}]}, "input", SMALL) == []


def test_nesting_past_the_limit_names_the_deepest_allowed_path() -> None:
    assert payload_problems(nested(4), "input", SMALL) == []
    [(path, message)] = payload_problems(nested(5), "input", SMALL)
    assert path == "input.a.a.a.a"
    assert "nested more than 4 levels" in message and "CAIRN_MAX_PAYLOAD_DEPTH" in message


def test_a_payload_nested_far_past_pythons_stack_is_measured_without_recursion() -> None:
    value: Any = []
    for _ in range(100_000):
        value = [value]
    [(path, _)] = payload_problems(value, "output", PayloadLimits())
    assert path == "output" + "[0]" * 32


@pytest.mark.parametrize("number", [math.nan, math.inf, -math.inf])
def test_nan_and_infinities_are_refused_where_they_stand(number: float) -> None:
    [(path, message)] = payload_problems({"x": [1, {"y": number}]}, "input", SMALL)
    assert path == "input.x[1].y"
    assert "not a JSON number" in message


def test_keys_are_counted_at_every_level() -> None:
    assert payload_problems({str(i): {"k": i} for i in range(10)}, "input", SMALL) == []
    [(path, message)] = payload_problems({str(i): {"k": i} for i in range(11)}, "input", SMALL)
    assert path == "input" and "more than 20 keys" in message


def test_size_is_compact_json_in_utf8() -> None:
    assert payload_bytes({"a": "é"}) == len('{"a":"é"}'.encode())
    [(path, message)] = payload_problems({"text": "x" * 3000}, "input", SMALL)
    assert path == "input" and "more than the 2048 allowed" in message


def test_definitions_may_be_deeper_and_have_more_keys_than_payloads() -> None:
    limits = definition_limits(SMALL)
    assert (limits.max_depth, limits.max_keys, limits.max_bytes) == (8, 100, 2048)


# ---- ids, names and numbers ---------------------------------------------------------------------

GOOD_IDS = ["2cf37e5b-b9cd-4a63-ac54-100481d557a6", "order-123", "tenant:order.7", "a@b", "_x", "x" * 200]
BAD_IDS = ["a/b", "..", ".", "../../etc/passwd", "x\ny", "x\x00y", "x" * 201, "", " x", "a b", "a%2Fb"]


@pytest.mark.parametrize("workflow_id", GOOD_IDS)
def test_usable_workflow_ids_are_accepted(workflow_id: str) -> None:
    assert StartWorkflow(id="s", workflow_id=workflow_id, name="w").workflow_id == workflow_id


@pytest.mark.parametrize("workflow_id", BAD_IDS)
def test_ids_unusable_in_a_url_path_are_refused_with_the_rule(workflow_id: str) -> None:
    with pytest.raises(ValidationError) as raised:
        StartWorkflow(id="s", workflow_id=workflow_id, name="w")
    assert "workflowId" in str(raised.value) or "workflow_id" in str(raised.value)


@pytest.mark.parametrize("name", ["a/b", "x\x00", "..", "tab\there", "n" * 201])
def test_definition_names_follow_conductors_alphabet(name: str) -> None:
    with pytest.raises(ValidationError, match="not a valid name"):
        WorkflowDef.model_validate({"name": name, "tasks": [{"name": "t", "taskReferenceName": "t"}]})


@pytest.mark.parametrize("name", ["orders", "order v2", "ns.orders_<1>", "{team}#x"])
def test_names_conductor_accepts_are_accepted(name: str) -> None:
    assert WorkflowDef.model_validate({"name": name, "tasks": [{"name": "t", "taskReferenceName": "t"}]})


@pytest.mark.parametrize(
    "field",
    ["timeoutSeconds", "responseTimeoutSeconds", "retryCount", "retryDelaySeconds", "totalTimeoutSeconds"],
)
def test_task_def_numbers_past_a_java_int_are_refused(field: str) -> None:
    with pytest.raises(ValidationError, match="less than or equal to 2147483647"):
        TaskDef.model_validate({"name": "t", field: 2**63})


def test_a_timer_past_year_9999_cannot_even_be_requested() -> None:
    TimerRequest(id="t", action="arm", timer_id="x", workflow_id="w", fire_at=MAX_TIME_MS)
    with pytest.raises(ValidationError):
        TimerRequest(id="t", action="arm", timer_id="x", workflow_id="w", fire_at=MAX_TIME_MS + 1)


def test_reasons_are_kept_to_a_thousand_characters() -> None:
    message = TaskResult(
        id="r",
        workflow_instance_id="w",
        task_id="t",
        status=TaskStatus.FAILED,
        reason_for_incompletion="e" * 5000,
    )
    assert message.reason_for_incompletion == "e" * 1000


def test_exponential_backoff_of_a_huge_retry_count_is_capped_not_computed() -> None:
    task_def = TaskDef(name="t", retry_logic="EXPONENTIAL_BACKOFF", retry_delay_seconds=2**31 - 1)
    assert retry_delay_seconds(task_def, 2**31 - 1) == 2**31 - 1


@pytest.mark.parametrize("text", ["99999999999999 days", "3000000 days"])
def test_a_wait_duration_past_68_years_is_refused(text: str) -> None:
    with pytest.raises(WaitSpecError, match="longer than"):
        parse_duration_ms(text)


def test_a_wait_until_past_year_9999_is_refused() -> None:
    with pytest.raises(WaitSpecError, match="after the end of year 9999"):
        parse_until_ms("9999-12-31T23:59:00-05:00")
    assert parse_until_ms("1960-01-01") == 0  # already past: the WAIT ends at once


# ---- the core's own checks ------------------------------------------------------------------------


def test_a_worker_result_past_the_limits_fails_its_task_for_good_and_keeps_nothing() -> None:
    definition = three_step_def(retryCount=3)
    d = start(definition, {"n": 1})
    bad = result(d.state, "a", output_data={"deep": nested(40)})
    d = decide(definition, d.state, [bad], NOW + 1)
    task = d.state.tasks["a"]
    assert task.status is TaskStatus.FAILED_WITH_TERMINAL_ERROR
    assert "the worker's result was refused: outputData.deep" in (task.reason_for_incompletion or "")
    assert task.output_data == {}
    assert d.state.status is WorkflowStatus.FAILED


def test_a_task_input_built_past_the_limits_fails_that_task() -> None:
    definition = three_step_def()
    limits = Limits(payload=PayloadLimits(max_bytes=1024))
    d = start(definition, {"n": 1})
    big = result(d.state, "a", output_data={"n": "x" * 700})  # fits; b's input has it twice
    d = decide(definition, d.state, [big], NOW + 1, limits=limits)
    assert d.state.tasks["a"].status is TaskStatus.COMPLETED
    task = d.state.tasks["b"]
    assert task.status is TaskStatus.FAILED_WITH_TERMINAL_ERROR
    assert "inputData" in (task.reason_for_incompletion or "")


def test_a_signal_past_the_limits_is_rejected_and_the_task_keeps_waiting() -> None:
    definition = WorkflowDef.model_validate(
        {"name": "w", "tasks": [{"name": "wait", "taskReferenceName": "wait", "type": "WAIT"}]}
    )
    d = start(definition)
    signal = Signal(id="s1", workflow_id="wf-1", task_ref_name="wait", output={"x": math.inf})
    d = decide(definition, d.state, [signal], NOW + 1)
    assert d.state.tasks["wait"].status is TaskStatus.IN_PROGRESS
    assert [note.code for note in d.notes] == ["signal_past_limits"]
