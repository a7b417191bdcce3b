"""Run the selected cases on both servers at once and keep each one's final execution.

Every (case, server) pair runs on its own thread: register the case's definitions, start the
main workflow, then poll `GET /api/workflow/{id}?includeTasks=true` until the status is terminal
or the case's deadline passes (then the last answer is kept, so a workflow that never ends shows
up as a status difference instead of hanging the suite). A HUMAN task in progress is completed
with `POST /api/tasks`, the way an application would. One polling worker per server serves the
SIMPLE task types meanwhile. Conductor's run of a case is made again when it shows a lost update
(`lost_update`), a race of Conductor's own.
"""

from __future__ import annotations

import os
import time
import traceback
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from tests.conformance.cases import Case, build_cases, task_defs
from tests.conformance.client import TERMINAL, ConductorRest
from tests.conformance.worker import PollingWorker

POLL_INTERVAL_S = 0.2
SETTLE_S = 0.5
REFERENCE = "conductor"
REFERENCE_RERUNS = 2


def plain_kafka_bootstrap() -> str | None:
    """The Kafka of this test run (CAIRN_KAFKA_BOOTSTRAP) when Conductor can use it for its event
    queues: the plain listener only (scripts/test.sh makes the same choice)."""
    bootstrap = os.environ.get("CAIRN_KAFKA_BOOTSTRAP")
    if bootstrap and os.environ.get("CAIRN_KAFKA_SECURITY_PROTOCOL", "PLAINTEXT").upper() == "PLAINTEXT":
        return bootstrap
    return None


@dataclass
class Outcome:
    """One case on one server: the last execution read, or why there is none."""

    server: str
    execution: dict[str, Any] | None = None
    error: str | None = None
    seconds: float = 0.0
    reruns: int = 0
    """how often the reference server's run was made again (lost_update)"""
    missed_child_end: bool = False
    """past its deadline, still waiting in a SUB_WORKFLOW task for a child that had ended"""


def run_case(rest: ConductorRest, case: Case) -> Outcome:
    t0 = time.monotonic()
    try:
        rest.register_workflows(list(reversed(case.workflows)))  # children first
        workflow_id = rest.start(case.main["name"], case.main["version"], case.input, case.idempotency_key)
        completed_human: set[str] = set()
        deadline = t0 + case.within_s
        steps = list(case.steps)
        answers: dict[str, Any] = {}
        while True:
            execution = rest.get(workflow_id)
            if steps and steps[0].ready(execution):
                steps.pop(0).act(rest, workflow_id, execution, answers)
                continue
            if steps:
                if time.monotonic() > deadline:
                    answers["not reached"] = steps[0].name
                    return Outcome(
                        rest.name, {**execution, "answers": answers}, seconds=time.monotonic() - t0
                    )
                time.sleep(POLL_INTERVAL_S)
                continue
            if execution.get("status") in TERMINAL:
                # Read once more, a moment later: a task still being updated (a JOIN the
                # system-task worker evaluates) settles first.
                time.sleep(SETTLE_S)
                final = rest.get(workflow_id)
                if case.steps:
                    final["answers"] = answers
                return Outcome(rest.name, final, seconds=time.monotonic() - t0)
            if time.monotonic() > deadline:
                return Outcome(
                    rest.name,
                    {**execution, "answers": answers},
                    seconds=time.monotonic() - t0,
                    missed_child_end=waits_for_an_ended_child(rest, execution),
                )
            if case.human_output is not None:
                for task in execution.get("tasks") or []:
                    if (
                        task.get("taskType") == "HUMAN"
                        and task.get("status") == "IN_PROGRESS"
                        and task["taskId"] not in completed_human
                    ):
                        rest.update_task(
                            {
                                "workflowInstanceId": workflow_id,
                                "taskId": task["taskId"],
                                "status": "COMPLETED",
                                "outputData": case.human_output,
                            }
                        )
                        completed_human.add(task["taskId"])
            time.sleep(POLL_INTERVAL_S)
    except Exception:
        return Outcome(rest.name, error=traceback.format_exc(limit=3), seconds=time.monotonic() - t0)
    finally:
        rest.close()


def waits_for_an_ended_child(rest: ConductorRest, execution: dict[str, Any]) -> bool:
    """A running workflow whose SUB_WORKFLOW task is still IN_PROGRESS although its child ended:
    the parent missed its child's end (seen once in CI, op_retry_subworkflow_resume on Conductor:
    the parent RUNNING 60 s after a retry whose child had been run again; every other run of it
    took about 4 s)."""
    if execution.get("status") != "RUNNING":
        return False
    for task in execution.get("tasks") or []:
        child_id = task.get("subWorkflowId")
        if task.get("taskType") == "SUB_WORKFLOW" and task.get("status") == "IN_PROGRESS" and child_id:
            if rest.get(child_id).get("status") in TERMINAL:
                return True
    return False


def lost_update(outcome: Outcome) -> bool:
    """A parent that missed its child's end (`waits_for_an_ended_child`); a COMPLETED workflow
    with a task CANCELED or still running, or an ended one with a task still running or a
    cancelled JOIN that had collected output: Conductor 3.32.3's races between an async JOIN and
    a decide. The first is the decide its sub-workflow's end triggers. About
    one run in thirty of nested_loop_fork_sub_joined on a freshly booted server ends COMPLETED
    with the loop's last JOIN still IN_PROGRESS, which the system-task worker then CANCELS (the
    workflow has ended).
    No case here ends like that on purpose."""
    if outcome.missed_child_end:
        return True
    execution = outcome.execution or {}
    tasks = execution.get("tasks") or []
    if missed_its_last_decide(execution):
        return True
    if execution.get("status") == "COMPLETED" and any(
        task.get("status") in ("CANCELED", "IN_PROGRESS", "SCHEDULED") for task in tasks
    ):
        return True
    # The other side of that race: a workflow a TERMINATE task ended while its fork's JOIN was
    # being evaluated. The JOIN is then left IN_PROGRESS although the workflow is over, or it is
    # CANCELED with the output it collected in that evaluation — each about one run in fifteen of
    # terminate_failed; usually the JOIN is cancelled before it looks at its branches. Everything
    # else of an ended workflow is cancelled.
    if join_read_an_optional_failure_early(tasks):
        return True
    if execution.get("status") not in ("FAILED", "TERMINATED", "TIMED_OUT"):
        return False
    return any(
        task.get("status") in ("IN_PROGRESS", "SCHEDULED")
        or (task.get("taskType") == "JOIN" and task.get("status") == "CANCELED" and task.get("outputData"))
        for task in tasks
    )


TASK_ENDED = frozenset(
    {
        "COMPLETED",
        "COMPLETED_WITH_ERRORS",
        "FAILED",
        "FAILED_WITH_TERMINAL_ERROR",
        "CANCELED",
        "TIMED_OUT",
        "SKIPPED",
    }
)


def missed_its_last_decide(execution: dict[str, Any]) -> bool:
    """A workflow still RUNNING past its case's deadline although every task of it has ended and
    no step of the case is left to act: nothing but a decide could move it, and Conductor lost
    the one the last task's update should have run (seen once in CI, optional_failure_last_simple
    on Conductor: the optional task FAILED, the workflow RUNNING 60 s later; every other run of
    it ended COMPLETED within a second). A DO_WHILE IN_PROGRESS is a loop waiting for its body,
    which only a decide moves on: seen once in CI, agent_loop on Conductor RUNNING with its loop
    IN_PROGRESS and the body's first task COMPLETED, nothing scheduled after it."""
    tasks = execution.get("tasks") or []
    steps = [task for task in tasks if not _loop_waiting_for_its_body(task)]
    return (
        execution.get("status") == "RUNNING"
        and "not reached" not in (execution.get("answers") or {})
        and bool(steps)
        and all(task.get("status") in TASK_ENDED for task in steps)
    )


def _loop_waiting_for_its_body(task: dict[str, Any]) -> bool:
    return task.get("taskType") == "DO_WHILE" and task.get("status") == "IN_PROGRESS"


def join_read_an_optional_failure_early(tasks: list[dict[str, Any]]) -> bool:
    """A JOIN COMPLETED over an optional task that ended COMPLETED_WITH_ERRORS: Conductor's JOIN
    (Join.java) counts an optional failure only when it sees COMPLETED_WITH_ERRORS, and the
    decide that rewrites the optional task's FAILED to that races the system-task worker
    evaluating the JOIN. When the JOIN reads FAILED first it ends COMPLETED (seen once in
    join_optional_failure, in the final CI of issue 12; every earlier run had
    COMPLETED_WITH_ERRORS, which Cairn follows)."""
    by_ref = {task.get("referenceTaskName"): task for task in tasks}
    for join in tasks:
        if join.get("taskType") != "JOIN" or join.get("status") != "COMPLETED":
            continue
        for ref in (join.get("inputData") or {}).get("joinOn") or []:
            if (by_ref.get(ref) or {}).get("status") == "COMPLETED_WITH_ERRORS":
                return True
    return False


def run_reference_case(rest: ConductorRest, case: Case) -> Outcome:
    """The reference server's run, made again (at most REFERENCE_RERUNS times) when it lost an
    update, so a Conductor race cannot pass for a Cairn difference. Cairn's runs are never
    rerun."""
    outcome = run_case(rest, case)
    reruns = 0
    while lost_update(outcome) and reruns < REFERENCE_RERUNS:
        reruns += 1
        outcome = run_case(rest, case)
    outcome.reruns = reruns
    return outcome


@dataclass
class Run:
    outcomes: dict[str, dict[str, Outcome]]
    """case name -> server name -> outcome"""
    worker_errors: dict[str, list[str]]
    """server name -> what the polling worker could not do (polls or updates that failed)"""
    prefix: str
    """the names of this run's definitions and task types start with it"""


def run_all(servers: dict[str, str], prefix: str, selected: Iterable[str], http_base: str) -> Run:
    """Run the selected cases on every server, all at once."""
    cases = build_cases(prefix, http_base)
    chosen = [cases[name] for name in selected]
    rests = {server: ConductorRest(server, url) for server, url in servers.items()}
    for rest in rests.values():
        rest.register_task_defs(task_defs(prefix))
        rest.close()
    workers = [PollingWorker(rest, prefix) for rest in rests.values()]
    for worker in workers:
        worker.start()
    outcomes: dict[str, dict[str, Outcome]] = {}
    try:
        jobs = [(case, server) for case in chosen for server in rests]
        with ThreadPoolExecutor(max_workers=min(max(len(jobs), 1), 32), thread_name_prefix="case") as pool:
            futures = {
                (case.name, server): pool.submit(
                    run_reference_case if server == REFERENCE else run_case, rests[server], case
                )
                for case, server in jobs
            }
            for (name, server), future in futures.items():
                outcomes.setdefault(name, {})[server] = future.result()
    finally:
        for worker in workers:
            worker.stop()
    return Run(outcomes, {worker.rest.name: list(worker.errors) for worker in workers}, prefix)
