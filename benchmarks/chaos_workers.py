"""Workers of the chaos soak (definitions in chaos_definitions.py).

`cairn worker benchmarks.chaos_workers` runs the SDK workers: chaos_add, chaos_mul, chaos_fmt and
chaos_flaky. `python -m benchmarks.chaos_workers` runs chaos_hang, a worker written against the
Kafka protocol directly (docs/protocol.md, "Writing a worker in any language"): on a task's first
attempt it reports IN_PROGRESS and then never answers, as a worker whose process hung would. It
cannot be an SDK worker: the SDK heartbeats a running function, so a worker that is alive but
stuck is never timed out by responseTimeoutSeconds, and an SDK function that sleeps holds back
every later task of its type delivered after its batch.

Every execution is appended to the file named by $CHAOS_LEDGER (one JSON line per execution:
task id, attempt, delivery), so the harness can count duplicate deliveries.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Sequence
from typing import Any

from cairn import worker
from shared.adapters.kafka_bus import KafkaBus
from shared.config import CairnSettings
from shared.messaging import PoisonMessageError, outgoing, parse
from shared.models.messages import WORKER_TASK, TaskMessage, TaskResult
from shared.models.runtime import TaskStatus
from shared.ports.bus import Outgoing, Received

LEDGER_ENV = "CHAOS_LEDGER"
HANG_TASK = "chaos_hang"


def record(task: TaskMessage) -> None:
    """Append one execution to the ledger. One small O_APPEND write per line: lines from several
    processes do not interleave, and a SIGKILL can at worst leave one truncated last line."""
    path = os.environ.get(LEDGER_ENV)
    if not path:
        return
    line = {
        "taskId": task.task_id,
        "taskType": task.task_type,
        "workflowId": task.workflow_instance_id,
        "retryCount": task.retry_count,
        "pollCount": task.poll_count,
        "pid": os.getpid(),
        "at": time.time(),
    }
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(line) + "\n").encode())
    finally:
        os.close(fd)


@worker("chaos_add")
async def add(task_input: dict[str, Any], task: TaskMessage) -> dict[str, Any]:
    record(task)
    await asyncio.sleep(0.02)
    return {"n": task_input["n"] + task_input["add"]}


@worker("chaos_mul")
def mul(task_input: dict[str, Any], task: TaskMessage) -> dict[str, Any]:
    record(task)
    return {"n": task_input["n"] * task_input["by"]}


@worker("chaos_fmt")
async def fmt(task_input: dict[str, Any], task: TaskMessage) -> dict[str, Any]:
    record(task)
    await asyncio.sleep(0.02)
    return {"text": f"{task_input['label']}={task_input['n']}"}


@worker("chaos_flaky")
def flaky(task_input: dict[str, Any], task: TaskMessage) -> dict[str, Any]:
    """Fails every first attempt: the retry goes through a durable retry timer."""
    record(task)
    if task.retry_count == 0:
        raise RuntimeError("chaos: the first attempt always fails")
    return {"n": task_input["n"] + 1}


def hang_reply(task: TaskMessage, worker_id: str) -> TaskResult:
    """First attempt: IN_PROGRESS, and nothing after it (the response timeout must retry it).
    Later attempts: the deterministic output."""
    if task.retry_count == 0:
        return TaskResult(
            id=f"started:{task.task_id}:{task.poll_count}",
            workflow_instance_id=task.workflow_instance_id,
            task_id=task.task_id,
            status=TaskStatus.IN_PROGRESS,
            worker_id=worker_id,
        )
    return TaskResult(
        id=f"result:{task.task_id}:{task.poll_count}",
        workflow_instance_id=task.workflow_instance_id,
        task_id=task.task_id,
        status=TaskStatus.COMPLETED,
        output_data={"n": task.input_data["n"] * 10},
        worker_id=worker_id,
    )


async def serve_hang(settings: CairnSettings, stop: asyncio.Event) -> None:
    """Consume `tasks.chaos_hang` in the workers' group; offsets are committed after the replies
    are published, so a kill redelivers the batch (and the ledger shows it)."""
    topics = settings.topics
    bus = KafkaBus(settings.kafka_bootstrap, client_id="chaos-hang", partitions=settings.kafka_partitions)
    worker_id = f"chaos-hang-{os.getpid()}"

    async def handle(batch: Sequence[Received]) -> None:
        replies: list[Outgoing] = []
        for received in batch:
            try:
                task = parse(received, WORKER_TASK)
            except PoisonMessageError:
                continue
            record(task)
            replies.append(
                outgoing(topics.task_result, hang_reply(task, worker_id), task.workflow_instance_id)
            )
        await bus.publish(replies)

    bus.subscribe([topics.tasks(HANG_TASK)], topics.workers(HANG_TASK), handle)
    await bus.start()
    try:
        await stop.wait()
    finally:
        await bus.stop()


def main() -> None:
    from services.runtime import run_service

    run_service("chaos-hang-worker", serve_hang)


if __name__ == "__main__":
    main()
