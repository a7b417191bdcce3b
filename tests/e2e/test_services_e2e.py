"""Issue 2's end-to-end acceptance: separate processes on Kafka + a MongoDB-protocol server,
with services killed by SIGKILL in the middle of the run."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from shared.messaging import outgoing
from shared.models.messages import TaskMessage
from shared.models.runtime import TaskStatus, WorkflowStatus
from shared.ports.bus import Outgoing, Received
from tests.e2e.cluster import Cluster, Process
from tests.e2e.definitions import FLAKY, PIPELINE, TASK_DEFS, expected_output

pytestmark = [pytest.mark.integration, pytest.mark.e2e]


async def start_pipeline(cluster: Cluster, i: int, name: str = "wf") -> str:
    """Pipeline number `i`: its input and id are what `expected_output(i, id)` expects."""
    return await cluster.client.start_workflow(
        "e2e_pipeline", {"n": i, "add": 2, "label": f"L{i}"}, workflow_id=f"{cluster.topics.prefix}{name}-{i}"
    )


async def start_pipelines(cluster: Cluster, count: int = 50) -> list[str]:
    """Publish all the starts at once: one after the other, the first workflows finished while
    the last starts were still being acknowledged, and a kill test could find nothing in flight."""
    await cluster.register(*TASK_DEFS, PIPELINE)
    return list(await asyncio.gather(*(start_pipeline(cluster, i) for i in range(count))))


async def assert_all_completed_exactly(cluster: Cluster, ids: list[str]) -> None:
    documents = await cluster.wait_for(ids)
    for i, workflow_id in enumerate(ids):
        document = documents[workflow_id]
        assert document.state.status is WorkflowStatus.COMPLETED, (
            workflow_id,
            document.state.reason_for_incompletion,
        )
        assert document.state.output == expected_output(i, workflow_id)
        tasks = await cluster.store.list_tasks(workflow_id)
        everything = [*tasks, *document.state.tasks.values()]
        live = [t for t in everything if t.status in (TaskStatus.SCHEDULED, TaskStatus.IN_PROGRESS)]
        assert live == [], f"{workflow_id} completed with live tasks {live}"
        assert [t.reference_task_name for t in tasks if t.status is TaskStatus.COMPLETED] == [
            "add",
            "mul",
            "fmt",
        ]


async def wait_until_partly_done(cluster: Cluster, ids: list[str], at_least: int = 5) -> None:
    for _ in range(600):
        if await cluster.count_completed(ids) >= at_least:
            return
        await asyncio.sleep(0.1)
    raise AssertionError("no progress before the kill\n" + cluster.diagnostics())


async def running(process: Process) -> None:
    """Up far enough to handle SIGTERM (a rollout waits for the new pod to be ready; a process
    still importing dies of the signal's default action, as it would anywhere)."""
    for _ in range(600):
        if f"cairn {process.name} starting" in process.log_tail(200):
            return
        assert process.alive(), process.log_tail()
        await asyncio.sleep(0.1)
    raise AssertionError(f"{process.name} never started\n{process.log_tail()}")


async def test_fifty_workflows_complete_with_exact_outputs(cluster: Cluster) -> None:
    ids = await start_pipelines(cluster)
    await assert_all_completed_exactly(cluster, ids)


async def test_decider_killed_mid_run_and_restarted(cluster: Cluster) -> None:
    ids = await start_pipelines(cluster)
    await wait_until_partly_done(cluster, ids)
    # A second wave published just before the kill: on a slow machine the first wave can finish
    # between two polls, and the decider must die with work it has not finished whatever the timing.
    ids += await asyncio.gather(*(start_pipeline(cluster, i) for i in range(len(ids), len(ids) + 20)))
    cluster["decider"].kill()
    done_at_kill = await cluster.count_completed(ids)
    assert done_at_kill < len(ids), "everything finished before the kill: the test proves nothing"
    await asyncio.sleep(1)
    cluster["decider"].start()
    await assert_all_completed_exactly(cluster, ids)


async def test_workflows_run_to_the_end_while_the_scheduler_is_down(cluster: Cluster) -> None:
    """Since issue 16 the decider publishes a dispatch straight to its workers' topic: the
    scheduler is off a step's path, and a run must not wait for it."""
    cluster["scheduler"].kill()
    ids = await start_pipelines(cluster)
    await assert_all_completed_exactly(cluster, ids)
    cluster["scheduler"].start()  # so the fixture's check that SIGTERM stops it cleanly applies
    await running(cluster["scheduler"])


def legacy_dispatch(topics_prefix: str, n: int) -> TaskMessage:
    """A dispatch as a decider from before issue 16 put it on `task.dispatch`."""
    return TaskMessage(
        id=f"legacy-{n}",
        task_id=f"legacy-task-{n}",
        task_type="e2e_legacy",
        task_def_name="e2e_legacy",
        reference_task_name="legacy",
        workflow_instance_id=f"{topics_prefix}legacy-{n % 97}",
        workflow_type="e2e_legacy_flow",
        input_data={"n": n},
    )


async def test_scheduler_killed_mid_backlog_forwards_every_dispatch_after_restart(cluster: Cluster) -> None:
    """What the scheduler still does: forward the dispatches older deciders put on
    `task.dispatch` to `tasks.<taskType>`. Killed with part of a backlog forwarded, and started
    again, it forwards every one of them (at least once: its offsets are committed after the
    publish)."""
    from shared.adapters.kafka_bus import KafkaBus

    topics = cluster.topics
    legacy_topic = topics.tasks("e2e_legacy")
    await cluster.bus.ensure_topics([legacy_topic])
    forwarded: set[str] = set()

    async def collect(batch: list[Received]) -> None:
        forwarded.update(json.loads(m.value)["taskId"] for m in batch)

    listener = KafkaBus(cluster.env["CAIRN_KAFKA_BOOTSTRAP"], client_id="legacy-listener")
    listener.subscribe([legacy_topic], "legacy-listener", collect)  # type: ignore[arg-type]
    await listener.start()
    try:
        cluster["scheduler"].kill()
        backlog = [legacy_dispatch(topics.prefix, n) for n in range(5000)]
        await cluster.bus.publish(
            [outgoing(topics.task_dispatch, m, m.workflow_instance_id) for m in backlog]
        )
        cluster["scheduler"].start()
        for _ in range(1200):
            if forwarded:
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the restarted scheduler forwarded nothing\n" + cluster.diagnostics())
        cluster["scheduler"].kill()
        forwarded_at_kill = len(forwarded)
        assert forwarded_at_kill < len(backlog), "the whole backlog was forwarded before the kill"
        print(f"\nscheduler killed with {forwarded_at_kill} of {len(backlog)} dispatches forwarded")
        await asyncio.sleep(1)
        cluster["scheduler"].start()
        expected = {m.task_id for m in backlog}
        for _ in range(1200):
            if forwarded >= expected:
                break
            await asyncio.sleep(0.05)
        assert forwarded == expected, (
            f"{len(expected - forwarded)} of {len(expected)} dispatches never forwarded "
            f"({forwarded_at_kill} at the kill)\n" + cluster.diagnostics()
        )
    finally:
        await listener.stop()


async def test_timer_killed_while_retry_timers_pending(cluster: Cluster) -> None:
    await cluster.register(*TASK_DEFS, FLAKY)
    ids = [
        await cluster.client.start_workflow(
            "e2e_flaky_pipeline", {"n": i}, workflow_id=f"{cluster.topics.prefix}f-{i}"
        )
        for i in range(20)
    ]

    async def retries_pending() -> int:
        pending = 0
        for workflow_id in ids:
            document = await cluster.store.load_workflow(workflow_id)
            pending += bool(document and document.state.timers)
        return pending

    for _ in range(600):
        if await retries_pending() >= 5:
            break
        await asyncio.sleep(0.1)
    else:
        raise AssertionError("no retry timer became pending\n" + cluster.diagnostics())
    cluster["timer"].kill()
    await asyncio.sleep(2)
    cluster["timer"].start()
    documents = await cluster.wait_for(ids)
    for i, workflow_id in enumerate(ids):
        state = documents[workflow_id].state
        assert state.status is WorkflowStatus.COMPLETED, state.reason_for_incompletion
        assert state.output == {"n": (i + 1) * 2, "attempt": 1}
        attempts = [
            t for t in await cluster.store.list_tasks(workflow_id) if t.reference_task_name == "flaky"
        ]
        assert [(t.retry_count, t.status) for t in attempts] == [
            (0, TaskStatus.FAILED),
            (1, TaskStatus.COMPLETED),
        ]
        assert attempts[1].retried_task_id == attempts[0].task_id


async def test_wait_task_completed_by_kafka_signal(cluster: Cluster) -> None:
    await cluster.register(
        *TASK_DEFS,
        {
            "name": "e2e_approval",
            "tasks": [
                {"name": "approve", "taskReferenceName": "approval", "type": "WAIT"},
                {
                    "name": "e2e_fmt",
                    "taskReferenceName": "fmt",
                    "inputParameters": {"n": "${approval.output.amount}", "label": "${approval.output.by}"},
                },
            ],
            "outputParameters": {"text": "${fmt.output.text}", "approvedBy": "${approval.output.by}"},
        },
    )
    workflow_id = await cluster.client.start_workflow(
        "e2e_approval", {}, workflow_id=f"{cluster.topics.prefix}approval"
    )

    def waiting(document: Any) -> bool:
        task = document.state.tasks.get("approval")
        return task is not None and task.status is TaskStatus.IN_PROGRESS

    await cluster.wait_for([workflow_id], done=waiting)
    await cluster.client.signal(workflow_id, "approval", {"by": "ann", "amount": 42})
    document = (await cluster.wait_for([workflow_id]))[workflow_id]
    assert document.state.status is WorkflowStatus.COMPLETED
    assert document.state.tasks["approval"].output_data == {"by": "ann", "amount": 42}
    assert document.state.tasks["fmt"].input_data == {"n": 42, "label": "ann"}
    assert document.state.output == {"text": "ann=42", "approvedBy": "ann"}


async def test_malformed_start_events_are_dead_lettered_and_partition_moves_on(cluster: Cluster) -> None:
    await cluster.register(*TASK_DEFS, PIPELINE)
    letters: list[dict[str, Any]] = []

    async def collect(batch: list[Received]) -> None:
        letters.extend(json.loads(m.value) for m in batch)

    from shared.adapters.kafka_bus import KafkaBus

    listener = KafkaBus(cluster.env["CAIRN_KAFKA_BOOTSTRAP"], client_id="dlq-listener")
    listener.subscribe([cluster.topics.dead_letter], "dlq-listener", collect)  # type: ignore[arg-type]
    await listener.start()
    try:
        key = "same-partition"
        await cluster.bus.publish(
            [
                Outgoing(cluster.topics.workflow_start, b"\x00 not json at all", key),
                Outgoing(
                    cluster.topics.workflow_start,
                    json.dumps({"type": "start_workflow", "id": "m1"}).encode(),
                    key,
                ),
                Outgoing(cluster.topics.workflow_start, json.dumps({"hello": "world"}).encode(), key),
            ]
        )
        good = await cluster.client.start_workflow(
            "e2e_pipeline", {"n": 1, "add": 2, "label": "L1"}, workflow_id=key
        )
        document = (await cluster.wait_for([good]))[good]
        assert document.state.output == expected_output(1, key)
        for _ in range(300):
            if len(letters) >= 3:
                break
            await asyncio.sleep(0.1)
        reasons = sorted(letter["reason"] for letter in letters)
        assert len(reasons) == 3, reasons
        assert reasons[0].startswith("not JSON")
        assert all(r.startswith("schema violation") for r in reasons[1:])
        assert any("workflowId" in r for r in reasons[1:])
        assert {letter["topic"] for letter in letters} == {cluster.topics.workflow_start}
    finally:
        await listener.stop()


async def test_unregistered_workflow_gets_clear_failed_status(cluster: Cluster) -> None:
    workflow_id = await cluster.client.start_workflow(
        "no_such_workflow", {"x": 1}, workflow_id=f"{cluster.topics.prefix}nope"
    )
    document = (await cluster.wait_for([workflow_id]))[workflow_id]
    assert document.state.status is WorkflowStatus.FAILED
    assert (
        document.state.reason_for_incompletion
        == "workflow definition 'no_such_workflow' (any version) is not registered"
    )
    # The decider is still healthy: a registered workflow runs afterwards.
    ids = await start_pipelines(cluster, count=1)
    await assert_all_completed_exactly(cluster, ids)
    assert cluster["decider"].alive()


async def test_sweeper_republishes_an_outbox_a_crashed_decider_never_sent(cluster: Cluster) -> None:
    """A decision committed but never published (the decider died in between and its input is
    gone) is found by the sweeper and carried on: the workflow completes."""
    from services.clock import now_ms
    from shared.core import decide, new_workflow_state
    from shared.models.documents import WorkflowDocument
    from shared.models.messages import StartWorkflow
    from shared.ports.store import Commit

    await cluster.register(*TASK_DEFS, PIPELINE)
    snapshot = await cluster.store.get_workflow_def("e2e_pipeline")
    assert snapshot is not None
    for node in snapshot.tasks:
        node.task_definition = (await cluster.store.get_task_defs([node.name]))[node.name]
    workflow_id = f"{cluster.topics.prefix}orphan"
    start = StartWorkflow(
        id="orphan-start",
        workflow_id=workflow_id,
        name="e2e_pipeline",
        input={"n": 5, "add": 2, "label": "L5"},
    )
    now = now_ms()
    decision = decide(snapshot, new_workflow_state(snapshot, start, now), [start], now)
    document = WorkflowDocument(
        workflow_id=workflow_id,
        version=1,
        definition=snapshot,
        state=decision.state,
        outbox=decision.outbox,
        inbox=[start.id],
        updated_at=now,
    )
    assert await cluster.store.commit_workflows([Commit(document, 0)]) == [True]
    assert (await cluster.store.load_workflow(workflow_id)).outbox  # type: ignore[union-attr]
    done = (await cluster.wait_for([workflow_id], within_s=60))[workflow_id]
    assert done.state.status is WorkflowStatus.COMPLETED
    assert done.state.output == expected_output(5, workflow_id)
    assert "swept" in cluster["sweeper"].log_tail(200)


async def test_worker_finishes_in_flight_task_on_sigterm(cluster: Cluster) -> None:
    """Graceful shutdown: SIGTERM lets the running task finish and its result be sent; with no
    worker left afterwards, the workflow can only complete if that result went out."""
    await cluster.register(
        {"name": "e2e_slow", "retryCount": 0},
        {
            "name": "e2e_slow_flow",
            "tasks": [{"name": "e2e_slow", "taskReferenceName": "slow", "inputParameters": {"seconds": 3}}],
        },
    )
    workflow_id = await cluster.client.start_workflow(
        "e2e_slow_flow", {}, workflow_id=f"{cluster.topics.prefix}slow"
    )

    def dispatched(document: Any) -> bool:
        task = document.state.tasks.get("slow")
        return task is not None and task.dispatch_count >= 1

    await cluster.wait_for([workflow_id], done=dispatched)
    await asyncio.sleep(1.5)  # the worker has picked it up and is sleeping
    assert await asyncio.to_thread(cluster["worker"].stop) == 0
    document = (await cluster.wait_for([workflow_id], within_s=30))[workflow_id]
    assert document.state.status is WorkflowStatus.COMPLETED
    assert document.state.output == {"slept": 3}


async def test_rolling_restart_under_load_loses_nothing(cluster: Cluster, tmp_path: Path) -> None:
    """What `kubectl rollout restart` (maxSurge 1) does to every Deployment, while workflows keep
    arriving: a new replica of the service starts, then the old one gets SIGTERM and must finish
    what it holds and exit 0 within compose's 30 s grace period. Nothing may be lost or done
    twice: every workflow completes with its exact output and one completed execution per task."""
    await cluster.register(*TASK_DEFS, PIPELINE)
    ids: list[str] = []

    async def start_more(count: int) -> None:
        for _ in range(count):
            ids.append(await start_pipeline(cluster, len(ids), "roll"))

    exits = {}
    for name in ("decider", "scheduler", "timer", "sweeper", "worker"):
        await start_more(12)
        old = cluster[name]
        # A new pod, a new name: two live processes never share an instance id.
        env = {**old.env, "CAIRN_INSTANCE_ID": f"new-{name}"}
        replacement = Process(name, old.argv, env, tmp_path / f"new-{name}")
        replacement.log_path.parent.mkdir()
        replacement.start()
        await running(old)
        await running(replacement)
        await asyncio.sleep(1)
        exits[name] = old.stop(timeout=30)  # None: still running after 30 s, then killed
        cluster.processes[name] = replacement
    assert exits == dict.fromkeys(exits, 0), f"SIGTERM exits {exits}\n{cluster.diagnostics()}"
    await assert_all_completed_exactly(cluster, ids)


async def test_a_start_for_a_finished_workflow_starts_nothing_new(cluster: Cluster) -> None:
    """The decider looks for a workflow being started among running executions only (a look for
    an id that does not exist scans the finished ones on FerretDB); a finished one under the id
    is found by the create's uniqueness: the commit is lost, the retry reads it, the start is a
    duplicate and changes nothing."""
    [workflow_id] = await start_pipelines(cluster, count=1)
    await assert_all_completed_exactly(cluster, [workflow_id])
    before = await cluster.store.load_workflow(workflow_id)
    assert before is not None
    cluster["decider"].stop()  # a decider that has not just decided it (nothing cached)
    cluster["decider"].start()
    await start_pipeline(cluster, 0)  # the same id and input again

    def lost_commit_logged() -> bool:
        return workflow_id in cluster["decider"].log_path.read_text(errors="replace")

    for _ in range(300):
        if lost_commit_logged():
            break
        await asyncio.sleep(0.1)
    else:
        raise AssertionError("the duplicate start never reached the decider\n" + cluster.diagnostics())
    after = await cluster.store.load_workflow(workflow_id)
    assert after is not None and after.version == before.version and after.state == before.state
    assert len(await cluster.store.list_tasks(workflow_id)) == 3, "the pipeline ran again"
