"""Conformance cases for the lifecycle operations and idempotent starts (docs/operations.md).

Each case starts a workflow and then runs its steps in order, each once its condition holds on
the execution (`GET /api/workflow/{id}`): pause, resume, restart, rerun, retry, skip, terminate,
or start again with an idempotency key. What a step's call answered (HTTP status, whether a
second start returned the same execution) goes into the compared result as `answers`, beside the
final execution's status, output and tasks.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tests.conformance.client import ConductorRest

Execution = dict[str, Any]
Answers = dict[str, Any]


@dataclass(frozen=True)
class Step:
    name: str
    ready: Callable[[Execution], bool]
    act: Callable[[ConductorRest, str, Execution, Answers], None]


# ---- conditions ------------------------------------------------------------------------------


def status_is(status: str) -> Callable[[Execution], bool]:
    return lambda execution: execution.get("status") == status


def task_is(ref: str, status: str) -> Callable[[Execution], bool]:
    return lambda execution: any(
        t.get("referenceTaskName") == ref and t.get("status") == status for t in execution.get("tasks") or []
    )


def task_of(execution: Execution, ref: str) -> dict[str, Any]:
    """The newest execution of `ref` (a retry's attempt after the one it retries)."""
    return [t for t in execution.get("tasks") or [] if t.get("referenceTaskName") == ref][-1]


# ---- actions ---------------------------------------------------------------------------------


def call(rest: ConductorRest, answers: Answers, label: str, method: str, path: str, **kwargs: Any) -> Any:
    """Make the call; record its HTTP status under `label` (2xx recorded as "2xx": Conductor's
    200 and 204 are told apart by no client)."""
    response = rest.http.request(method, path, **kwargs)
    answers[label] = "2xx" if response.is_success else response.status_code
    return response


def pause(rest: ConductorRest, workflow_id: str, execution: Execution, answers: Answers) -> None:
    call(rest, answers, "pause", "PUT", f"/workflow/{workflow_id}/pause")


def resume(rest: ConductorRest, workflow_id: str, execution: Execution, answers: Answers) -> None:
    call(rest, answers, "resume", "PUT", f"/workflow/{workflow_id}/resume")


def complete_while_paused(ref: str, output: dict[str, Any]) -> Callable[..., None]:
    """Complete `ref` through POST /api/tasks, then watch one second: a paused workflow records
    the result and schedules nothing after it."""

    def act(rest: ConductorRest, workflow_id: str, execution: Execution, answers: Answers) -> None:
        task = task_of(execution, ref)
        result = {
            "workflowInstanceId": workflow_id,
            "taskId": task["taskId"],
            "status": "COMPLETED",
            "outputData": output,
        }
        call(rest, answers, f"complete {ref}", "POST", "/tasks", json=result)
        time.sleep(1.0)
        after = rest.get(workflow_id)
        answers["while paused"] = {
            "status": after.get("status"),
            "tasks": [(t["referenceTaskName"], t["status"]) for t in after.get("tasks") or []],
        }

    return act


def restart(latest: bool) -> Callable[..., None]:
    def act(rest: ConductorRest, workflow_id: str, execution: Execution, answers: Answers) -> None:
        params = {"useLatestDefinitions": str(latest).lower()}
        call(rest, answers, "restart", "POST", f"/workflow/{workflow_id}/restart", params=params)

    return act


def register_then_restart(definition: dict[str, Any]) -> Callable[..., None]:
    """Replace the definition (fixing it), then restart on the latest definitions."""

    def act(rest: ConductorRest, workflow_id: str, execution: Execution, answers: Answers) -> None:
        rest.register_workflows([definition])
        restart(True)(rest, workflow_id, execution, answers)

    return act


def rerun(ref: str, task_input: dict[str, Any] | None = None) -> Callable[..., None]:
    def act(rest: ConductorRest, workflow_id: str, execution: Execution, answers: Answers) -> None:
        body: dict[str, Any] = {
            "reRunFromWorkflowId": workflow_id,
            "reRunFromTaskId": task_of(execution, ref)["taskId"],
        }
        if task_input is not None:
            body["taskInput"] = task_input
        answer = call(rest, answers, "rerun", "POST", f"/workflow/{workflow_id}/rerun", json=body)
        answers["rerun returns the id"] = answer.text.strip().strip('"') == workflow_id

    return act


def retry(resume_subworkflow_tasks: bool = False) -> Callable[..., None]:
    def act(rest: ConductorRest, workflow_id: str, execution: Execution, answers: Answers) -> None:
        params = {"resumeSubworkflowTasks": str(resume_subworkflow_tasks).lower()}
        call(rest, answers, "retry", "POST", f"/workflow/{workflow_id}/retry", params=params)

    return act


def skip(ref: str) -> Callable[..., None]:
    """Skip `ref`, not yet scheduled (the only skip Conductor accepts), with an empty request."""

    def act(rest: ConductorRest, workflow_id: str, execution: Execution, answers: Answers) -> None:
        call(rest, answers, f"skip {ref}", "PUT", f"/workflow/{workflow_id}/skiptask/{ref}", json={})

    return act


def complete(ref: str, output: dict[str, Any]) -> Callable[..., None]:
    def act(rest: ConductorRest, workflow_id: str, execution: Execution, answers: Answers) -> None:
        task = task_of(execution, ref)
        result = {
            "workflowInstanceId": workflow_id,
            "taskId": task["taskId"],
            "status": "COMPLETED",
            "outputData": output,
        }
        call(rest, answers, f"complete {ref}", "POST", "/tasks", json=result)

    return act


def terminate(trigger_failure_workflow: bool) -> Callable[..., None]:
    def act(rest: ConductorRest, workflow_id: str, execution: Execution, answers: Answers) -> None:
        params = {
            "reason": "by the operator",
            "triggerFailureWorkflow": str(trigger_failure_workflow).lower(),
        }
        call(rest, answers, "terminate", "DELETE", f"/workflow/{workflow_id}", params=params)

    return act


def start_again(strategy: str, key: str) -> Callable[..., None]:
    """Start the same workflow again with the first start's idempotency key."""

    def act(rest: ConductorRest, workflow_id: str, execution: Execution, answers: Answers) -> None:
        request = {
            "name": execution["workflowName"],
            "version": execution["workflowVersion"],
            "input": execution.get("input") or {},
            "idempotencyKey": key,
            "idempotencyStrategy": strategy,
        }
        answer = call(rest, answers, f"start again ({strategy})", "POST", "/workflow", json=request)
        answers["same execution"] = answer.is_success and answer.text.strip().strip('"') == workflow_id

    return act


# ---- the cases -------------------------------------------------------------------------------


def build_operation_cases(prefix: str, case_type: type) -> list[Any]:
    """The cases, as `case_type` (cases.Case) instances with their steps."""

    def name(short: str) -> str:
        return f"{prefix}{short}"

    def wf(
        short: str, tasks: list[dict[str, Any]], out: dict[str, Any] | None = None, **extra: Any
    ) -> dict[str, Any]:
        return {
            "name": name(short),
            "version": 1,
            "schemaVersion": 2,
            "ownerEmail": "conformance@example.com",
            "timeoutSeconds": 0,
            "tasks": tasks,
            "outputParameters": out or {},
            **extra,
        }

    def simple(ref: str, kind: str = "echo", **inputs: Any) -> dict[str, Any]:
        return {"name": name(kind), "taskReferenceName": ref, "type": "SIMPLE", "inputParameters": inputs}

    def wait(ref: str) -> dict[str, Any]:
        return {"name": ref, "taskReferenceName": ref, "type": "WAIT"}

    def case(short: str, workflows: list[dict[str, Any]], *steps: Step, **extra: Any) -> Any:
        return case_type(short, workflows, steps=tuple(steps), **extra)

    fixed = wf(
        "op_restart_latest",
        [simple("first", x=1), simple("second", x=2)],
        {"second": "${second.output.echo}"},
    )
    broken = wf(
        "op_restart_latest",
        [simple("first", x=1), simple("broken", "fail")],
        {"second": "${second.output.echo}"},
    )
    fork = {
        "name": "fork",
        "taskReferenceName": "fork",
        "type": "FORK_JOIN",
        "forkTasks": [[simple("a1", x=1), simple("a2", x="${a1.output.doubled}")], [simple("b", x=10)]],
    }
    loop = {
        "name": "loop",
        "taskReferenceName": "loop",
        "type": "DO_WHILE",
        "loopCondition": "if ($.loop['iteration'] < 3) { true; } else { false; }",
        "loopOver": [simple("body", x="${loop.output.iteration}")],
    }
    child = wf("op_child", [simple("work", "once", x=7)], {"work": "${work.output.echo}"})
    parent = wf(
        "op_parent",
        [
            {
                "name": "sub",
                "taskReferenceName": "sub",
                "type": "SUB_WORKFLOW",
                "subWorkflowParam": {"name": name("op_child"), "version": 1},
            }
        ],
        {"work": "${sub.output.work}"},
    )
    cleanup = wf("op_cleanup", [simple("clean", x=1)])
    keyed = [wf("op_keyed", [wait("hold")])]
    return [
        case(
            "op_pause_resume",
            [
                wf(
                    "op_pause_resume",
                    [wait("hold"), simple("after", x="${hold.output.v}")],
                    {"after": "${after.output.echo}"},
                )
            ],
            Step("pause", task_is("hold", "IN_PROGRESS"), pause),
            Step("complete hold", status_is("PAUSED"), complete_while_paused("hold", {"v": 5})),
            Step("resume", status_is("PAUSED"), resume),
        ),
        case(
            "op_restart_latest",
            [broken],
            Step("fix, restart", status_is("FAILED"), register_then_restart(fixed)),
        ),
        case(
            "op_restart",
            [wf("op_restart", [simple("only", x=3)], {"only": "${only.output.doubled}"})],
            Step("restart", status_is("COMPLETED"), restart(False)),
        ),
        case(
            "op_rerun_fork_branch",
            [
                wf(
                    "op_rerun_fork_branch",
                    [
                        fork,
                        {"name": "join", "taskReferenceName": "join", "type": "JOIN", "joinOn": ["a2", "b"]},
                    ],
                )
            ],
            Step("rerun a2", status_is("COMPLETED"), rerun("a2", {"x": 100})),
        ),
        case(
            "op_rerun_loop_iteration",
            [wf("op_rerun_loop_iteration", [loop, simple("after", x=9)], {"loop": "${loop.output}"})],
            Step("rerun body__2", status_is("COMPLETED"), rerun("body__2")),
        ),
        case(
            "op_retry",
            [
                wf(
                    "op_retry",
                    [simple("a", x=1), simple("b", "once", x=2), simple("c", x=3)],
                    {"c": "${c.output.echo}"},
                )
            ],
            Step("retry", status_is("FAILED"), retry()),
        ),
        case("op_retry_subworkflow", [parent, child], Step("retry", status_is("FAILED"), retry(False))),
        case("op_retry_subworkflow_resume", [parent, child], Step("retry", status_is("FAILED"), retry(True))),
        case(
            "op_skip",
            [
                wf(
                    "op_skip",
                    [wait("hold"), simple("skipped", x=1), simple("after", x=2)],
                    {"skipped": "${skipped.output}"},
                )
            ],
            Step("skip", task_is("hold", "IN_PROGRESS"), skip("skipped")),
            Step("complete hold", task_is("hold", "IN_PROGRESS"), complete("hold", {"ok": True})),
        ),
        case(
            "op_terminate_trigger_failure",
            [wf("op_terminate_trigger_failure", [wait("hold")], failureWorkflow=name("op_cleanup")), cleanup],
            Step("terminate", task_is("hold", "IN_PROGRESS"), terminate(True)),
        ),
        *(
            case(
                f"op_idempotent_{strategy.lower()}",
                keyed,
                Step(
                    "start again",
                    task_is("hold", "IN_PROGRESS"),
                    start_again(strategy, name(f"key_{strategy}")),
                ),
                Step("complete hold", task_is("hold", "IN_PROGRESS"), complete("hold", {})),
                idempotency_key=name(f"key_{strategy}"),
            )
            for strategy in ("FAIL", "RETURN_EXISTING", "FAIL_ON_RUNNING")
        ),
    ]
