"""Issue 12 point 8, the second fuzzer: well-formed envelopes aimed at real workflows.

The random-envelope fuzzer (test_kafka_fuzz_e2e.py) mostly meets the parsers. This one publishes
messages that pass every schema — results, signals, terminations, child endings, timer firings,
decide requests, duplicate starts, timer requests and task dispatches — carrying the ids of running
"victim" workflows and of their real task executions, with random statuses, outputs (some past the
payload limits), delays and reasons, while a trickle of normal pipelines runs. Afterwards: every
service is up, every pipeline completed exactly, no victim breaks an invariant, and every victim
still running is driven to its end by ordinary signals (nothing was wedged)."""

from __future__ import annotations

import asyncio
import json
import os
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from shared.core.invariants import invariant_violations
from shared.models.limits import JAVA_INT_MAX, MAX_TIME_MS
from shared.models.messages import (
    DecideRequest,
    Envelope,
    Signal,
    StartWorkflow,
    SubWorkflowEnded,
    TaskMessage,
    TaskResult,
    TerminateWorkflow,
    TimerFired,
    TimerRequest,
)
from shared.models.runtime import TaskStatus, WorkflowStatus
from shared.ports.bus import Outgoing
from tests.e2e.cluster import Cluster
from tests.e2e.definitions import PIPELINE, TASK_DEFS
from tests.e2e.test_kafka_fuzz_e2e import JSON, WEIRD_TEXT, deep
from tests.e2e.test_services_e2e import assert_all_completed_exactly, start_pipeline

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

MESSAGES = int(os.environ.get("FUZZ_VICTIM_MESSAGES", "300"))
VICTIMS = 8
VICTIM = {
    "name": "e2e_victim",
    "tasks": [
        {"name": "gate", "taskReferenceName": "gate", "type": "WAIT"},
        {"name": "e2e_add", "taskReferenceName": "add", "inputParameters": {"n": 1, "add": 2}},
        {"name": "gate2", "taskReferenceName": "gate2", "type": "WAIT"},
    ],
}
STATUSES = st.sampled_from(list(TaskStatus))
CHILD_STATUSES = st.sampled_from(["COMPLETED", "FAILED", "RUNNING", "nonsense"])
OUTPUTS = st.one_of(st.dictionaries(st.text(max_size=8), JSON, max_size=4), st.just({"deep": deep(60)}))


def envelope(model: type[Envelope], topic: str, **fields: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """`model` built from `fields` (camelCase, as on the wire) and its topic; None when the drawn
    fields fail the schema (the random-envelope fuzzer covers those)."""

    def build(values: dict[str, Any]) -> tuple[Envelope, str] | None:
        try:
            return model.model_validate(values), topic
        except ValidationError:
            return None

    ids = st.uuids().map(lambda u: f"fz-{u}")
    return st.fixed_dictionaries({"id": ids, **fields}).map(build)


def messages(victims: list[str], task_ids: list[str]) -> st.SearchStrategy[tuple[Envelope, str] | None]:
    """A well-formed envelope and the topic it goes to, aimed at the victims."""
    victim = st.sampled_from(victims)
    task_id = st.one_of(st.sampled_from(task_ids), st.uuids().map(str))
    ref = st.sampled_from(["gate", "gate2", "add", "nope"])
    other_id = st.uuids().map(lambda u: f"fz-{u}")
    seconds = st.integers(min_value=0, max_value=JAVA_INT_MAX)
    times = st.one_of(st.integers(min_value=0, max_value=MAX_TIME_MS), st.just(int(time.time() * 1000)))
    return st.one_of(
        envelope(TaskResult, "task_result", workflowInstanceId=victim, taskId=task_id, status=STATUSES,
                 outputData=OUTPUTS, callbackAfterSeconds=seconds, reasonForIncompletion=WEIRD_TEXT),
        envelope(Signal, "workflow_signal", workflowId=victim, taskRefName=ref, status=STATUSES,
                 output=OUTPUTS),
        envelope(TerminateWorkflow, "workflow_command", workflowId=victim, reason=WEIRD_TEXT),
        envelope(SubWorkflowEnded, "workflow_command", workflowId=victim, taskId=task_id,
                 subWorkflowId=other_id, status=CHILD_STATUSES, output=OUTPUTS),
        envelope(TimerFired, "timer_fired", workflowId=victim, timerId=st.one_of(other_id, task_id)),
        envelope(DecideRequest, "decide_request", workflowId=victim, staleBefore=times),
        envelope(StartWorkflow, "workflow_start", workflowId=victim,
                 name=st.sampled_from(["e2e_victim", "e2e_pipeline"]), input=OUTPUTS),
        envelope(TimerRequest, "timer_request", action=st.sampled_from(["arm", "cancel"]), workflowId=victim,
                 timerId=st.one_of(other_id, task_id), fireAt=times),
        envelope(TaskMessage, "tasks.e2e_add", taskId=task_id, taskType=st.just("e2e_add"),
                 taskDefName=st.just("e2e_add"), referenceTaskName=ref, workflowInstanceId=victim,
                 workflowType=st.just("e2e_victim"), inputData=st.just({"n": 1, "add": 1}),
                 pollCount=st.integers(0, 5)),
    )  # fmt: skip


def drawn(strategy: st.SearchStrategy[tuple[Envelope, str] | None], count: int) -> list[tuple[Envelope, str]]:
    found: list[tuple[Envelope, str]] = []

    @given(message=strategy)
    @settings(max_examples=count, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    def draw(message: tuple[Envelope, str] | None) -> None:
        if message is not None:
            found.append(message)

    draw()
    return found


def topic_of(cluster: Cluster, name: str) -> str:
    if name.startswith("tasks."):
        return cluster.topics.tasks(name.removeprefix("tasks."))
    return str(getattr(cluster.topics, name))


async def drive_to_the_end(cluster: Cluster, victims: list[str]) -> dict[str, Any]:
    """Signal whatever WAIT a running victim waits on until every victim has ended."""
    deadline = time.monotonic() + 120
    while True:
        documents = await cluster.store.load_workflows(victims)
        running = [d for d in documents.values() if not d.state.status.is_terminal]
        if not running:
            return documents
        assert time.monotonic() < deadline, f"victims wedged: {[d.workflow_id for d in running]}\n" + (
            cluster.diagnostics()
        )
        for document in running:
            for ref in ("gate", "gate2"):
                task = document.state.tasks.get(ref)
                if task is not None and task.status is TaskStatus.IN_PROGRESS:
                    await cluster.client.signal(document.workflow_id, ref, {"by": "driver"})
        await asyncio.sleep(1)


async def test_valid_envelopes_aimed_at_running_workflows_break_nothing(cluster: Cluster) -> None:
    await cluster.register(*TASK_DEFS, PIPELINE, VICTIM)
    prefix = cluster.topics.prefix
    victims = [
        await cluster.client.start_workflow("e2e_victim", {}, workflow_id=f"{prefix}v-{n}")
        for n in range(VICTIMS)
    ]

    def at_gate(document: Any) -> bool:
        task = document.state.tasks.get("gate")
        return task is not None and task.status is TaskStatus.IN_PROGRESS

    documents = await cluster.wait_for(victims, done=at_gate)
    task_ids = [t.task_id for d in documents.values() for t in d.state.tasks.values()]
    # The victims' later executions (add, gate2) have ids derived from the workflow: let some
    # victims reach them, so the fuzzer's results can hit live executions there too.
    for victim in victims[: VICTIMS // 2]:
        await cluster.client.signal(victim, "gate", {"by": "setup"})
    documents = await cluster.wait_for(victims[: VICTIMS // 2], done=lambda d: "gate2" in d.state.tasks)
    task_ids += [t.task_id for d in documents.values() for t in d.state.tasks.values()]

    fuzz = drawn(messages(victims, task_ids), MESSAGES)
    ids: list[str] = []
    started = time.monotonic()
    for n, (envelope, topic) in enumerate(fuzz):
        body = envelope.model_dump_json(by_alias=True).encode()
        key = getattr(envelope, "workflow_id", None) or getattr(envelope, "workflow_instance_id", None)
        await cluster.bus.publish([Outgoing(topic_of(cluster, topic), body, key=key)])
        if n % 10 == 0:
            ids.append(await start_pipeline(cluster, len(ids), name="beside-victims"))
    published_s = time.monotonic() - started
    await assert_all_completed_exactly(cluster, ids)

    down = [name for name, process in cluster.processes.items() if not process.alive()]
    assert not down, f"services died under fuzzing: {down}\n{cluster.diagnostics()}"
    documents = await cluster.store.load_workflows(victims)
    broken = {
        wid: invariant_violations(d.state) for wid, d in documents.items() if invariant_violations(d.state)
    }
    assert not broken, f"victims break invariants: {broken}"
    ended = await drive_to_the_end(cluster, victims)
    outcome = {status: sum(d.state.status is status for d in ended.values()) for status in WorkflowStatus}
    dead = await cluster.bus.peek(cluster.topics.dead_letter, 10_000)
    kinds = sorted({type(envelope).__name__ for envelope, _ in fuzz})
    print(
        f"\nvictim fuzz: {len(fuzz)} valid envelopes ({', '.join(kinds)}) at {VICTIMS} workflows in "
        f"{published_s:.1f} s; {len(ids)} pipelines beside them completed exactly; victims ended "
        f"{ {s.value: n for s, n in outcome.items() if n} }; {len(dead)} dead letters"
    )
    assert all(json.loads(letter.value).get("reason") for letter in dead)
