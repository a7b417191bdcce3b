"""Operators on Kafka + a MongoDB-protocol server with every service its own process: a workflow
nesting SWITCH, FORK_JOIN, DO_WHILE and SUB_WORKFLOW survives its decider being SIGKILLed once
while forks are open and once inside a loop; the agent-loop shape, a 10,000-iteration DO_WHILE
and a 1,000-way dynamic fork complete."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from shared.models.documents import WorkflowDocument
from shared.models.runtime import TaskStatus, WorkflowStatus
from tests.e2e.cluster import Cluster, assert_stopped_cleanly
from tests.e2e.operator_flows import (
    LONG_LOOP,
    LONG_LOOP_ITERATIONS,
    NESTED,
    ROUNDS,
    SHIP_CHILD,
    WIDE_FORK,
    WIDE_FORK_BRANCHES,
    nested_output,
    wide_fork_total,
)

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "operators"
WORKFLOWS = 12


@pytest.fixture
async def operators_cluster(
    kafka_bootstrap: str, mongo_url: str, unique: str, tmp_path: Path
) -> AsyncIterator[Cluster]:
    cluster = Cluster(kafka_bootstrap, mongo_url, unique, tmp_path, workers="tests.e2e.workers_operators")
    await cluster.start()
    yield cluster
    assert_stopped_cleanly(await cluster.stop(), cluster.diagnostics)


async def _until(
    cluster: Cluster, ids: list[str], seen: Callable[[WorkflowDocument], bool], what: str
) -> None:
    for _ in range(600):
        documents = await cluster.store.load_workflows(ids)
        if any(seen(document) for document in documents.values()):
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"never saw {what}\n{cluster.diagnostics()}")


def _fork_open(document: WorkflowDocument) -> bool:
    merge = document.state.tasks.get("merge")
    return merge is not None and merge.status is TaskStatus.IN_PROGRESS


def _in_second_round(document: WorkflowDocument) -> bool:
    rounds = document.state.tasks.get("rounds")
    return rounds is not None and rounds.status is TaskStatus.IN_PROGRESS and rounds.iteration >= 2


async def _restart_decider(cluster: Cluster) -> None:
    cluster["decider"].kill()
    await asyncio.sleep(1)
    cluster["decider"].start()


async def test_nested_operators_survive_decider_kills(operators_cluster: Cluster) -> None:
    cluster = operators_cluster
    await cluster.register(SHIP_CHILD, NESTED)
    ids = [
        await cluster.client.start_workflow(
            "e2e_nested", {"orderId": f"o{i}"}, workflow_id=f"{cluster.topics.prefix}nested-{i}"
        )
        for i in range(WORKFLOWS)
    ]
    await _until(cluster, ids, _fork_open, "a fork open")
    await _restart_decider(cluster)  # killed while forks wait for their branches
    await _until(cluster, ids, _in_second_round, "a loop in its second round")
    await _restart_decider(cluster)  # killed inside the loops
    documents = await cluster.wait_for(ids, within_s=240)
    for i, workflow_id in enumerate(ids):
        document = documents[workflow_id]
        assert document.state.status is WorkflowStatus.COMPLETED, (
            workflow_id,
            document.state.reason_for_incompletion,
        )
        assert document.state.output == nested_output(f"o{i}")
        records = await cluster.store.list_tasks(workflow_id)
        done = Counter(t.reference_task_name for t in records if t.status is TaskStatus.COMPLETED)
        for round_ in range(1, ROUNDS + 1):
            # Every iteration ran each of its executions exactly once: no branch lost, no JOIN
            # completed twice, no iteration skipped or repeated.
            expected = ["split", "child", "pick", "lamp", "merge", "tally"]
            expected.append("slow_odd" if round_ % 2 else "slow_even")
            for ref in expected:
                assert done[f"{ref}__{round_}"] == 1, (workflow_id, ref, round_, sorted(done.items()))
        assert set(done) == {
            f"{r}__{n}"
            for n in range(1, ROUNDS + 1)
            for r in ("split", "child", "pick", "lamp", "merge", "tally")
        } | {f"{'slow_odd' if n % 2 else 'slow_even'}__{n}" for n in range(1, ROUNDS + 1)} | {
            "fetch",
            "rounds",
            "summary",
        }
        # Each round's child ran once: its id is derived from the SUB_WORKFLOW execution.
        children = [
            t.sub_workflow_id
            for t in records
            if t.kind == "SUB_WORKFLOW" and t.status is TaskStatus.COMPLETED
        ]
        assert len(children) == ROUNDS and len(set(children)) == ROUNDS
        for child_id in children:
            assert child_id is not None
            child = await cluster.store.load_workflow(child_id)
            assert child is not None and child.state.status is WorkflowStatus.COMPLETED
            assert child.state.parent_workflow_id == workflow_id


async def test_agent_loop_and_long_runs_on_kafka(operators_cluster: Cluster) -> None:
    cluster = operators_cluster
    agent = json.loads((EXAMPLES / "agent_loop.json").read_text())
    await cluster.register(*agent, LONG_LOOP, WIDE_FORK)
    agent_id = await cluster.client.start_workflow("example_agent_loop", {"goal": "lamps"})
    loop_id = await cluster.client.start_workflow("e2e_long_loop", {})
    fork_id = await cluster.client.start_workflow("e2e_wide_fork", {"branches": WIDE_FORK_BRANCHES})
    documents = await cluster.wait_for([agent_id], within_s=120)
    assert documents[agent_id].state.output == {
        "answer": "done after 2 searches: results for lamps #2",
        "iterations": 3,
    }
    documents = await cluster.wait_for([fork_id, loop_id], within_s=600)
    fork, loop = documents[fork_id], documents[loop_id]
    assert fork.state.status is WorkflowStatus.COMPLETED, fork.state.reason_for_incompletion
    assert fork.state.output == {"total": wide_fork_total(WIDE_FORK_BRANCHES)}
    assert loop.state.status is WorkflowStatus.COMPLETED, loop.state.reason_for_incompletion
    assert loop.state.output == {"iterations": LONG_LOOP_ITERATIONS, "last": 2 * LONG_LOOP_ITERATIONS}
    # Only the last iteration's execution stays in the document; history is in task records.
    assert sorted(loop.state.tasks) == ["count", "step"]
    assert len(loop.model_dump_json()) < 20_000
