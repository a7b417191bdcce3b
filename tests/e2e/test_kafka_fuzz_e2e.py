"""Issue 12 point 8: a Hypothesis fuzzer publishes random and malformed envelopes to every inbound
Kafka topic of a running cluster (decider, scheduler, timer, system worker, SDK workers) while a
trickle of normal pipelines runs. Afterwards every service is still up, every pipeline completed
exactly (nothing stuck), and what could not be handled is in the dead-letter topic with a reason.

Hypothesis draws the messages (FUZZ_MESSAGES of them, 300 in CI): raw bytes, any JSON, and
envelopes of every message type with fields drawn from their types, wrong types and extremes
(huge and negative numbers, NaN, deep nesting, control characters, unknown workflow ids). The
property is checked over the whole run rather than per message, so there is no shrinking; a
failure names the services' logs."""

from __future__ import annotations

import json
import os
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.ports.bus import Outgoing
from tests.e2e.cluster import Cluster
from tests.e2e.definitions import PIPELINE, TASK_DEFS
from tests.e2e.test_services_e2e import assert_all_completed_exactly, start_pipeline

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

MESSAGES = int(os.environ.get("FUZZ_MESSAGES", "300"))
TYPES = [
    "start_workflow",
    "task_result",
    "signal",
    "terminate",
    "subworkflow_ended",
    "timer_fired",
    "decide_request",
    "task",
    "timer_request",
]
WEIRD_TEXT = st.one_of(
    st.text(max_size=30),
    st.sampled_from(
        ["", "..", "a/b", "x\x00y", "x\ny", "x" * 5000, "NaN", "${workflow.input}", "e2e_pipeline"]
    ),
)
NUMBERS = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, -1, 2**31, 2**63, 2**64, 253_402_300_800_000]),
    st.floats(allow_nan=True, allow_infinity=True),
)
LEAVES = st.one_of(st.none(), st.booleans(), NUMBERS, WEIRD_TEXT)
JSON = st.recursive(
    LEAVES,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)


def deep(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"a": value}
    return value


FIELD_VALUES = st.one_of(WEIRD_TEXT, NUMBERS, JSON, st.just(deep(300)))
ENVELOPES = st.builds(
    lambda kind, fields: {"type": kind, "v": 1, "id": "fuzz", **fields},
    st.sampled_from(TYPES),
    st.dictionaries(
        st.sampled_from(
            [
                "id",
                "v",
                "workflowId",
                "workflowInstanceId",
                "taskId",
                "status",
                "name",
                "version",
                "input",
                "outputData",
                "output",
                "taskRefName",
                "timerId",
                "action",
                "fireAt",
                "callbackAfterSeconds",
                "staleBefore",
                "inputData",
                "taskType",
                "workflowDef",
                "reason",
            ]
        ),
        FIELD_VALUES,
        max_size=8,
    ),
)


def encode(value: Any) -> bytes:
    return json.dumps(value, allow_nan=True, default=str).encode()


BODIES = st.one_of(st.binary(max_size=200), JSON.map(encode), ENVELOPES.map(encode))


def fuzzed_bodies(count: int) -> list[bytes]:
    drawn: list[bytes] = []

    @given(body=BODIES)
    @settings(max_examples=count, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    def draw(body: bytes) -> None:
        drawn.append(body)

    draw()
    return drawn


async def test_random_envelopes_on_every_inbound_topic_break_nothing(cluster: Cluster) -> None:
    topics = cluster.topics
    await cluster.register(*TASK_DEFS, PIPELINE)
    inbound = [
        *topics.decider_inbound,
        topics.task_dispatch,
        topics.timer_request,
        topics.tasks("HTTP"),
        *(topics.tasks(str(task_def["name"])) for task_def in TASK_DEFS),
    ]
    await cluster.bus.ensure_topics(inbound)
    bodies = fuzzed_bodies(MESSAGES)
    ids: list[str] = []
    started = time.monotonic()
    for n, body in enumerate(bodies):
        await cluster.bus.publish([Outgoing(inbound[n % len(inbound)], body, key=f"fuzz-{n % 7}")])
        if n % 10 == 0:
            ids.append(await start_pipeline(cluster, len(ids), name="fuzzed"))
    published_s = time.monotonic() - started
    await assert_all_completed_exactly(cluster, ids)
    dead = await cluster.bus.peek(topics.dead_letter, 10_000)
    down = [name for name, process in cluster.processes.items() if not process.alive()]
    assert not down, f"services died under fuzzing: {down}\n{cluster.diagnostics()}"
    reasons = [json.loads(letter.value)["reason"] for letter in dead]
    assert all(reasons), "a dead letter without a reason"
    print(
        f"\nKafka fuzz: {len(bodies)} messages on {len(inbound)} topics in {published_s:.1f} s, "
        f"{len(ids)} pipelines completed exactly, {len(dead)} dead letters"
    )
