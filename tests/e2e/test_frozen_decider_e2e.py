"""Issue 12 point 4: a decider frozen longer than the fences' lifetime cannot commit over newer
state. Real processes on Kafka + the MongoDB-protocol server, and a real SIGSTOP.

The decider is frozen (it stops itself with SIGSTOP through a test hook) after it has read a
workflow and decided a signal for it, before its commit. A second decider takes the partitions
over, decides the redelivered signal and moves the workflow on twice; the fence of the version
the frozen decider is about to write is pruned (fence lifetime shortened to 2 s). Then SIGCONT.
Before the fix the frozen decider's fence insert succeeded (its fence was gone) and its stale
document replaced the newer one: the workflow went back a step and ran a task again
(tests/integration/test_fence_bugs.py forces the same in-process)."""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from pymongo import AsyncMongoClient

from shared.models.runtime import TaskStatus, WorkflowStatus
from tests.e2e.cluster import Cluster, Process, assert_stopped_cleanly
from tests.e2e.definitions import TASK_DEFS
from tests.waiting import until

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

MARKER = "freeze-me"
TWO_WAITS = {
    "name": "e2e_two_waits",
    "tasks": [
        {"name": "first", "taskReferenceName": "a", "type": "WAIT"},
        {
            "name": "e2e_fmt",
            "taskReferenceName": "fmt",
            "inputParameters": {"n": 7, "label": "${a.output.by}"},
        },
        {"name": "second", "taskReferenceName": "b", "type": "WAIT"},
    ],
    "outputParameters": {"text": "${fmt.output.text}", "by": "${b.output.by}"},
}


@pytest.fixture
async def cluster(
    kafka_bootstrap: str, mongo_url: str, unique: str, tmp_path: Path
) -> AsyncIterator[Cluster]:
    cluster = Cluster(
        kafka_bootstrap,
        mongo_url,
        unique,
        tmp_path,
        CAIRN_MONGO_FENCE_RETENTION_S="2",
        CAIRN_SWEEPER_HOUSEKEEPING_INTERVAL_S="1",
    )
    frozen = cluster["decider"]
    frozen.env = {**frozen.env, "CAIRN_FAULT_FREEZE_MARKER": MARKER}
    await cluster.start()
    yield cluster
    if frozen.alive():  # a test that failed while it was frozen: SIGTERM must reach a running process
        frozen.popen.send_signal(signal.SIGCONT)  # type: ignore[union-attr]
    assert_stopped_cleanly(await cluster.stop(), cluster.diagnostics)


def process_state(process: Process) -> str:
    assert process.popen is not None
    return Path(f"/proc/{process.popen.pid}/stat").read_text().split(")")[-1].split()[0]


async def test_a_decider_frozen_past_the_fence_lifetime_cannot_commit_over_newer_state(
    cluster: Cluster, tmp_path: Path
) -> None:
    await cluster.register(*TASK_DEFS, TWO_WAITS)
    workflow_id = f"{cluster.topics.prefix}{MARKER}"
    await cluster.client.start_workflow("e2e_two_waits", {}, workflow_id=workflow_id)

    async def task_status(ref: str) -> TaskStatus | None:
        document = await cluster.store.load_workflow(workflow_id)
        task = document.state.tasks.get(ref) if document else None
        return task.status if task else None

    async def waiting_on(ref: str) -> bool:
        return await task_status(ref) is TaskStatus.IN_PROGRESS

    await until("the first WAIT is in progress", lambda: waiting_on("a"), cluster, within_s=90)
    read = await cluster.store.load_workflow(workflow_id)
    assert read is not None
    stale_version = read.version + 1  # what the frozen decider will try to write
    await cluster.client.signal(workflow_id, "a", {"by": "ann"})

    async def frozen() -> bool:
        return process_state(cluster["decider"]) == "T"

    await until("the decider froze before its commit", frozen, cluster, within_s=30)
    # A second decider takes the partitions over once the frozen one's session runs out.
    cluster.add("decider-2", ["run", "decider"]).start()
    await until("the second decider moved the workflow on", lambda: waiting_on("b"), cluster, within_s=90)
    before = await cluster.store.load_workflow(workflow_id)
    assert before is not None and before.version > stale_version

    mongo: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(cluster.env["CAIRN_MONGO_URL"])
    database = mongo[cluster.database]
    try:

        async def fence_pruned() -> bool:
            # Fences live in time buckets and `late` (shared/adapters/mongo_fences.py).
            for name in await database.list_collection_names():
                if name.startswith("workflow_commits"):
                    fence = {"workflowId": workflow_id, "version": stale_version}
                    if await database[name].find_one(fence) is not None:
                        return False
            return True

        await until(
            "the fence of the frozen decider's version was pruned", fence_pruned, cluster, within_s=90
        )
    finally:
        await mongo.close()

    cluster["decider"].popen.send_signal(signal.SIGCONT)  # type: ignore[union-attr]

    async def refused() -> bool:
        return "stale commits refused" in cluster["decider"].log_path.read_text(errors="replace")

    await until("the resumed decider's commit was refused", refused, cluster, within_s=30)
    after = await cluster.store.load_workflow(workflow_id)
    assert after is not None and after.version >= before.version, "the workflow went back a version"
    assert after.state.tasks["fmt"].status is TaskStatus.COMPLETED
    assert after.state.tasks["b"].status is TaskStatus.IN_PROGRESS

    await cluster.client.signal(workflow_id, "b", {"by": "bob"})
    documents = await cluster.wait_for([workflow_id])
    state = documents[workflow_id].state
    assert state.status is WorkflowStatus.COMPLETED, state.reason_for_incompletion
    assert state.output == {"text": "ann=7", "by": "bob"}
    runs = [t for t in await cluster.store.list_tasks(workflow_id) if t.reference_task_name == "fmt"]
    assert len(runs) == 1, f"fmt ran {len(runs)} times: the stale commit brought it back"
