"""Conductor's official Python client (conductor-python), unchanged, against a Cairn server.

The client's metadata and workflow clients register definitions and start workflows, and its
TaskHandler runs the workers, one spawned process per task type, as in any Conductor deployment.
See docs/research/conductor-python-client.md for the HTTP calls this drives and the response
shapes the server must return.

The `cairn_server_url` fixture (e.g. "http://127.0.0.1:8123", no trailing "/api") comes from a
conftest.
"""

# No `from __future__ import annotations` here: the client inspects the worker functions'
# annotations at run time (a parameter annotated with the Task class gets the whole polled Task;
# other parameters are filled from the task's inputData by name), and string annotations defeat that.
import multiprocessing
import time
import uuid
from typing import Any

import pytest
from conductor.client.automator.task_handler import TaskHandler
from conductor.client.configuration.configuration import Configuration
from conductor.client.http.models import (
    StartWorkflowRequest,
    Task,
    TaskDef,
    Workflow,
    WorkflowDef,
    WorkflowTask,
)
from conductor.client.orkes.orkes_metadata_client import OrkesMetadataClient
from conductor.client.orkes.orkes_workflow_client import OrkesWorkflowClient
from conductor.client.worker.worker import Worker

pytestmark = pytest.mark.integration

WAIT_SECONDS = 60.0
INPUTS = [3, 7, 11]  # one workflow per value of n


# The workers run in processes started with multiprocessing's "spawn" method (the client sets it
# when it is imported), so their functions must be importable module-level functions: the child
# process re-imports this module by name and looks them up.
def double(task: Task) -> dict[str, Any]:
    """Takes the whole polled Task, so it can also report which workflow the task came from."""
    return {"value": task.input_data["n"] * 2, "workflowId": task.workflow_instance_id}


def add_ten(x: int) -> dict[str, Any]:
    """Takes its input by name, as @worker_task-style functions do."""
    return {"value": x + 10}


def describe(x: int, label: str) -> dict[str, Any]:
    return {"summary": f"{label}:{x}"}


def expected_output(n: int) -> dict[str, Any]:
    return {"doubled": 2 * n, "plusTen": 2 * n + 10, "summary": f"wf-{n}:{2 * n + 10}"}


def client_configuration(cairn_server_url: str) -> Configuration:
    configuration = Configuration(server_api_url=cairn_server_url.rstrip("/") + "/api")
    # No auth: never pick up CONDUCTOR_AUTH_KEY/SECRET from the environment (that would make every
    # client call POST /api/token first).
    configuration.authentication_settings = None
    return configuration


def task_def(name: str) -> TaskDef:
    # Timeouts stay at Conductor's defaults (Cairn refuses the ones it does not implement yet);
    # no retries, so a failing worker fails the workflow at once instead of after a retry delay.
    return TaskDef(
        name=name,
        description="cairn conductor-python client test",
        owner_email="tests@cairn.invalid",
        retry_count=0,
    )


def workflow_def(name: str, t1: str, t2: str, t3: str) -> WorkflowDef:
    return WorkflowDef(
        name=name,
        version=1,
        description="three SIMPLE tasks, each fed by the one before",
        owner_email="tests@cairn.invalid",
        schema_version=2,
        tasks=[
            WorkflowTask(
                name=t1,
                task_reference_name="t1",
                type="SIMPLE",
                input_parameters={"n": "${workflow.input.n}"},
            ),
            WorkflowTask(
                name=t2, task_reference_name="t2", type="SIMPLE", input_parameters={"x": "${t1.output.value}"}
            ),
            WorkflowTask(
                name=t3,
                task_reference_name="t3",
                type="SIMPLE",
                input_parameters={"x": "${t2.output.value}", "label": "${workflow.input.label}"},
            ),
        ],
        output_parameters={
            "doubled": "${t1.output.value}",
            "plusTen": "${t2.output.value}",
            "summary": "${t3.output.summary}",
        },
    )


def stop(handler: TaskHandler) -> None:
    """Stop the worker and log-relay processes and reap them, so none outlive the test."""
    handler.stop_processes()
    handler.logger_process.join(timeout=5)
    for process in [*handler.task_runner_processes, handler.logger_process]:
        if process.is_alive():
            process.kill()
            process.join(timeout=5)
    multiprocessing.active_children()  # reaps anything already finished


def wait_until_finished(client: OrkesWorkflowClient, workflow_ids: list[str]) -> dict[str, Workflow]:
    deadline = time.monotonic() + WAIT_SECONDS
    latest: dict[str, Workflow] = {}
    while True:
        for workflow_id in workflow_ids:
            workflow = client.get_workflow(workflow_id, include_tasks=True)
            assert workflow is not None, f"GET /api/workflow/{workflow_id} did not parse as a Workflow"
            latest[workflow_id] = workflow
            assert workflow.status in ("RUNNING", "COMPLETED"), (
                f"workflow {workflow_id} is {workflow.status}: {workflow.reason_for_incompletion}"
            )
        if all(w.status == "COMPLETED" for w in latest.values()):
            return latest
        if time.monotonic() > deadline:
            states = {
                wid: (w.status, [(t.reference_task_name, t.status) for t in w.tasks or []])
                for wid, w in latest.items()
            }
            pytest.fail(f"workflows not COMPLETED within {WAIT_SECONDS:.0f} s: {states}")
        time.sleep(0.25)


def test_official_client_runs_three_task_workflows(cairn_server_url: str) -> None:
    suffix = uuid.uuid4().hex[:10]
    t1, t2, t3 = f"cc_double_{suffix}", f"cc_add_ten_{suffix}", f"cc_describe_{suffix}"
    workflow_name = f"cc_pipeline_{suffix}"
    configuration = client_configuration(cairn_server_url)
    metadata = OrkesMetadataClient(configuration)
    workflows = OrkesWorkflowClient(configuration)

    for name in (t1, t2, t3):
        metadata.register_task_def(task_def(name))
    metadata.register_workflow_def(workflow_def(workflow_name, t1, t2, t3), overwrite=True)
    assert metadata.get_task_def(t2).name == t2
    registered = metadata.get_workflow_def(workflow_name)
    assert registered.name == workflow_name
    assert [t.task_reference_name for t in registered.tasks] == ["t1", "t2", "t3"]

    # Both start endpoints: POST /api/workflow/{name} and POST /api/workflow (StartWorkflowRequest).
    workflow_ids = [
        workflows.start_workflow_by_name(workflow_name, {"n": INPUTS[0], "label": f"wf-{INPUTS[0]}"}),
        workflows.start_workflow_by_name(
            workflow_name, {"n": INPUTS[1], "label": f"wf-{INPUTS[1]}"}, version=1, correlationId=suffix
        ),
        workflows.start_workflow(
            StartWorkflowRequest(
                name=workflow_name, version=1, input={"n": INPUTS[2], "label": f"wf-{INPUTS[2]}"}
            )
        ),
    ]
    assert all(isinstance(w, str) and w for w in workflow_ids), workflow_ids
    assert len(set(workflow_ids)) == 3

    workers = [
        Worker(
            task_definition_name=name, execute_function=function, poll_interval=100, worker_id=f"cc-{suffix}"
        )
        for name, function in ((t1, double), (t2, add_ten), (t3, describe))
    ]
    handler: TaskHandler | None = None
    try:
        # The constructor already starts the client's log-relay process, so it belongs in the try.
        handler = TaskHandler(
            workers=workers,
            configuration=configuration,
            scan_for_annotated_workers=False,  # just these, not @worker_task functions imported elsewhere
            monitor_processes=False,
        )
        handler.start_processes()
        finished = wait_until_finished(workflows, workflow_ids)
    finally:
        if handler is not None:
            stop(handler)
    assert not any(p.is_alive() for p in [*handler.task_runner_processes, handler.logger_process])

    for workflow_id, n in zip(workflow_ids, INPUTS, strict=True):
        workflow = finished[workflow_id]
        assert workflow.workflow_id == workflow_id
        assert workflow.output == expected_output(n)
        assert [(t.reference_task_name, t.task_def_name, t.status) for t in workflow.tasks] == [
            ("t1", t1, "COMPLETED"),
            ("t2", t2, "COMPLETED"),
            ("t3", t3, "COMPLETED"),
        ]
        assert [t.output_data for t in workflow.tasks] == [
            {"value": 2 * n, "workflowId": workflow_id},
            {"value": 2 * n + 10},
            {"summary": f"wf-{n}:{2 * n + 10}"},
        ]
        assert workflow.tasks[0].input_data["n"] == n
        assert workflow.tasks[1].input_data["x"] == 2 * n
        assert (workflow.tasks[2].input_data["x"], workflow.tasks[2].input_data["label"]) == (
            2 * n + 10,
            f"wf-{n}",
        )
