"""The conformance runner reruns Conductor's side when it shows one of Conductor's own races
(tests/conformance/runner.py); these are the shapes it must recognise, and one it must not."""

from tests.conformance.runner import join_read_an_optional_failure_early, missed_its_last_decide


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


def test_a_running_workflow_whose_tasks_all_ended_missed_its_decide() -> None:
    ended = [{"status": "COMPLETED"}, {"status": "FAILED"}]
    assert missed_its_last_decide({"status": "RUNNING", "tasks": ended})


def test_a_loop_waiting_on_a_body_that_ended_missed_its_decide() -> None:
    """agent_loop on Conductor in CI: the loop IN_PROGRESS, its body's first task COMPLETED and
    nothing scheduled after it."""
    tasks = [
        {"taskType": "SIMPLE", "status": "COMPLETED"},
        {"taskType": "DO_WHILE", "status": "IN_PROGRESS"},
        {"taskType": "SIMPLE", "status": "COMPLETED"},
    ]
    assert missed_its_last_decide({"status": "RUNNING", "tasks": tasks})
    assert not missed_its_last_decide(
        {"status": "RUNNING", "tasks": [*tasks, {"taskType": "SIMPLE", "status": "SCHEDULED"}]}
    )
    assert not missed_its_last_decide(
        {"status": "RUNNING", "tasks": [{"taskType": "DO_WHILE", "status": "IN_PROGRESS"}]}
    )


def test_a_running_workflow_with_work_left_or_a_step_not_reached_did_not() -> None:
    assert not missed_its_last_decide(
        {"status": "RUNNING", "tasks": [{"status": "COMPLETED"}, {"status": "SCHEDULED"}]}
    )
    assert not missed_its_last_decide({"status": "RUNNING", "tasks": [{"status": "IN_PROGRESS"}]})
    assert not missed_its_last_decide(
        {"status": "RUNNING", "tasks": [{"status": "COMPLETED"}], "answers": {"not reached": "pause"}}
    )
    assert not missed_its_last_decide({"status": "RUNNING", "tasks": []})
    assert not missed_its_last_decide({"status": "COMPLETED", "tasks": [{"status": "COMPLETED"}]})
