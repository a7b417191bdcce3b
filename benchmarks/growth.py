"""Does a decision's cost, or the document's size, grow with a workflow's history?

Drives the pure decision core (no store, no bus) through the two long shapes of issue 11 — a
10,000-iteration DO_WHILE of INLINE tasks and a 1,000-way dynamic fork of worker tasks — and
prints, at the start and at the end, the workflow document's size (the state as the stores write
it) and the time of one decision. CPU-bound and single-threaded: run it on a quiet machine.

    .venv/bin/python -m benchmarks.growth
"""

from __future__ import annotations

import json
import statistics
import time
from typing import Any

from shared.core import decide, new_workflow_state
from shared.core.decide import Decision
from shared.core.validation import parse_workflow_def
from shared.models.messages import DecideRequest, StartWorkflow, TaskMessage, TaskResult
from shared.models.runtime import TaskStatus
from tests.e2e.operator_flows import LONG_LOOP, WIDE_FORK

NOW = 1_800_000_000_000


def _size(decision: Decision) -> int:
    return len(decision.state.model_dump_json(by_alias=True))


def long_loop() -> dict[str, Any]:
    """Each decision runs the step budget (200 server-side tasks) and asks itself to go on."""
    definition = parse_workflow_def(LONG_LOOP)
    start = StartWorkflow(id="s", workflow_id="loop", name=definition.name)
    decision = decide(definition, new_workflow_state(definition, start, NOW), [start], NOW)
    rows: list[tuple[int, int, float]] = []
    while decision.state.status.value == "RUNNING":
        requests = [m for m in decision.outbox if isinstance(m, DecideRequest)]
        began = time.perf_counter()
        decision = decide(definition, decision.state, requests, NOW)
        rows.append((decision.state.tasks["count"].iteration, _size(decision), time.perf_counter() - began))
    first, last = rows[:5], rows[-5:]
    return {
        "decisions": len(rows),
        "iterations": decision.state.tasks["count"].iteration,
        "document_bytes_first": first[0][1],
        "document_bytes_last": last[-1][1],
        "decision_ms_first5_median": statistics.median(r[2] for r in first) * 1000,
        "decision_ms_last5_median": statistics.median(r[2] for r in last) * 1000,
    }


def wide_fork(branches: int = 1_000, per_decision: int = 50) -> dict[str, Any]:
    """Results arrive `per_decision` at a time, as a decider's batch takes them."""
    definition = parse_workflow_def(WIDE_FORK)
    start = StartWorkflow(id="s", workflow_id="fork", name=definition.name, input={"branches": branches})
    task_defs = {"echo_branch": None}
    state = new_workflow_state(definition, start, NOW)
    decision = decide(definition, state, [start], NOW, task_defs=task_defs)
    dispatched = [m for m in decision.outbox if isinstance(m, TaskMessage)]
    rows: list[tuple[int, float]] = []
    for offset in range(0, len(dispatched), per_decision):
        results = [
            TaskResult(
                id=f"r-{m.task_id}",
                workflow_instance_id="fork",
                task_id=m.task_id,
                status=TaskStatus.COMPLETED,
                output_data={"index": m.input_data["__index"], "doubled": 2 * m.input_data["n"]},
            )
            for m in dispatched[offset : offset + per_decision]
        ]
        began = time.perf_counter()
        decision = decide(definition, decision.state, results, NOW, task_defs=task_defs)
        rows.append((_size(decision), time.perf_counter() - began))
    return {
        "decisions": len(rows),
        "status": decision.state.status.value,
        "document_bytes_open": rows[0][0],
        "document_bytes_at_join": rows[-1][0],
        "decision_ms_first": rows[0][1] * 1000,
        "decision_ms_last": rows[-1][1] * 1000,
        "decision_ms_median": statistics.median(r[1] for r in rows) * 1000,
    }


if __name__ == "__main__":
    print(json.dumps({"long_loop": long_loop(), "wide_fork": wide_fork()}, indent=2))
