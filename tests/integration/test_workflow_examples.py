"""Dapr's Python workflow examples (examples/workflow/, our versions of dapr/python-sdk's
examples/workflow with `import cairn.workflow as wf`), each run as a program against `cairn dev`,
printing the lines Dapr's README for it expects (docs/research/dapr-workflow.md §4). Each runs
in strict mode: an orchestrator that read the clock or random numbers itself would stall."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import httpx
import pytest

from tests.devserver import DevServer

pytestmark = pytest.mark.integration

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "workflow"


def run_example(
    server: DevServer, name: str, *args: str, stdin: str | None = None, app: str | None = None, **env: str
) -> str:
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / f"{name}.py"), *args],
        env={
            **os.environ,
            "CAIRN_SERVER": server.url,
            "CAIRN_APP": app or f"ex-{uuid.uuid4().hex[:8]}",
            "CAIRN_WORKFLOW_STRICT": "true",  # every example orchestrator runs under the determinism guard
            **env,
        },
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, (
        f"{name} exited {result.returncode}:\n{result.stdout}\n{result.stderr[-3000:]}"
    )
    return result.stdout


def assert_in_order(output: str, expected: list[str]) -> None:
    at = 0
    for line in expected:
        found = output.find(line, at)
        assert found >= 0, f"{line!r} not found (in order) in:\n{output}"
        at = found + len(line)


def test_task_chaining(dev_server: DevServer) -> None:
    output = run_example(dev_server, "task_chaining")
    assert_in_order(
        output,
        [
            "Step 1: Received input: 42.",
            "Step 2: Received input: 43.",
            "Step 3: Received input: 86.",
            "Workflow completed! Status: WorkflowStatus.COMPLETED",
        ],
    )


def test_fan_out_fan_in(dev_server: DevServer) -> None:
    output = run_example(dev_server, "fan_out_fan_in")
    for i in range(1, 11):  # match_order: none
        assert f"Processing work item: {i}." in output
        assert f"Work item {i} processed. Result: {2 * i}." in output
    assert "Final result: 110." in output


ORDER = "namespace(cost=2000, product='MyProduct', quantity=1)"  # a dataclass arrives as a namespace


def test_human_approval_approved_and_auto_approved(dev_server: DevServer) -> None:
    output = run_example(dev_server, "human_approval", "--cost", "2000", "--approver", "Me", stdin="\n")
    assert_in_order(
        output,
        [
            f"*** Requesting approval from user for order: {ORDER}",
            f"*** Placing order: {ORDER}",
            "Workflow completed! Result: \"Approved by 'Me'\"",
        ],
    )
    assert 'Workflow completed! Result: "Auto-approved"' in run_example(
        dev_server, "human_approval", "--cost", "5"
    )


def test_human_approval_not_approved_in_time(dev_server: DevServer) -> None:
    output = run_example(
        dev_server, "human_approval", "--cost", "2000", "--timeout", "1"
    )  # stdin closed: no ENTER
    assert "*** Workflow timed out!" in output


def test_child_workflow(dev_server: DevServer) -> None:
    output = run_example(dev_server, "child_workflow")
    parent_line = next(line for line in output.splitlines() if line.startswith("*** Calling child workflow "))
    child_id = parent_line.removeprefix("*** Calling child workflow ")
    assert child_id.endswith("-child") and f"*** Child workflow {child_id} called" in output
    child = httpx.get(f"{dev_server.url}/api/workflow/{child_id}").json()
    assert child["status"] == "COMPLETED" and child["parentWorkflowId"] == child_id.removesuffix("-child")


def test_simple_retries_child_retries_pause_resume_event_and_purge(dev_server: DevServer) -> None:
    output = run_example(dev_server, "simple")
    assert_in_order(
        output,
        [
            "Hi Counter!",
            "New counter value is: 1!",
            "New counter value is: 11!",
            "Retry count value is: 0!",
            "Retry count value is: 1! This print statement verifies retry",
            "Appending 1 to child_orchestrator_string!",
            "Appending a to child_orchestrator_string!",
            "Appending a to child_orchestrator_string!",
            "Appending 2 to child_orchestrator_string!",
            "Appending b to child_orchestrator_string!",
            "Appending b to child_orchestrator_string!",
            "Appending 3 to child_orchestrator_string!",
            "Appending c to child_orchestrator_string!",
            "Appending c to child_orchestrator_string!",
            "Get response from hello_world_wf after pause call: SUSPENDED",
            "Get response from hello_world_wf after resume call: RUNNING",
            "New counter value is: 111!",
            "New counter value is: 1111!",
            "Workflow completed! Result: Completed",
        ],
    )
    assert httpx.get(f"{dev_server.url}/api/workflow/exampleInstanceID").status_code == 404  # purged


def test_monitor_continues_as_new_with_a_bounded_history(dev_server: DevServer) -> None:
    app = f"ex-{uuid.uuid4().hex[:8]}"
    output = run_example(
        dev_server,
        "monitor",
        stdin=None,
        app=app,
        MONITOR_HEALTHY_INTERVAL_S="1",
        MONITOR_UNHEALTHY_INTERVAL_S="1",
        MONITOR_STOP_AFTER_CHECKS="4",
    )
    assert "Workflow started. Instance ID: job1" in output
    checks = [line for line in output.splitlines() if line.startswith("Job 'job1' is ")]
    assert len(checks) >= 4, output
    if "Job 'job1' is unhealthy." in checks[:-1]:  # the first turn to unhealthy sends an alert
        assert "*** Alert: Job 'job1' is unhealthy!" in output
    job = httpx.get(f"{dev_server.url}/api/workflow/job1").json()
    assert job["status"] == "RUNNING" and job["ownerApp"] == app
    history = httpx.get(f"{dev_server.url}/api/workflow/job1/history").json()
    assert history["generation"] >= 3 and len(history["events"]) < 12  # continue_as_new keeps it short
    assert httpx.delete(f"{dev_server.url}/api/workflow/job1").status_code == 200


def test_versioning_stalls_and_part_two_resumes_the_stalled_instances(dev_server: DevServer) -> None:
    app = f"ex-{uuid.uuid4().hex[:8]}"
    output = run_example(dev_server, "versioning", "part1", app=app)
    expected = [
        "test1: Received workflow call for version1",
        "test1: Finished workflow for version1",
        "test2: Received workflow call for version1",
        "test2: Finished workflow for version1",
        "test3: Received workflow call for version2",
        "test3: Finished workflow for version2",
        "test4: start",
        "test4: patch1 is patched",
        "test5: start",
        "test5: patch1 is not patched",
        "test5: patch2 is patched",
        "test6: start",
        "test6: patch1 is patched",
        "test6: patch2 is patched",
        "test7: Received workflow call for version1",
        "test7: Workflow is stalled",
        "test8: Workflow is stalled",
    ]
    for line in expected:  # match_order: none
        assert line in output, f"{line!r} missing from:\n{output}"
    stalled = {i: httpx.get(f"{dev_server.url}/api/workflow/versioning-test{i}").json() for i in (7, 8)}
    # stalled for its missing version; then test 8's runtime (of the same app, without the
    # workflow at all) woke it and said so
    assert stalled[7]["stall"]["reason"] in ("VERSION_NOT_AVAILABLE", "WORKFLOW_NOT_REGISTERED")
    assert stalled[8]["stall"]["reason"] == "PATCH_MISMATCH"
    assert stalled[8]["stall"]["description"] == "the history took patches ['patch1']; the code now takes []"
    output = run_example(dev_server, "versioning", "part2", app=app)
    for line in (
        "test100: part2",
        "test100: Finished stalled version1 workflow",
        "test100: Finished stalled patching workflow",
    ):
        assert line in output, f"{line!r} missing from:\n{output}"
    for i in (7, 8):
        assert httpx.get(f"{dev_server.url}/api/workflow/versioning-test{i}").json()["status"] == "COMPLETED"
