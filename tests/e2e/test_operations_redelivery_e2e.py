"""Every lifecycle operation, published ten times, changes the workflow once; and a decider
SIGKILLed between taking a command and committing it loses nothing: Kafka gives the command to
the decider that starts next, which applies it once. On Kafka + MongoDB, commands published
straight to `workflow.command` as any client in any language would."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from shared.messaging import outgoing
from shared.models.documents import WorkflowDocument
from shared.models.messages import (
    LifecycleCommand,
    PauseWorkflow,
    RerunWorkflow,
    RestartWorkflow,
    ResumeWorkflow,
    RetryWorkflow,
    SkipTask,
)
from shared.models.runtime import TaskStatus, WorkflowStatus
from tests.e2e.cluster import Cluster, assert_stopped_cleanly

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

MARKER = "kill-before-command"
TWO_WAITS = {
    "name": "e2e_ops_two_waits",
    "tasks": [
        {"name": "w1", "taskReferenceName": "w1", "type": "WAIT"},
        {"name": "w2", "taskReferenceName": "w2", "type": "WAIT"},
    ],
    "outputParameters": {"second": "${w2.output.v}"},
}
TIMES = 10


@pytest.fixture
async def cluster(
    kafka_bootstrap: str, mongo_url: str, unique: str, tmp_path: Path
) -> AsyncIterator[Cluster]:
    cluster = Cluster(kafka_bootstrap, mongo_url, unique, tmp_path)
    del cluster.processes["worker"]
    decider = cluster["decider"]
    decider.env = {**decider.env, "CAIRN_FAULT_KILL_BEFORE_COMMAND_COMMIT": MARKER}
    await cluster.start()
    yield cluster
    assert_stopped_cleanly(await cluster.stop(), cluster.diagnostics)


async def publish(
    cluster: Cluster, command: LifecycleCommand, times: int = TIMES, same_id: bool = True
) -> None:
    """The command `times` times: the same message redelivered, or (same_id=False) sent again
    by an operator who saw the same run (its epoch)."""
    copies = [
        command if same_id else command.model_copy(update={"id": f"{command.id}-{n}"}) for n in range(times)
    ]
    topic = cluster.topics.workflow_command
    await cluster.bus.publish([outgoing(topic, copy, command.workflow_id, {}) for copy in copies])


async def until(
    cluster: Cluster, workflow_id: str, test: Callable[[WorkflowDocument], bool]
) -> WorkflowDocument:
    [document] = (await cluster.wait_for([workflow_id], done=test, within_s=60)).values()
    return document


def recorded(document: WorkflowDocument, operation: str) -> int:
    return sum(1 for r in document.state.operations if r.operation == operation)


def applied(document: WorkflowDocument, operation: str) -> int:
    return sum(1 for r in document.state.operations if r.operation == operation and r.applied)


async def signal(cluster: Cluster, workflow_id: str, ref: str, status: TaskStatus, **output: Any) -> None:
    await cluster.client.signal(workflow_id, ref, output, status)


async def test_each_operation_ten_times_changes_the_workflow_once_across_a_sigkill(cluster: Cluster) -> None:
    await cluster.register(TWO_WAITS)
    workflow_id = f"{MARKER}-{cluster.database}"
    await cluster.client.start_workflow(TWO_WAITS["name"], {}, workflow_id=workflow_id)
    await until(cluster, workflow_id, lambda d: "w1" in d.state.tasks)

    # The decider dies right before committing the pause; the next one applies it, once.
    await publish(cluster, PauseWorkflow(id="pause-1", workflow_id=workflow_id))
    decider = cluster["decider"]
    assert decider.popen is not None
    assert await asyncio.to_thread(decider.popen.wait, 60) == -9, decider.log_tail()
    assert "SIGKILL before the commit of a command" in decider.log_tail()
    decider.env = {k: v for k, v in decider.env.items() if k != "CAIRN_FAULT_KILL_BEFORE_COMMAND_COMMIT"}
    decider.start()
    paused = await until(cluster, workflow_id, lambda d: d.state.status is WorkflowStatus.PAUSED)
    assert applied(paused, "pause") == 1

    await publish(cluster, ResumeWorkflow(id="resume-1", workflow_id=workflow_id))
    await until(cluster, workflow_id, lambda d: applied(d, "resume") >= 1)
    await publish(cluster, SkipTask(id="skip-1", workflow_id=workflow_id, task_reference_name="w1"))
    skipped = await until(cluster, workflow_id, lambda d: "w2" in d.state.tasks)
    assert skipped.state.tasks["w1"].status is TaskStatus.SKIPPED
    # one record each: the ten copies of one message are taken once (inbox dedupe)
    assert [(r.operation, r.applied) for r in skipped.state.operations] == [
        ("pause", True),
        ("resume", True),
        ("skip_task", True),
    ]

    await signal(cluster, workflow_id, "w2", TaskStatus.FAILED)
    failed = await until(cluster, workflow_id, lambda d: d.state.status is WorkflowStatus.FAILED)
    await publish(
        cluster, RetryWorkflow(id="retry", workflow_id=workflow_id, epoch=failed.state.epoch), same_id=False
    )
    retried = await until(cluster, workflow_id, lambda d: recorded(d, "retry") == TIMES)
    assert applied(retried, "retry") == 1 and retried.state.status is WorkflowStatus.RUNNING
    await signal(cluster, workflow_id, "w2", TaskStatus.COMPLETED, v=1)
    done = await until(cluster, workflow_id, lambda d: d.state.status is WorkflowStatus.COMPLETED)
    assert done.state.tasks["w2"].retry_count == 1 and applied(done, "retry") == 1

    rerun = RerunWorkflow(
        id="rerun",
        workflow_id=workflow_id,
        re_run_from_task_id=done.state.tasks["w2"].task_id,
        epoch=done.state.epoch,
    )
    await publish(cluster, rerun, same_id=False)
    await until(cluster, workflow_id, lambda d: recorded(d, "rerun") == TIMES)
    await signal(cluster, workflow_id, "w2", TaskStatus.COMPLETED, v=2)
    done = await until(cluster, workflow_id, lambda d: d.state.status is WorkflowStatus.COMPLETED)
    assert done.state.output == {"second": 2} and applied(done, "rerun") == 1

    await publish(
        cluster, RestartWorkflow(id="restart", workflow_id=workflow_id, epoch=done.state.epoch), same_id=False
    )
    final = await until(cluster, workflow_id, lambda d: recorded(d, "restart") == TIMES)
    assert applied(final, "restart") == 1 and final.state.epoch == retried.state.epoch + 2
    assert (
        final.state.status is WorkflowStatus.RUNNING
        and final.state.tasks["w1"].status is TaskStatus.IN_PROGRESS
    )
    refused = [r for r in final.state.operations if r.operation == "restart" and not r.applied]
    assert len(refused) == TIMES - 1 and all("only a finished workflow" in (r.reason or "") for r in refused)
    assert recorded(final, "rerun") == TIMES and applied(final, "rerun") == 1


async def test_the_cli_operates_straight_on_kafka_and_mongodb(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a server, with CAIRN_MONGO_URL set, `cairn pause` etc. publish the command to
    Kafka and wait for the decider's record of it (cairn/backends.py DirectBackend)."""
    import json as json_module

    from typer.testing import CliRunner

    from cairn.cli import app

    await cluster.register(TWO_WAITS)
    workflow_id = f"cli-direct-{cluster.database}"
    await cluster.client.start_workflow(TWO_WAITS["name"], {}, workflow_id=workflow_id)
    await until(cluster, workflow_id, lambda d: "w1" in d.state.tasks)
    for name in ("CAIRN_KAFKA_BOOTSTRAP", "CAIRN_MONGO_URL", "CAIRN_MONGO_DB", "CAIRN_TOPIC_PREFIX"):
        monkeypatch.setenv(name, cluster.env[name])
    monkeypatch.delenv("CAIRN_SERVER", raising=False)

    def cli(*args: str) -> tuple[int, str]:
        result = CliRunner().invoke(app, list(args))
        return result.exit_code, result.output

    code, out = await asyncio.to_thread(cli, "pause", workflow_id, "--json")
    assert code == 0 and json_module.loads(out.splitlines()[-1])["status"] == "PAUSED", out
    code, out = await asyncio.to_thread(cli, "pause", workflow_id)
    assert code == 0 and "PAUSED" in out  # again: no error
    code, out = await asyncio.to_thread(cli, "retry", workflow_id)
    assert code == 2 and "can be retried" in " ".join(out.split()), out
    code, out = await asyncio.to_thread(cli, "resume", workflow_id, "--json")
    assert code == 0 and json_module.loads(out.splitlines()[-1])["status"] == "RUNNING", out
