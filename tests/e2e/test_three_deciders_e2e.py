"""Issue 12 point 4: one owner per workflow across all of the decider's inbound topics, shown with
three decider processes under load on Kafka.

Every inbound topic (start, signal, command, task result, timer fired, decide request) is keyed by
workflow id and partitioned alike, and the decider group uses the range assignor, so a member gets
the same partition numbers of every topic (docs/architecture.md). Under aiokafka's default
round-robin assignor one workflow's result, timer and signal partitions landed on different
replicas, which then decided the same workflow at once and lost commits to each other. This test
reads the group's assignment from the broker, then runs starts, results, retry timers and Kafka
signals through the three deciders and counts the commits they lost to each other."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment

from shared.models.runtime import TaskStatus, WorkflowStatus
from tests.e2e.cluster import Cluster, assert_stopped_cleanly
from tests.e2e.definitions import FLAKY, PIPELINE, TASK_DEFS, expected_output

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

DECIDERS = ("decider", "decider-2", "decider-3")
LOST = re.compile(r"(\d+) commits lost to a newer version")
APPROVAL = {
    "name": "e2e_three_approval",
    "tasks": [{"name": "approve", "taskReferenceName": "approval", "type": "WAIT"}],
    "outputParameters": {"by": "${approval.output.by}"},
}


@pytest.fixture
async def cluster(
    kafka_bootstrap: str, mongo_url: str, unique: str, tmp_path: Path
) -> AsyncIterator[Cluster]:
    cluster = Cluster(kafka_bootstrap, mongo_url, unique, tmp_path)
    for name in DECIDERS[1:]:
        cluster.add(name, ["run", "decider"])
    await cluster.start()
    yield cluster
    assert_stopped_cleanly(await cluster.stop(), cluster.diagnostics)


async def decider_group(cluster: Cluster) -> dict[str, dict[str, set[int]]]:
    """The decider group's members as the broker has them: member id → topic → partitions."""
    admin = AIOKafkaAdminClient(bootstrap_servers=cluster.env["CAIRN_KAFKA_BOOTSTRAP"])
    await admin.start()
    try:
        [response] = await admin.describe_consumer_groups([cluster.topics.group("decider")])
    finally:
        await admin.close()
    [group] = response.groups
    _, _, state, _, _, members = group
    if state != "Stable":
        return {}
    found: dict[str, dict[str, set[int]]] = {}
    for member_id, _, _, _, assignment in members:
        decoded = ConsumerProtocolMemberAssignment.decode(assignment)
        found[member_id] = {topic: set(partitions) for topic, partitions in decoded.assignment}
    return found


async def stable_group(cluster: Cluster, members: int) -> dict[str, dict[str, set[int]]]:
    for _ in range(300):
        group = await decider_group(cluster)
        if len(group) == members and all(group.values()):
            return group
        await asyncio.sleep(0.2)
    raise AssertionError(f"the decider group never settled on {members} members\n" + cluster.diagnostics())


def lost_commits(cluster: Cluster) -> int:
    total = 0
    for name in DECIDERS:
        text = cluster[name].log_path.read_text(errors="replace")
        total += sum(int(n) for n in LOST.findall(text))
    return total


async def test_three_deciders_own_each_workflow_on_every_inbound_topic(cluster: Cluster) -> None:
    await cluster.register(*TASK_DEFS, PIPELINE, FLAKY, APPROVAL)
    group = await stable_group(cluster, len(DECIDERS))
    inbound = set(cluster.topics.decider_inbound)
    for member, topics in group.items():
        assert set(topics) == inbound, f"{member} does not consume every inbound topic: {topics}"
        shares = {frozenset(partitions) for partitions in topics.values()}
        assert len(shares) == 1, f"{member} holds different partitions of different topics: {topics}"
    owned = [next(iter(topics.values())) for topics in group.values()]
    assert sorted(p for share in owned for p in share) == list(range(4)), "partitions not shared out"
    lost_before = lost_commits(cluster)

    prefix = cluster.topics.prefix
    client = cluster.client
    pipelines = [
        client.start_workflow(
            "e2e_pipeline", {"n": i, "add": 2, "label": f"L{i}"}, workflow_id=f"{prefix}wf-{i}"
        )
        for i in range(40)
    ]
    flaky = [
        client.start_workflow("e2e_flaky_pipeline", {"n": i}, workflow_id=f"{prefix}f-{i}") for i in range(20)
    ]
    approvals = [
        client.start_workflow("e2e_three_approval", {}, workflow_id=f"{prefix}a-{i}") for i in range(20)
    ]
    pipeline_ids = list(await asyncio.gather(*pipelines))
    flaky_ids = list(await asyncio.gather(*flaky))
    approval_ids = list(await asyncio.gather(*approvals))

    def waiting(document: Any) -> bool:
        task = document.state.tasks.get("approval")
        return task is not None and task.status is TaskStatus.IN_PROGRESS

    await cluster.wait_for(approval_ids, done=waiting)
    await asyncio.gather(
        *(client.signal(wid, "approval", {"by": f"p{i}"}) for i, wid in enumerate(approval_ids))
    )
    documents = await cluster.wait_for(pipeline_ids + flaky_ids + approval_ids)

    for i, workflow_id in enumerate(pipeline_ids):
        assert documents[workflow_id].state.output == expected_output(i, workflow_id)
    for i, workflow_id in enumerate(flaky_ids):
        state = documents[workflow_id].state
        assert state.status is WorkflowStatus.COMPLETED, state.reason_for_incompletion
        assert state.output == {"n": (i + 1) * 2, "attempt": 1}, "the retry timer's firing went astray"
    for i, workflow_id in enumerate(approval_ids):
        assert documents[workflow_id].state.output == {"by": f"p{i}"}

    lost = lost_commits(cluster) - lost_before
    after = await decider_group(cluster)
    print(f"\nthree deciders: 80 workflows, {lost} commits lost to another decider")
    if set(after) == set(group):  # no member left or joined meanwhile: every workflow had one owner
        assert lost == 0, f"{lost} commits were lost although no decider came or went"
