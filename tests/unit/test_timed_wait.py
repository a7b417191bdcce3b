"""Timed WAIT (`duration`, `until`): parsing, the durable timer, early signals, bad values."""

from __future__ import annotations

from typing import Any

import pytest

from shared.core import decide
from shared.core.validation import DefinitionError, parse_workflow_def
from shared.core.waits import WaitSpecError, parse_duration_ms, parse_until_ms
from shared.models.definitions import WorkflowDef
from shared.models.messages import Signal, TimerFired, TimerRequest
from shared.models.runtime import TaskStatus, WorkflowStatus
from tests.unit.factories import NOW, dispatched, start


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("30s", 30_000),
        ("45 seconds", 45_000),
        ("5 minutes", 300_000),
        ("1m", 60_000),
        ("2 hours", 7_200_000),
        ("1d 2h 30m 10s", 95_410_000),
        ("1 day 1 hour", 90_000_000),
        ("  10 SECS ", 10_000),
    ],
)
def test_durations_in_conductors_format(text: str, ms: int) -> None:
    assert parse_duration_ms(text) == ms


@pytest.mark.parametrize("text", ["", "soon", "10", "5 weeks", "1h 1d", 30, None])
def test_unreadable_durations_say_what_is_expected(text: Any) -> None:
    with pytest.raises(WaitSpecError, match="is not a duration such as"):
        parse_duration_ms(text)


@pytest.mark.parametrize(
    ("text", "iso"),
    [
        ("2026-12-01 09:30", "2026-12-01T09:30:00+00:00"),
        ("2026-12-01 09:30 UTC", "2026-12-01T09:30:00+00:00"),
        ("2026-12-01 09:30 GMT", "2026-12-01T09:30:00+00:00"),
        ("2026-12-01 09:30 +01:00", "2026-12-01T09:30:00+01:00"),
        ("2026-12-01 09:30 -0530", "2026-12-01T09:30:00-05:30"),
        ("2026-12-01", "2026-12-01T00:00:00+00:00"),
        ("2026-12-01T09:30:00+02:00", "2026-12-01T09:30:00+02:00"),
    ],
)
def test_until_formats(text: str, iso: str) -> None:
    from datetime import datetime

    assert parse_until_ms(text) == int(datetime.fromisoformat(iso).timestamp() * 1000)


def timed(**wait_input: Any) -> WorkflowDef:
    return WorkflowDef.model_validate(
        {
            "name": "timed",
            "tasks": [
                {
                    "name": "pause",
                    "taskReferenceName": "pause",
                    "type": "WAIT",
                    "inputParameters": wait_input,
                },
                {"name": "t", "taskReferenceName": "after", "inputParameters": {"waited": "${pause.output}"}},
            ],
        }
    )


def test_a_duration_wait_arms_one_durable_timer_and_completes_when_it_fires() -> None:
    definition = timed(duration="2 minutes")
    d = start(definition)
    assert d.state.tasks["pause"].status is TaskStatus.IN_PROGRESS
    [arm] = [m for m in d.outbox if isinstance(m, TimerRequest)]
    assert arm.action == "arm" and arm.fire_at == NOW + 120_000
    assert dispatched(d) == []
    fired = TimerFired(id="f", workflow_id="wf-1", timer_id=arm.timer_id)
    d = decide(definition, d.state, [fired], NOW + 120_000)
    assert d.state.tasks["pause"].status is TaskStatus.COMPLETED
    assert [m.reference_task_name for m in dispatched(d)] == ["after"]


def test_a_signal_ends_a_timed_wait_early_and_cancels_its_timer() -> None:
    definition = timed(duration="1d")
    d = start(definition)
    [arm] = [m for m in d.outbox if isinstance(m, TimerRequest)]
    signal = Signal(id="s", workflow_id="wf-1", task_ref_name="pause", output={"by": "ann"})
    d = decide(definition, d.state, [signal], NOW + 5)
    assert d.state.tasks["pause"].status is TaskStatus.COMPLETED
    cancels = [m.timer_id for m in d.outbox if isinstance(m, TimerRequest) and m.action == "cancel"]
    assert cancels == [arm.timer_id] and arm.timer_id not in d.state.timers
    late = decide(
        definition, d.state, [TimerFired(id="f", workflow_id="wf-1", timer_id=arm.timer_id)], NOW + 9
    )
    assert not late.changed and [r.code for r in late.notes] == ["timer_not_pending"]


def test_until_in_the_past_fires_as_soon_as_the_timer_service_looks() -> None:
    definition = timed(until="2020-01-01 00:00 UTC")
    d = start(definition)
    [arm] = [m for m in d.outbox if isinstance(m, TimerRequest)]
    assert arm.fire_at == parse_until_ms("2020-01-01 00:00 UTC") < NOW


def test_an_unreadable_duration_from_an_expression_fails_the_workflow_naming_the_value() -> None:
    definition = WorkflowDef.model_validate(
        {
            "name": "timed",
            "tasks": [
                {
                    "name": "pause",
                    "taskReferenceName": "pause",
                    "type": "WAIT",
                    "inputParameters": {"duration": "${workflow.input.wait}"},
                }
            ],
        }
    )
    d = start(definition, {"wait": "a fortnight"})
    assert d.state.status is WorkflowStatus.FAILED
    assert d.state.tasks["pause"].status is TaskStatus.FAILED_WITH_TERMINAL_ERROR
    assert "duration 'a fortnight' is not a duration such as" in (d.state.reason_for_incompletion or "")
    assert d.state.timers == {}


def test_validation_reads_literal_waits_and_leaves_expressions_for_run_time() -> None:
    def wait_def(inputs: dict[str, Any]) -> dict[str, Any]:
        return {
            "name": "w",
            "tasks": [{"name": "w", "taskReferenceName": "w", "type": "WAIT", "inputParameters": inputs}],
        }

    parse_workflow_def(wait_def({"duration": "10 minutes"}))
    parse_workflow_def(wait_def({"until": "2026-12-01 09:30 UTC"}))
    parse_workflow_def(wait_def({"duration": "${workflow.input.d}"}))
    with pytest.raises(DefinitionError) as caught:
        parse_workflow_def(wait_def({"duration": "10 fortnights"}))
    assert caught.value.problems == [
        (
            "tasks[0].inputParameters.duration",
            "duration '10 fortnights' is not " + 'a duration such as "30s", "5 minutes" or "1d 2h 30m"',
        )
    ]
    with pytest.raises(DefinitionError, match="either duration or until"):
        parse_workflow_def(wait_def({"duration": "1m", "until": "2026-12-01"}))
