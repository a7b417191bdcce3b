"""The conformance runner reruns Conductor's side when it shows one of Conductor's own races
(tests/conformance/runner.py); these are the shapes it must recognise, and one it must not."""

from tests.conformance.runner import join_read_an_optional_failure_early


def run(join_status: str, maybe_status: str) -> list[dict[str, object]]:
    return [
        {"referenceTaskName": "maybe", "taskType": "SIMPLE", "status": maybe_status},
        {"referenceTaskName": "fine", "taskType": "SIMPLE", "status": "COMPLETED"},
        {
            "referenceTaskName": "join",
            "taskType": "JOIN",
            "status": join_status,
            "inputData": {"joinOn": ["maybe", "fine"]},
        },
    ]


def test_a_join_completed_over_an_optional_failure_is_conductors_race() -> None:
    assert join_read_an_optional_failure_early(run("COMPLETED", "COMPLETED_WITH_ERRORS"))


def test_the_join_conductor_usually_reports_is_not() -> None:
    assert not join_read_an_optional_failure_early(run("COMPLETED_WITH_ERRORS", "COMPLETED_WITH_ERRORS"))
    assert not join_read_an_optional_failure_early(run("COMPLETED", "COMPLETED"))
