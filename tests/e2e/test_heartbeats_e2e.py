"""Heartbeats and callbacks on the Kafka worker path: services and a `cairn worker` process on
real Kafka and a MongoDB-protocol server. A Kafka worker reports no start, so its task shows
IN_PROGRESS only once a heartbeat has reached the decider; a plain function blocking for three
response timeouts is then kept alive by the beats (one execution, no retry), and a worker
returning InProgress(1) gets the same execution back a second later."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from shared.models.documents import WorkflowDocument
from shared.models.runtime import TaskStatus
from tests.e2e.cluster import Cluster

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

WORK_S = 6
TASK_DEFS = [
    {
        "name": "hb_e2e_long",
        "retryCount": 1,
        "retryDelaySeconds": 0,
        "responseTimeoutSeconds": 2,
        "timeoutSeconds": 60,
    },
    {"name": "hb_e2e_callback", "retryCount": 0, "responseTimeoutSeconds": 30, "timeoutSeconds": 60},
]
WORKFLOW = {
    "name": "hb_e2e",
    "tasks": [
        {"name": "hb_e2e_long", "taskReferenceName": "long", "inputParameters": {"seconds": WORK_S}},
        {"name": "hb_e2e_callback", "taskReferenceName": "later"},
    ],
}


@pytest.fixture
async def heartbeat_cluster(
    kafka_bootstrap: str, mongo_url: str, unique: str, tmp_path: Path
) -> AsyncIterator[Cluster]:
    cluster = Cluster(kafka_bootstrap, mongo_url, unique, tmp_path, workers="tests.e2e.workers_heartbeat")
    await cluster.bus.ensure_topics([cluster.topics.tasks(str(d["name"])) for d in TASK_DEFS])
    await cluster.start()
    yield cluster
    codes = await cluster.stop()
    unclean = {name: code for name, code in codes.items() if code not in (0, None)}
    assert not unclean, f"services did not stop cleanly on SIGTERM: {unclean}\n{cluster.diagnostics()}"


def long_is_in_progress(document: WorkflowDocument) -> bool:
    task = document.state.tasks.get("long")
    return task is not None and task.status is TaskStatus.IN_PROGRESS


async def test_kafka_worker_heartbeats_keep_a_long_task_alive_and_callbacks_hand_it_back(
    heartbeat_cluster: Cluster,
) -> None:
    cluster = heartbeat_cluster
    await cluster.register(*TASK_DEFS, WORKFLOW)
    # A generated id: one with a '.' (like the topic prefix) cannot hold timers on FerretDB.
    workflow_id = await cluster.client.start_workflow("hb_e2e", {})

    await cluster.wait_for([workflow_id], long_is_in_progress, within_s=90)  # a beat arrived
    document = (await cluster.wait_for([workflow_id], within_s=90))[workflow_id]

    state = document.state
    assert state.status.value == "COMPLETED", (state, cluster.diagnostics())
    long, later = state.tasks["long"], state.tasks["later"]
    assert long.status is TaskStatus.COMPLETED and long.retry_count == 0, "timed out and retried"
    assert long.output_data == {"slept": WORK_S}
    assert later.retry_count == 0 and later.dispatch_count == 2
    assert later.output_data == {"first": True, "done": True, "polls": 2}
