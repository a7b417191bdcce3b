"""`cairn pause|resume|restart|rerun|retry|skip|remove|terminate|signal`: acting on one
execution (docs/operations.md). Each prints what became of the workflow; `--json` prints
`{"workflowId", "operation", "status"}` for scripts."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from cairn.backends import Backend
from cairn.cli_common import JsonOption, ServerOption, console, fail, json_arg, styled, with_backend
from cairn.operations import Operation
from shared.models.runtime import TaskStatus

Id = Annotated[str, typer.Argument(help="The workflow's id.")]


def _done(workflow_id: str, operation: str, status: str | None, as_json: bool, what: str) -> None:
    if as_json:
        print(json.dumps({"workflowId": workflow_id, "operation": operation, "status": status}))
    else:
        console.print(f"{what} [cyan]{workflow_id}[/]" + (f": {styled(status)}" if status else ""))


def _operate(server: str | None, operation: Operation, as_json: bool, what: str) -> None:
    async def act(backend: Backend) -> str | None:
        await backend.operate(operation)
        workflow = await backend.workflow(operation.workflow_id, include_tasks=False)
        return workflow["status"] if workflow else None

    status = with_backend(server, act)
    _done(operation.workflow_id, operation.kind, status, as_json, what)


def pause(workflow_id: Id, as_json: JsonOption = False, server: ServerOption = None) -> None:
    """Pause a running workflow: nothing new is scheduled until `cairn resume`."""
    _operate(server, Operation("pause", workflow_id), as_json, "paused")


def resume(workflow_id: Id, as_json: JsonOption = False, server: ServerOption = None) -> None:
    """Resume a paused workflow where it stopped."""
    _operate(server, Operation("resume", workflow_id), as_json, "resumed")


def restart(
    workflow_id: Id,
    latest: Annotated[
        bool, typer.Option("--latest", help="Run the latest definition (and task definitions) instead.")
    ] = False,
    as_json: JsonOption = False,
    server: ServerOption = None,
) -> None:
    """Run a finished workflow again from the start, under the same id."""
    _operate(server, Operation("restart", workflow_id, use_latest_definitions=latest), as_json, "restarted")


def rerun(
    workflow_id: Id,
    from_task: Annotated[
        str | None, typer.Option("--from-task", help="Task id to run again from (default: the start).")
    ] = None,
    task_input: Annotated[str | None, typer.Option("--task-input", help="That task's input, JSON.")] = None,
    workflow_input: Annotated[str | None, typer.Option("--input", help="New workflow input, JSON.")] = None,
    correlation_id: Annotated[str | None, typer.Option("--correlation-id")] = None,
    as_json: JsonOption = False,
    server: ServerOption = None,
) -> None:
    """Run a finished workflow again from one task, keeping what ran before it."""
    operation = Operation(
        "rerun",
        workflow_id,
        task_id=from_task,
        task_input=json_arg(task_input, "--task-input") if task_input is not None else None,
        workflow_input=json_arg(workflow_input, "--input") if workflow_input is not None else None,
        correlation_id=correlation_id,
    )
    _operate(server, operation, as_json, "rerunning")


def retry(
    workflow_id: Id,
    resume_subworkflows: Annotated[
        bool,
        typer.Option(
            "--resume-subworkflows", help="Retry a failed sub-workflow instead of starting a new one."
        ),
    ] = False,
    as_json: JsonOption = False,
    server: ServerOption = None,
) -> None:
    """Run the failed tasks of a finished workflow again, in place, and go on."""
    operation = Operation("retry", workflow_id, resume_subworkflow_tasks=resume_subworkflows)
    _operate(server, operation, as_json, "retrying")


def skip(
    workflow_id: Id,
    task_ref: Annotated[str, typer.Argument(help="The task's reference name.")],
    output: Annotated[str, typer.Option("--output", "-o", help="The task's output, JSON.")] = "{}",
    task_input: Annotated[str, typer.Option("--input", help="Input to record on it, JSON.")] = "{}",
    as_json: JsonOption = False,
    server: ServerOption = None,
) -> None:
    """Skip a task not yet run, or running: it ends SKIPPED with the given output."""
    operation = Operation(
        "skip",
        workflow_id,
        task_ref=task_ref,
        task_output=json_arg(output, "--output"),
        task_input=json_arg(task_input, "--input"),
    )
    _operate(server, operation, as_json, f"skipped {task_ref} of")


def remove(workflow_id: Id, as_json: JsonOption = False, server: ServerOption = None) -> None:
    """Delete a finished workflow and its task history."""
    with_backend(server, lambda backend: backend.remove(workflow_id))
    _done(workflow_id, "remove", None, as_json, "removed")


def terminate(
    workflow_id: Id,
    reason: Annotated[str | None, typer.Option()] = None,
    trigger_failure_workflow: Annotated[
        bool, typer.Option("--trigger-failure-workflow", help="Start the definition's failureWorkflow.")
    ] = False,
    as_json: JsonOption = False,
    server: ServerOption = None,
) -> None:
    """Terminate a running (or paused) workflow."""
    with_backend(server, lambda backend: backend.terminate(workflow_id, reason, trigger_failure_workflow))
    _done(workflow_id, "terminate", None, as_json, "terminate sent for")


def signal(
    workflow_id: Id,
    task_ref: str,
    data: Annotated[str, typer.Option("--data", "-d", help="Task output as a JSON object.")] = "{}",
    status: Annotated[
        str, typer.Option(help="COMPLETED, FAILED or FAILED_WITH_TERMINAL_ERROR")
    ] = "COMPLETED",
    as_json: JsonOption = False,
    server: ServerOption = None,
) -> None:
    """Complete (or fail) a WAIT task by its reference name."""
    payload = json_arg(data, "--data")
    try:
        task_status = TaskStatus(status)
    except ValueError:
        fail(f"unknown status {status!r}", "use COMPLETED, FAILED or FAILED_WITH_TERMINAL_ERROR")
        return
    with_backend(server, lambda backend: backend.signal(workflow_id, task_ref, payload, task_status))
    if as_json:
        print(json.dumps({"workflowId": workflow_id, "operation": "signal", "taskReferenceName": task_ref}))
    else:
        console.print(f"signalled [bold]{task_ref}[/] of [cyan]{workflow_id}[/]")


COMMANDS = (pause, resume, restart, rerun, retry, skip, remove, terminate, signal)
