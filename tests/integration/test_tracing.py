"""One trace follows a workflow: start event -> decider -> scheduler -> worker -> back."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from cairn.client import CairnClient
from cairn.worker import WorkerRunner, WorkerSpec
from services.clock import now_ms
from services.decider.handler import DeciderHandler
from services.scheduler.handler import SchedulerHandler
from shared import telemetry
from shared.adapters.kafka_bus import KafkaBus
from shared.adapters.mongo_store import MongoStore
from shared.core.validation import parse_workflow_def
from shared.ports.bus import Received
from shared.topics import Topics

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def exporter() -> InMemorySpanExporter:
    memory = InMemorySpanExporter()
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = telemetry.install_tracer_provider("cairn-test")
    provider.add_span_processor(SimpleSpanProcessor(memory))
    return memory


async def test_trace_context_flows_from_start_event_to_worker_and_back(
    exporter: InMemorySpanExporter, kafka_bootstrap: str, mongo_store: MongoStore, topics: Topics
) -> None:
    await mongo_store.put_workflow_def(
        parse_workflow_def(
            {
                "name": "traced",
                "tasks": [
                    {
                        "name": "trace_me",
                        "taskReferenceName": "t",
                        "taskDefinition": {"name": "trace_me", "retryCount": 0},
                    }
                ],
            }
        )
    )
    buses = [KafkaBus(kafka_bootstrap, client_id=f"trace-{i}") for i in range(4)]
    decider_bus, scheduler_bus, worker_bus, probe_bus = buses
    await decider_bus.ensure_topics([*topics.fixed, topics.tasks("trace_me")])
    decider = DeciderHandler(mongo_store, decider_bus, topics, now_ms)
    decider_bus.subscribe(topics.decider_inbound, "decider", decider.handle_batch)
    scheduler_bus.subscribe(
        [topics.task_dispatch], "scheduler", SchedulerHandler(scheduler_bus, topics).handle_batch
    )

    def work(task_input: dict[str, Any]) -> dict[str, Any]:
        return {"ok": True}

    WorkerRunner(worker_bus, topics, [WorkerSpec("trace_me", work)]).attach()
    task_headers: list[dict[str, str]] = []

    async def probe(batch: Sequence[Received]) -> None:
        task_headers.extend(m.headers for m in batch)

    probe_bus.subscribe([topics.tasks("trace_me")], "probe", probe)
    for bus in buses:
        await bus.start()
    try:
        tracer = trace.get_tracer("test")
        with tracer.start_as_current_span("user request") as root:
            trace_id = root.get_span_context().trace_id
            workflow_id = await CairnClient(decider_bus, topics).start_workflow(
                "traced", {}, workflow_id=f"{topics.prefix}w"
            )
        for _ in range(600):
            document = await mongo_store.load_workflow(workflow_id)
            if document is not None and document.state.status.is_terminal and task_headers:
                break
            await asyncio.sleep(0.1)
        assert document is not None and document.state.status.value == "COMPLETED"
    finally:
        for bus in buses:
            await bus.stop()

    # The task message workers receive carries the start event's trace.
    assert task_headers, "no task message seen"
    assert task_headers[0]["traceparent"].split("-")[1] == f"{trace_id:032x}"
    spans = exporter.get_finished_spans()
    in_trace = [s for s in spans if s.context.trace_id == trace_id]
    names = {s.name for s in in_trace}
    assert {"cairn.decide", "cairn.worker trace_me"} <= names, names
    assert "cairn.schedule" not in names, "a dispatch goes from the decider's outbox to the workers' topic"
    decides = [s for s in in_trace if s.name == "cairn.decide"]
    assert all(s.attributes["cairn.workflow_id"] == workflow_id for s in decides)
    # The worker's result brought the trace back: the decision on it is in the same trace.
    assert len(decides) >= 2
    worker_span = next(s for s in in_trace if s.name == "cairn.worker trace_me")
    assert worker_span.attributes["cairn.task_id"] == document.state.tasks["t"].task_id
