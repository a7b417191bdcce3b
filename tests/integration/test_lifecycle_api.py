"""Lifecycle operations over HTTP on `cairn dev`, called as Conductor's official Python client
(conductor-python's OrkesWorkflowClient) calls them: pause, resume, restart, rerun, retry, skip,
terminate with triggerFailureWorkflow, and the bulk endpoints. The test plays the worker itself
(poll and update over HTTP), so it decides when each task ends."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from conductor.client.http.models import RerunWorkflowRequest, SkipTaskRequest, Workflow
from conductor.client.http.rest import ApiException
from conductor.client.orkes.orkes_workflow_client import OrkesWorkflowClient

from tests.devserver import DevServer
from tests.integration.test_conductor_client import client_configuration

pytestmark = pytest.mark.integration
WITHIN_S = 30.0


@pytest.fixture(scope="module")
def http(dev_server: DevServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=dev_server.url, timeout=30) as client:
        yield client


@pytest.fixture(scope="module")
def workflows(dev_server: DevServer) -> OrkesWorkflowClient:
    return OrkesWorkflowClient(client_configuration(dev_server.url))


def three_steps(http: httpx.Client, *, version: int = 1, last: str | None = None) -> tuple[str, str]:
    """A registered workflow t1 -> t2 -> t3 of SIMPLE tasks of one fresh type, no retries."""
    name = f"ops_{uuid.uuid4().hex[:8]}"
    task_type = f"{name}_work"
    http.post("/api/metadata/taskdefs", json=[{"name": task_type, "retryCount": 0}]).raise_for_status()
    refs = ["t1", "t2", last or "t3"]
    workflow = {
        "name": name,
        "version": version,
        "tasks": [
            {
                "name": task_type,
                "taskReferenceName": ref,
                "type": "SIMPLE",
                "inputParameters": {"n": "${workflow.input.n}"},
            }
            for ref in refs
        ],
        "outputParameters": {"last": f"${{{refs[-1]}.output.v}}"},
        "failureWorkflow": "",
    }
    http.post("/api/metadata/workflow", json=workflow).raise_for_status()
    return name, task_type


def start(http: httpx.Client, name: str, **input_: Any) -> str:
    answer = http.post(f"/api/workflow/{name}", json=input_)
    answer.raise_for_status()
    return answer.text


def poll(http: httpx.Client, task_type: str, within_s: float = WITHIN_S) -> dict[str, Any]:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        answer = http.get(f"/api/tasks/poll/{task_type}", params={"workerid": "ops-test"})
        if answer.status_code == 200 and answer.content:
            task: dict[str, Any] = answer.json()
            return task
        time.sleep(0.05)
    pytest.fail(f"no {task_type} task to poll within {within_s} s")


def report(http: httpx.Client, task: dict[str, Any], status: str = "COMPLETED", **output: Any) -> None:
    http.post(
        "/api/tasks",
        json={
            "workflowInstanceId": task["workflowInstanceId"],
            "taskId": task["taskId"],
            "status": status,
            "outputData": output,
            "reasonForIncompletion": "the test failed it" if status == "FAILED" else None,
        },
    ).raise_for_status()


def run(
    http: httpx.Client, task_type: str, ref: str, status: str = "COMPLETED", **output: Any
) -> dict[str, Any]:
    task = poll(http, task_type)
    assert task["referenceTaskName"] == ref, task
    report(http, task, status, **output)
    return task


def status_of(workflows: OrkesWorkflowClient, workflow_id: str) -> Workflow:
    return workflows.get_workflow(workflow_id, include_tasks=True)


def until_status(workflows: OrkesWorkflowClient, workflow_id: str, status: str) -> Workflow:
    deadline = time.monotonic() + WITHIN_S
    while True:
        workflow = status_of(workflows, workflow_id)
        if workflow.status == status:
            return workflow
        if time.monotonic() > deadline:
            pytest.fail(
                f"{workflow_id} is {workflow.status}, not {status}: {workflow.reason_for_incompletion}"
            )
        time.sleep(0.05)


def tasks_of(workflow: Workflow) -> list[tuple[str, str]]:
    return [(t.reference_task_name, t.status) for t in workflow.tasks or []]


def test_pause_keeps_the_running_tasks_result_and_schedules_nothing_until_resume(
    http: httpx.Client, workflows: OrkesWorkflowClient
) -> None:
    name, task_type = three_steps(http)
    workflow_id = start(http, name, n=1)
    first = poll(http, task_type)
    workflows.pause_workflow(workflow_id)
    assert status_of(workflows, workflow_id).status == "PAUSED"
    report(http, first, v=1)
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:  # the result is recorded, and nothing new is scheduled
        paused = status_of(workflows, workflow_id)
        assert paused.status == "PAUSED" and len(paused.tasks) == 1, tasks_of(paused)
        time.sleep(0.1)
    assert tasks_of(paused) == [("t1", "COMPLETED")] and paused.tasks[0].output_data == {"v": 1}
    assert http.get(f"/api/tasks/poll/{task_type}").status_code == 204
    workflows.resume_workflow(workflow_id)
    run(http, task_type, "t2", v=2)
    run(http, task_type, "t3", v=3)
    done = until_status(workflows, workflow_id, "COMPLETED")
    assert done.output == {"last": 3}


def test_operations_that_do_not_apply_answer_409_with_conductors_body(
    http: httpx.Client, workflows: OrkesWorkflowClient
) -> None:
    name, task_type = three_steps(http)
    workflow_id = start(http, name, n=1)
    with pytest.raises(ApiException) as resumed:
        workflows.resume_workflow(workflow_id)
    assert resumed.value.status == 409
    answer = http.put(f"/api/workflow/{workflow_id}/resume")
    body = answer.json()
    assert answer.status_code == 409 and body["status"] == 409 and "not PAUSED" in body["message"]
    for path in ("restart", "retry"):
        answer = http.post(f"/api/workflow/{workflow_id}/{path}")
        assert answer.status_code == 409 and "only a finished workflow" in answer.json()["message"], path
    for ref in ("t1", "t2", "t3"):
        run(http, task_type, ref, v=ref)
    until_status(workflows, workflow_id, "COMPLETED")
    answer = http.post(f"/api/workflow/{workflow_id}/retry")
    assert answer.status_code == 409 and "nothing to retry" in answer.json()["message"]
    assert http.put(f"/api/workflow/{workflow_id}/pause").status_code == 409
    assert http.put(f"/api/workflow/{uuid.uuid4()}/pause").status_code == 404
    assert status_of(workflows, workflow_id).status == "COMPLETED"


def test_restart_with_latest_definitions_after_the_definition_was_fixed(
    http: httpx.Client, workflows: OrkesWorkflowClient
) -> None:
    name, task_type = three_steps(http)
    workflow_id = start(http, name, n=1)
    old_first = run(http, task_type, "t1", v=1)
    run(http, task_type, "t2", "FAILED")
    failed = until_status(workflows, workflow_id, "FAILED")
    assert tasks_of(failed) == [("t1", "COMPLETED"), ("t2", "FAILED")]
    fixed = http.get(f"/api/metadata/workflow/{name}").json()
    fixed["tasks"][1]["taskReferenceName"] = "t2_fixed"
    fixed["outputParameters"] = {"last": "${t3.output.v}", "fixed": True}
    http.put("/api/metadata/workflow", json=[fixed]).raise_for_status()
    workflows.restart_workflow(workflow_id, use_latest_def=True)
    assert status_of(workflows, workflow_id).status == "RUNNING"
    run(http, task_type, "t1", v=10)
    run(http, task_type, "t2_fixed", v=20)
    run(http, task_type, "t3", v=30)
    done = until_status(workflows, workflow_id, "COMPLETED")
    assert done.output == {"last": 30, "fixed": True}
    assert tasks_of(done) == [("t1", "COMPLETED"), ("t2_fixed", "COMPLETED"), ("t3", "COMPLETED")]
    old = http.get(f"/api/tasks/{old_first['taskId']}")  # the earlier run stays readable
    assert old.status_code == 200 and old.json()["outputData"] == {"v": 1}


def test_retry_runs_the_failed_task_again_and_the_workflow_completes(
    http: httpx.Client, workflows: OrkesWorkflowClient
) -> None:
    name, task_type = three_steps(http)
    workflow_id = start(http, name, n=1)
    run(http, task_type, "t1", v=1)
    failed_task = run(http, task_type, "t2", "FAILED")
    until_status(workflows, workflow_id, "FAILED")
    workflows.retry_workflow(workflow_id)
    again = run(http, task_type, "t2", v=2)
    assert again["taskId"] != failed_task["taskId"] and again["retryCount"] == 1
    run(http, task_type, "t3", v=3)
    done = until_status(workflows, workflow_id, "COMPLETED")
    assert tasks_of(done) == [("t1", "COMPLETED"), ("t2", "FAILED"), ("t2", "COMPLETED"), ("t3", "COMPLETED")]
    assert done.tasks[1].retried


def test_rerun_from_a_task_keeps_the_tasks_before_it(
    http: httpx.Client, workflows: OrkesWorkflowClient
) -> None:
    name, task_type = three_steps(http)
    workflow_id = start(http, name, n=1)
    first = run(http, task_type, "t1", v=1)
    second = run(http, task_type, "t2", v=2)
    run(http, task_type, "t3", v=3)
    until_status(workflows, workflow_id, "COMPLETED")
    request = RerunWorkflowRequest(re_run_from_task_id=second["taskId"], task_input={"n": 99})
    assert workflows.rerun_workflow(workflow_id, request) == workflow_id
    again = run(http, task_type, "t2", v=20)
    assert again["inputData"] == {"n": 99} and again["taskId"] != second["taskId"]
    run(http, task_type, "t3", v=30)
    done = until_status(workflows, workflow_id, "COMPLETED")
    assert tasks_of(done) == [("t1", "COMPLETED"), ("t2", "COMPLETED"), ("t3", "COMPLETED")]
    assert done.tasks[0].task_id == first["taskId"] and done.output == {"last": 30}


def test_skip_a_waiting_task_with_an_output(http: httpx.Client, workflows: OrkesWorkflowClient) -> None:
    name = f"ops_wait_{uuid.uuid4().hex[:8]}"
    workflow = {
        "name": name,
        "version": 1,
        "tasks": [
            {"name": "approval", "taskReferenceName": "approval", "type": "WAIT"},
            {
                "name": "set",
                "taskReferenceName": "echo",
                "type": "SET_VARIABLE",
                "inputParameters": {"seen": "${approval.output.ok}"},
            },
        ],
        "outputParameters": {"seen": "${workflow.variables.seen}"},
    }
    http.post("/api/metadata/workflow", json=workflow).raise_for_status()
    workflow_id = start(http, name)
    workflows.skip_task_from_workflow(workflow_id, "approval", SkipTaskRequest(task_output={"ok": "yes"}))
    done = until_status(workflows, workflow_id, "COMPLETED")
    assert tasks_of(done) == [("approval", "SKIPPED"), ("echo", "COMPLETED")]
    assert done.output == {"seen": "yes"}


def test_terminate_with_trigger_failure_workflow_starts_it(
    http: httpx.Client, workflows: OrkesWorkflowClient
) -> None:
    cleanup, cleanup_type = three_steps(http)
    name = f"ops_failing_{uuid.uuid4().hex[:8]}"
    http.post(
        "/api/metadata/workflow",
        json={
            "name": name,
            "version": 1,
            "tasks": [{"name": "hold", "taskReferenceName": "hold", "type": "WAIT"}],
            "failureWorkflow": cleanup,
        },
    ).raise_for_status()
    workflow_id = start(http, name)
    workflows.terminate_workflow(workflow_id, reason="operator", trigger_failure_workflow=True)
    ended = until_status(workflows, workflow_id, "TERMINATED")
    failure_id = ended.output["conductor.failure_workflow"]
    first = poll(http, cleanup_type)
    assert first["workflowInstanceId"] == failure_id


def test_bulk_operations_answer_conductors_bulk_response(
    http: httpx.Client, workflows: OrkesWorkflowClient
) -> None:
    name, _ = three_steps(http)
    ids = [start(http, name, n=i) for i in range(3)]
    unknown = str(uuid.uuid4())
    paused = http.put("/api/workflow/bulk/pause", json=[*ids, unknown]).json()
    assert paused["bulkSuccessfulResults"] == ids and list(paused["bulkErrorResults"]) == [unknown]
    assert {status_of(workflows, i).status for i in ids} == {"PAUSED"}
    resumed = http.put("/api/workflow/bulk/resume", json=ids).json()
    assert resumed == {"bulkErrorResults": {}, "bulkSuccessfulResults": ids}
    terminated = http.post("/api/workflow/bulk/terminate", json=ids, params={"reason": "bulk"}).json()
    assert terminated["bulkSuccessfulResults"] == ids
    for workflow_id in ids:
        until_status(workflows, workflow_id, "TERMINATED")
    restarted = http.post("/api/workflow/bulk/restart", json=ids).json()
    assert restarted["bulkSuccessfulResults"] == ids
    assert {status_of(workflows, i).status for i in ids} == {"RUNNING"}
    retried = http.post("/api/workflow/bulk/retry", json=ids).json()
    assert list(retried["bulkErrorResults"]) == ids  # running again: nothing to retry
    assert http.put("/api/workflow/bulk/pause", json=["x"] * 1001).status_code == 400


def parent_and_child(http: httpx.Client) -> tuple[str, str]:
    """A parent whose one task is a SUB_WORKFLOW running a child of one SIMPLE task."""
    child, task_type = three_steps(http)
    http.post(
        "/api/metadata/workflow",
        json={
            "name": child,
            "version": 2,
            "tasks": [{"name": task_type, "taskReferenceName": "work", "type": "SIMPLE"}],
            "outputParameters": {"v": "${work.output.v}"},
        },
    ).raise_for_status()
    parent = f"{child}_parent"
    http.post(
        "/api/metadata/workflow",
        json={
            "name": parent,
            "version": 1,
            "tasks": [
                {
                    "name": "sub",
                    "taskReferenceName": "sub",
                    "type": "SUB_WORKFLOW",
                    "subWorkflowParam": {"name": child, "version": 2},
                }
            ],
            "outputParameters": {"v": "${sub.output.v}"},
        },
    ).raise_for_status()
    return parent, task_type


@pytest.mark.parametrize("resume_subworkflow_tasks", [False, True])
def test_retry_of_a_failed_sub_workflow_task(
    http: httpx.Client, workflows: OrkesWorkflowClient, resume_subworkflow_tasks: bool
) -> None:
    parent, task_type = parent_and_child(http)
    workflow_id = start(http, parent)
    failed = run(http, task_type, "work", "FAILED")
    first_child = failed["workflowInstanceId"]
    until_status(workflows, first_child, "FAILED")
    until_status(workflows, workflow_id, "FAILED")
    workflows.retry_workflow(workflow_id, resume_subworkflow_tasks=resume_subworkflow_tasks)
    again = run(http, task_type, "work", v=7)
    done = until_status(workflows, workflow_id, "COMPLETED")
    assert done.output == {"v": 7}
    if resume_subworkflow_tasks:  # the same child, retried in place
        assert again["workflowInstanceId"] == first_child
        assert until_status(workflows, first_child, "COMPLETED").tasks[-1].retry_count == 1
        assert tasks_of(done) == [("sub", "COMPLETED")]
    else:  # a new attempt of the SUB_WORKFLOW task, with a new child
        assert again["workflowInstanceId"] != first_child
        assert status_of(workflows, first_child).status == "FAILED"
        assert tasks_of(done) == [("sub", "FAILED"), ("sub", "COMPLETED")]


def test_rerun_from_a_task_of_a_sub_workflow_reruns_the_child_and_the_parent(
    http: httpx.Client, workflows: OrkesWorkflowClient
) -> None:
    parent, task_type = parent_and_child(http)
    workflow_id = start(http, parent)
    child_task = run(http, task_type, "work", v=1)
    until_status(workflows, workflow_id, "COMPLETED")
    request = RerunWorkflowRequest(re_run_from_task_id=child_task["taskId"], task_input={"again": True})
    assert workflows.rerun_workflow(workflow_id, request) == workflow_id
    again = run(http, task_type, "work", v=2)
    assert again["workflowInstanceId"] == child_task["workflowInstanceId"] and again["inputData"] == {
        "again": True
    }
    done = until_status(workflows, workflow_id, "COMPLETED")
    assert done.output == {"v": 2} and tasks_of(done) == [("sub", "COMPLETED")]


def test_rerun_from_a_fork_branch_and_from_a_loop_iteration_keeps_the_earlier_outputs(
    http: httpx.Client, workflows: OrkesWorkflowClient
) -> None:
    name, task_type = three_steps(http)  # for its task type
    simple = {"name": task_type, "type": "SIMPLE"}
    definition = {
        "name": f"{name}_shapes",
        "version": 1,
        "tasks": [
            {
                "name": "fork",
                "taskReferenceName": "fork",
                "type": "FORK_JOIN",
                "forkTasks": [
                    [{**simple, "taskReferenceName": "left"}],
                    [{**simple, "taskReferenceName": "right"}],
                ],
            },
            {"name": "join", "taskReferenceName": "join", "type": "JOIN", "joinOn": ["left", "right"]},
            {
                "name": "loop",
                "taskReferenceName": "loop",
                "type": "DO_WHILE",
                "loopCondition": "$.loop['iteration'] < 3",
                "loopOver": [{**simple, "taskReferenceName": "body"}],
            },
        ],
        "outputParameters": {"join": "${join.output}", "loop": "${loop.output}"},
    }
    http.post("/api/metadata/workflow", json=definition).raise_for_status()
    workflow_id = start(http, definition["name"])
    by_ref: dict[str, dict[str, Any]] = {}
    for _ in range(5):  # left and right in either order, then body__1..3
        task = poll(http, task_type)
        by_ref[task["referenceTaskName"]] = task
        report(http, task, v=task["referenceTaskName"])
    assert sorted(by_ref) == ["body__1", "body__2", "body__3", "left", "right"]
    first = until_status(workflows, workflow_id, "COMPLETED")
    assert first.output["join"] == {"left": {"v": "left"}, "right": {"v": "right"}}

    # a loop iteration: iterations before it keep their outputs, the loop goes on from there
    workflows.rerun_workflow(
        workflow_id, RerunWorkflowRequest(re_run_from_task_id=by_ref["body__2"]["taskId"])
    )
    run(http, task_type, "body__2", v="again-2")
    run(http, task_type, "body__3", v="again-3")
    second = until_status(workflows, workflow_id, "COMPLETED")
    assert second.output["loop"]["1"] == {"body": {"v": "body__1"}}
    assert second.output["loop"]["2"] == {"body": {"v": "again-2"}}
    assert second.output["join"] == first.output["join"]

    # a fork branch: the other branch keeps its output, the JOIN collects again, the loop runs again
    left = next(t for t in second.tasks if t.reference_task_name == "left")
    workflows.rerun_workflow(workflow_id, RerunWorkflowRequest(re_run_from_task_id=left.task_id))
    run(http, task_type, "left", v="left-again")
    for i in (1, 2, 3):
        run(http, task_type, f"body__{i}", v=f"third-{i}")
    third = until_status(workflows, workflow_id, "COMPLETED")
    assert third.output["join"] == {"left": {"v": "left-again"}, "right": {"v": "right"}}
    assert [t.reference_task_name for t in third.tasks if t.reference_task_name == "right"] == ["right"]
