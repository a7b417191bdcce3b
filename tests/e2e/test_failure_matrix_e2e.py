"""Conductor's failure matrix, one test per row, against real processes killed and stopped with
real signals (issue 4, point 8). Each row runs on Cairn's services on Kafka + MongoDB and, where
one process makes sense, on `cairn dev`. docs/semantics.md maps every row to its test here.
"""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import AsyncIterator
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.cluster import assert_stopped_cleanly
from tests.e2e.matrix import DevPlatform, KafkaMongoPlatform, Platform, executions

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

RESPONSE_TIMEOUT_S = 3


@pytest.fixture(params=["kafka_mongo", "dev"])
async def platform(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Platform]:
    if request.param == "kafka_mongo":
        kafka, mongo, unique = (
            request.getfixturevalue(n) for n in ("kafka_bootstrap", "mongo_url", "unique")
        )
        chosen: Platform = KafkaMongoPlatform(kafka, mongo, unique, tmp_path)
    else:
        chosen = DevPlatform(tmp_path)
    await chosen.start()
    yield chosen
    assert_stopped_cleanly(await chosen.close(), chosen.diagnostics)


@pytest.fixture
async def services(
    kafka_bootstrap: str, mongo_url: str, unique: str, tmp_path: Path
) -> AsyncIterator[KafkaMongoPlatform]:
    """The rows about one service among several: Kafka + MongoDB only."""
    chosen = KafkaMongoPlatform(kafka_bootstrap, mongo_url, unique, tmp_path)
    await chosen.start()
    yield chosen
    assert_stopped_cleanly(await chosen.close(), chosen.diagnostics)


def one_task_workflow(name: str, task: str, inputs: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "tasks": [{"name": task, "taskReferenceName": "step", "inputParameters": inputs}],
        "outputParameters": {"result": "${step.output}"},
        **extra,
    }


def task_def(name: str, **settings: Any) -> dict[str, Any]:
    return {
        "name": name,
        "retryCount": 2,
        "retryDelaySeconds": 0,
        "responseTimeoutSeconds": RESPONSE_TIMEOUT_S,
        "timeoutSeconds": 60,
        **settings,
    }


async def until(condition: Any, within_s: float, what: str, platform: Platform) -> None:
    for _ in range(int(within_s * 10)):
        if condition():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{what} did not happen in {within_s}s\n{platform.diagnostics()}")


async def test_worker_dies_before_doing_anything(platform: Platform, tmp_path: Path) -> None:
    """Row 1: response timeout → the task is SCHEDULED again as a new execution → another worker
    completes it."""
    marker = tmp_path / "taken"
    await platform.api.register(
        task_def("matrix_die_first"),
        one_task_workflow("matrix_die_first_flow", "matrix_die_first", {"marker": str(marker)}),
    )
    workflow_id = await platform.api.start("matrix_die_first_flow", {})
    first = platform.http_worker()
    await until(
        lambda: marker.exists() and not first.alive(), 30, "the first worker taking the task", platform
    )
    second = platform.http_worker()
    done = await platform.api.wait(workflow_id)
    assert done["status"] == "COMPLETED", done
    attempts = executions(done, "step")
    assert [(t["status"], t["retryCount"]) for t in attempts] == [("TIMED_OUT", 0), ("COMPLETED", 1)]
    assert "responseTimeoutSeconds" in attempts[0]["reasonForIncompletion"]
    assert attempts[1]["retriedTaskId"] == attempts[0]["taskId"]
    assert done["output"]["result"]["done_by"] == second.popen.pid  # type: ignore[union-attr]


async def test_worker_dies_after_its_side_effect_before_reporting(platform: Platform, tmp_path: Path) -> None:
    """Row 2: the task runs again; the step's id and the attempt let the worker see it already
    did the side effect, so it is done once."""
    ledger = tmp_path / "ledger.jsonl"
    await platform.api.register(
        task_def("matrix_side_effect"),
        one_task_workflow("matrix_side_effect_flow", "matrix_side_effect", {"ledger": str(ledger)}),
    )
    workflow_id = await platform.api.start("matrix_side_effect_flow", {})
    first = platform.http_worker()
    await until(lambda: ledger.exists() and not first.alive(), 30, "the side effect and the death", platform)
    platform.http_worker()
    done = await platform.api.wait(workflow_id)
    assert done["status"] == "COMPLETED", done
    entries = [json.loads(line) for line in ledger.read_text().splitlines()]
    assert [e["charged"] for e in entries] == [True, False], "charged once, re-run detected"
    attempts = executions(done, "step")
    assert [(t["status"], t["taskId"], t["retryCount"]) for t in attempts] == [
        ("TIMED_OUT", entries[0]["task_id"], 0),
        ("COMPLETED", entries[1]["task_id"], 1),
    ]
    result = done["output"]["result"]
    assert result["redelivery_detected"] is True and result["charges"] == 1
    assert result["runs"] == [[entries[0]["task_id"], 0], [entries[1]["task_id"], 1]]


async def test_worker_reports_failed_retried_with_backoff_then_failure_workflow(platform: Platform) -> None:
    """Row 3: retried per retryCount / retryLogic / retryDelaySeconds, then FAILED, and the
    failureWorkflow takes over with the failed execution's details."""
    await platform.api.register(
        task_def("matrix_always_fail", retryCount=2, retryLogic="EXPONENTIAL_BACKOFF", retryDelaySeconds=1),
        task_def("matrix_echo", retryCount=0),
        one_task_workflow("matrix_on_failure", "matrix_echo", {"failed": "${workflow.input}"}),
        one_task_workflow(
            "matrix_failing_flow", "matrix_always_fail", {"card": "4242"}, failureWorkflow="matrix_on_failure"
        ),
    )
    workflow_id = await platform.api.start("matrix_failing_flow", {"order": 7})
    platform.http_worker()
    failed = await platform.api.wait(workflow_id)
    assert failed["status"] == "FAILED", failed
    attempts = executions(failed, "step")
    assert [(t["status"], t["retryCount"]) for t in attempts] == [("FAILED", 0), ("FAILED", 1), ("FAILED", 2)]
    assert all("card declined" in t["reasonForIncompletion"] for t in attempts)
    gaps = [later["scheduledTime"] - earlier["endTime"] for earlier, later in pairwise(attempts)]
    # EXPONENTIAL_BACKOFF from 1 s: 1 s, then 2 s (the retry is created at the failure; it is
    # handed out when its timer fires, so the gap shows on the next attempt's startTime).
    starts = [later["startTime"] - earlier["endTime"] for earlier, later in pairwise(attempts)]
    assert gaps == [0, 0] and starts[0] >= 1000 and starts[1] >= 2000, (gaps, starts)
    handler_id = failed["output"]["conductor.failure_workflow"]
    handler = await platform.api.wait(handler_id)
    assert handler["status"] == "COMPLETED", handler
    details = handler["output"]["result"]["failed"]
    assert details["workflowId"] == workflow_id and details["failureStatus"] == "FAILED"
    assert details["failureTaskId"] == attempts[-1]["taskId"]
    assert details["failedReferenceTaskName"] == "step" and details["input"] == {"order": 7}
    assert "card declined (attempt 2)" in details["reason"]


async def test_worker_reports_terminal_error_no_retry_failure_workflow(platform: Platform) -> None:
    """Row 4: FAILED_WITH_TERMINAL_ERROR is not retried whatever retryCount says; the workflow
    fails and its failureWorkflow starts."""
    await platform.api.register(
        task_def("matrix_terminal", retryCount=3),
        task_def("matrix_echo", retryCount=0),
        one_task_workflow("matrix_on_failure", "matrix_echo", {"failed": "${workflow.input}"}),
        one_task_workflow("matrix_terminal_flow", "matrix_terminal", {}, failureWorkflow="matrix_on_failure"),
    )
    workflow_id = await platform.api.start("matrix_terminal_flow", {})
    platform.http_worker()
    failed = await platform.api.wait(workflow_id)
    assert failed["status"] == "FAILED", failed
    [attempt] = executions(failed, "step")
    assert attempt["status"] == "FAILED_WITH_TERMINAL_ERROR"
    handler = await platform.api.wait(failed["output"]["conductor.failure_workflow"])
    assert handler["status"] == "COMPLETED"
    assert handler["output"]["result"]["failed"]["failureTaskId"] == attempt["taskId"]


WAIT_SECONDS = 60


async def test_wait_of_a_minute_across_a_full_restart_of_every_process(platform: Platform) -> None:
    """Row 8: a timed WAIT outlives every process (engine and workers SIGKILLed, down for a
    while, restarted); its timer fires after the restart and the workflow completes."""
    await platform.api.register(
        task_def("matrix_echo", retryCount=0),
        {
            "name": "matrix_timed_wait",
            "tasks": [
                {
                    "name": "pause",
                    "taskReferenceName": "pause",
                    "type": "WAIT",
                    "inputParameters": {"duration": f"{WAIT_SECONDS}s"},
                },
                {"name": "matrix_echo", "taskReferenceName": "step", "inputParameters": {"after": "pause"}},
            ],
            "outputParameters": {"result": "${step.output}"},
        },
    )
    workflow_id = await platform.api.start("matrix_timed_wait", {})
    worker = platform.http_worker()
    started = await platform.api.wait(workflow_id, lambda w: any(t["taskType"] == "WAIT" for t in w["tasks"]))
    await asyncio.sleep(5)
    worker.kill()
    await platform.kill_engine()
    await asyncio.sleep(10)
    await platform.restart_engine()
    platform.http_worker()
    done = await platform.api.wait(workflow_id, within_s=WAIT_SECONDS + 60)
    assert done["status"] == "COMPLETED", done
    [pause] = executions(done, "pause")
    assert pause["status"] == "COMPLETED"
    assert pause["endTime"] - pause["startTime"] >= WAIT_SECONDS * 1000
    assert done["output"]["result"] == {"after": "pause"}
    assert started["workflowId"] == workflow_id


async def test_signal_for_a_wait_task_while_the_decider_is_down(services: KafkaMongoPlatform) -> None:
    """Row 9: the signal waits in Kafka while the decider is down and is applied once it is back."""
    await services.api.register(
        {
            "name": "matrix_approval",
            "tasks": [{"name": "approve", "taskReferenceName": "approve", "type": "WAIT"}],
            "outputParameters": {"by": "${approve.output.by}"},
        }
    )
    workflow_id = await services.api.start("matrix_approval", {})
    await services.api.wait(workflow_id, lambda w: bool(w["tasks"]))
    services["decider"].kill()
    response = await services.api.signal(workflow_id, "approve", {"by": "ann"})
    assert response.status_code == 200, response.text
    await asyncio.sleep(3)
    assert (await services.api.workflow(workflow_id))["status"] == "RUNNING"
    services["decider"].start()
    done = await services.api.wait(workflow_id)
    assert done["status"] == "COMPLETED" and done["output"] == {"by": "ann"}


@pytest.mark.parametrize("victim", ["decider", "scheduler", "timer", "sweeper", "api"])
async def test_each_service_sigkilled_mid_workflow_and_restarted(
    services: KafkaMongoPlatform, victim: str
) -> None:
    """Row 5: SIGKILL one service while workflows are between steps (a retry timer pending, a
    worker task in flight), restart it: every workflow resumes from its persisted state.

    Every task's response timeout outlasts the outage: killing the api for ~4 s (2 s down, then
    its start) while a worker's report is in flight is, by the semantics, a report that cannot
    arrive, and a 3 s responseTimeoutSeconds would time the task out (seen in CI: an echo task's
    update-v2 cut by the kill, TIMED_OUT before the api was back). A report outliving an outage
    is `test_a_result_finished_while_the_api_is_down_is_delivered_when_it_returns`'s row; this
    one is about resuming from persisted state."""
    await services.api.register(
        task_def("matrix_always_fail", retryCount=1, retryDelaySeconds=2),
        task_def("matrix_echo", retryCount=0, responseTimeoutSeconds=30),
        task_def("matrix_slow", retryCount=0, responseTimeoutSeconds=30),
        {
            "name": "matrix_steps",
            "tasks": [
                {"name": "matrix_slow", "taskReferenceName": "slow", "inputParameters": {"seconds": 1}},
                {
                    "name": "matrix_echo",
                    "taskReferenceName": "step",
                    "inputParameters": {"n": "${workflow.input.n}"},
                },
            ],
            "outputParameters": {"result": "${step.output}"},
        },
    )
    ids = [await services.api.start("matrix_steps", {"n": n}) for n in range(6)]
    services.http_worker()
    await services.api.wait(ids[0], lambda w: any(t["status"] == "IN_PROGRESS" for t in w["tasks"]))
    services[victim].kill()
    await asyncio.sleep(2)
    services[victim].start()
    for n, workflow_id in enumerate(ids):
        done = await services.api.wait(workflow_id)
        assert done["status"] == "COMPLETED" and done["output"] == {"result": {"n": n}}, done


async def test_a_result_finished_while_the_api_is_down_is_delivered_when_it_returns(
    services: KafkaMongoPlatform,
) -> None:
    """The api stays down (SIGKILL, restarted 25 s later: a slow rollout) while an HTTP worker
    finishes its task. The work is done; only the report is missing, so the worker keeps trying
    until the api answers: one execution, COMPLETED, nothing redone (a worker that gave up after
    a few attempts lost the result, and the task then failed on its response timeout)."""
    await services.api.register(
        task_def("matrix_slow", retryCount=0, responseTimeoutSeconds=90, timeoutSeconds=180),
        {
            "name": "matrix_report_later",
            "tasks": [
                {"name": "matrix_slow", "taskReferenceName": "slow", "inputParameters": {"seconds": 2}}
            ],
            "outputParameters": {"by": "${slow.output.done_by}"},
        },
    )
    workflow_id = await services.api.start("matrix_report_later", {})
    services.http_worker()
    await services.api.wait(workflow_id, lambda w: any(t["status"] == "IN_PROGRESS" for t in w["tasks"]))
    services["api"].kill()
    await asyncio.sleep(25)
    services["api"].start()
    done = await services.api.wait(workflow_id, within_s=120)
    assert done["status"] == "COMPLETED", done
    assert [(t["referenceTaskName"], t["status"], t["retryCount"]) for t in done["tasks"]] == [
        ("slow", "COMPLETED", 0)
    ]


async def test_definition_updated_then_deleted_while_executions_run(platform: Platform) -> None:
    """Row 10: running executions finish on the definition they started with; a start after the
    update uses the new one; a start after the delete gets a clear 404."""

    def gated(shape: str) -> dict[str, Any]:
        return {
            "name": "matrix_versioned",
            "version": 1,
            "tasks": [
                {"name": "gate", "taskReferenceName": "gate", "type": "WAIT"},
                {"name": "matrix_echo", "taskReferenceName": "step", "inputParameters": {"shape": shape}},
            ],
            "outputParameters": {"result": "${step.output}"},
        }

    await platform.api.register(task_def("matrix_echo", retryCount=0), gated("old"))
    old = [await platform.api.start("matrix_versioned", {}) for _ in range(3)]
    await platform.api.register(gated("new"))
    new = await platform.api.start("matrix_versioned", {})
    response = await platform.api.http.delete("/api/metadata/workflow/matrix_versioned/1")
    assert response.status_code == 200, response.text
    refused = await platform.api.http.post("/api/workflow/matrix_versioned", json={})
    assert refused.status_code == 404
    assert "no workflow definition named 'matrix_versioned'" in refused.json()["message"]
    platform.http_worker()
    for workflow_id in [*old, new]:
        await platform.api.wait(workflow_id, lambda w: bool(w["tasks"]))
        assert (await platform.api.signal(workflow_id, "gate", {})).status_code == 200
    for workflow_id in old:
        done = await platform.api.wait(workflow_id)
        assert done["status"] == "COMPLETED" and done["output"] == {"result": {"shape": "old"}}, done
    done = await platform.api.wait(new)
    assert done["status"] == "COMPLETED" and done["output"] == {"result": {"shape": "new"}}, done


async def test_worker_stopped_past_its_response_timeout_then_continued(
    platform: Platform, tmp_path: Path
) -> None:
    """Row 11: a worker frozen (SIGSTOP) past responseTimeoutSeconds — as if partitioned — loses
    the task to another worker; when it wakes (SIGCONT) its late result is rejected and the
    workflow keeps the retry's result."""
    marker = tmp_path / "taken-by"
    await platform.api.register(
        # A frozen worker's parked long-poll can swallow one more dispatch (its socket is open:
        # nothing tells a partitioned worker from a slow one), so allow for that retry too.
        task_def("matrix_slow", retryCount=3),
        one_task_workflow("matrix_frozen_flow", "matrix_slow", {"seconds": 2, "marker": str(marker)}),
    )
    workflow_id = await platform.api.start("matrix_frozen_flow", {})
    frozen = platform.http_worker()
    await until(marker.exists, 30, "the first worker taking the task", platform)
    frozen.popen.send_signal(signal.SIGSTOP)  # type: ignore[union-attr]
    try:
        rescuer = platform.http_worker()
        done = await platform.api.wait(workflow_id)
    finally:
        frozen.popen.send_signal(signal.SIGCONT)  # type: ignore[union-attr]
    assert done["status"] == "COMPLETED", done
    first, *swallowed, retry = executions(done, "step")
    assert first["status"] == "TIMED_OUT" and retry["status"] == "COMPLETED"
    assert [t["status"] for t in swallowed] in ([], ["TIMED_OUT"]), swallowed
    assert done["output"]["result"] == {"done_by": rescuer.popen.pid, "task_id": retry["taskId"]}  # type: ignore[union-attr]
    await until(
        lambda: "409" in frozen.log_tail(200) or "dropped" in frozen.log_tail(200),
        20,
        "the late report",
        platform,
    )
    await asyncio.sleep(2)
    after = await platform.api.workflow(workflow_id)
    assert after["output"] == done["output"] and after["updateTime"] == done["updateTime"]
    assert [t["status"] for t in executions(after, "step")] == [t["status"] for t in executions(done, "step")]


# ---- the same rows with Kafka workers (the Kafka-native path: no api between worker and engine)


async def test_kafka_worker_dies_before_doing_anything(services: KafkaMongoPlatform, tmp_path: Path) -> None:
    """Row 1, Kafka workers: the dispatch was never acknowledged, so Kafka hands the same
    execution to the next worker of the group; it completes it (no timeout needed)."""
    marker = tmp_path / "taken"
    await services.api.register(
        task_def("matrix_die_first"),
        one_task_workflow("matrix_die_first_flow", "matrix_die_first", {"marker": str(marker)}),
    )
    workflow_id = await services.api.start("matrix_die_first_flow", {})
    first = services.kafka_worker()
    await until(
        lambda: marker.exists() and not first.alive(), 60, "the first worker taking the task", services
    )
    second = services.kafka_worker()
    done = await services.api.wait(workflow_id)
    assert done["status"] == "COMPLETED", done
    [attempt] = executions(done, "step")
    assert attempt["status"] == "COMPLETED" and attempt["retryCount"] == 0
    assert done["output"]["result"]["done_by"] == second.popen.pid  # type: ignore[union-attr]


async def test_kafka_worker_dies_after_its_side_effect_before_reporting(
    services: KafkaMongoPlatform, tmp_path: Path
) -> None:
    """Row 2, Kafka workers: the same execution (same taskId) comes back; the worker sees it in
    its ledger and does not charge twice."""
    ledger = tmp_path / "ledger.jsonl"
    await services.api.register(
        task_def("matrix_side_effect"),
        one_task_workflow("matrix_side_effect_flow", "matrix_side_effect", {"ledger": str(ledger)}),
    )
    workflow_id = await services.api.start("matrix_side_effect_flow", {})
    first = services.kafka_worker()
    await until(lambda: ledger.exists() and not first.alive(), 60, "the side effect and the death", services)
    services.kafka_worker()
    done = await services.api.wait(workflow_id)
    assert done["status"] == "COMPLETED", done
    entries = [json.loads(line) for line in ledger.read_text().splitlines()]
    assert [e["charged"] for e in entries] == [True, False]
    assert entries[0]["task_id"] == entries[1]["task_id"], "the same execution, delivered again"
    assert done["output"]["result"]["charges"] == 1


async def test_kafka_worker_stopped_past_its_response_timeout_then_continued(
    services: KafkaMongoPlatform, tmp_path: Path
) -> None:
    """Row 11, Kafka workers: the frozen worker's heartbeats stop, the task times out, the retry
    goes to the other worker once the group drops the frozen member; the frozen worker's late
    result is rejected by the decider (logged with its reason) and changes nothing."""
    marker = tmp_path / "taken-by"
    await services.api.register(
        task_def("matrix_slow", retryCount=3),
        # Long enough that the task is still running when the test freezes its worker.
        one_task_workflow("matrix_frozen_flow", "matrix_slow", {"seconds": 12, "marker": str(marker)}),
    )
    rescuer = services.kafka_worker()
    await until(lambda: "matrix_slow" in rescuer.log_tail(100), 60, "the first worker joining", services)
    frozen = services.kafka_worker()
    # The group settles before the task exists: a rebalance while it is in flight would hand
    # the same execution to both workers (Kafka's at-least-once), and the test would freeze one.
    await until(
        lambda: "matrix_slow" in frozen.log_tail(100) and rescuer.log_tail(100).count("matrix_slow") >= 2,
        60,
        "the group rebalancing onto two members",
        services,
    )
    workflow_id = await services.api.start("matrix_frozen_flow", {})
    await until(lambda: marker.exists() and marker.read_text(), 60, "a worker taking the task", services)
    # Frozen only once its first heartbeat made the task IN_PROGRESS: before that a Kafka task is
    # SCHEDULED, and the group's redelivery (not the response timeout) is what recovers it.
    await services.api.wait(workflow_id, lambda w: w["tasks"][0]["status"] == "IN_PROGRESS", within_s=10)
    holder = rescuer if marker.read_text() == str(rescuer.popen.pid) else frozen  # type: ignore[union-attr]
    other = frozen if holder is rescuer else rescuer
    holder.popen.send_signal(signal.SIGSTOP)  # type: ignore[union-attr]
    try:
        done = await services.api.wait(workflow_id, within_s=120)
    finally:
        holder.popen.send_signal(signal.SIGCONT)  # type: ignore[union-attr]
    assert done["status"] == "COMPLETED", done
    runs = executions(done, "step")
    pids = {"marker": marker.read_text(), "holder": holder.popen.pid, "other": other.popen.pid}  # type: ignore[union-attr]
    assert len(runs) >= 2, f"{pids} {runs}\n{services.diagnostics()}"
    first, *_, retry = runs
    assert first["status"] == "TIMED_OUT" and "responseTimeoutSeconds" in first["reasonForIncompletion"]
    assert done["output"]["result"] == {"done_by": other.popen.pid, "task_id": retry["taskId"]}  # type: ignore[union-attr]
    await until(
        lambda: (
            f"rejected (result_superseded): result for task {first['taskId']}"
            in services["decider"].log_tail(400)
        ),
        45,
        "the late result's rejection",
        services,
    )
    after = await services.api.workflow(workflow_id)
    assert after["output"] == done["output"] and after["updateTime"] == done["updateTime"]
