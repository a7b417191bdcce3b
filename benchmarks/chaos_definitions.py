"""The chaos soak's workflow mix (benchmarks/chaos.py), with each workflow's exact expected output.

Every output is a pure function of the workflow's input (and of the signal the harness sends,
itself a function of the input), never of how many attempts or deliveries it took: the harness
can then demand exact equality however the run was disturbed. Workers are in chaos_workers.py.

- pipeline: three plain steps (add → mul → fmt);
- flaky:    a step whose first attempt always fails, retried after 1 s (a retry timer);
- hang:     a step whose first attempt is reported IN_PROGRESS and then never answered, so
            responseTimeoutSeconds (3 s) times it out and it is retried (a deadline timer);
- wait:     a plain step, then a WAIT task the harness completes with a signal, then a step
            that reads the signal's payload.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

HANG_RESPONSE_TIMEOUT_S = 3
WAIT_REF = "approval"

TASK_DEFS: list[dict[str, Any]] = [
    # No retries for the plain steps: under chaos they must never fail, and if one did the
    # workflow would end FAILED and be counted as wrong, not be papered over by a retry.
    {"name": "chaos_add", "retryCount": 0},
    {"name": "chaos_mul", "retryCount": 0},
    {"name": "chaos_fmt", "retryCount": 0},
    {"name": "chaos_flaky", "retryCount": 2, "retryDelaySeconds": 1},
    {
        "name": "chaos_hang",
        "retryCount": 3,
        "retryDelaySeconds": 1,
        "responseTimeoutSeconds": HANG_RESPONSE_TIMEOUT_S,
        # >= responseTimeoutSeconds, as validation requires; long, and RETRY rather than the
        # default TIME_OUT_WF, so that a retry attempt delayed by an outage (a Kafka worker
        # reports no start, so this counts from dispatch) is retried, not the workflow failed.
        "timeoutSeconds": 60,
        "timeoutPolicy": "RETRY",
    },
]

PIPELINE = {
    "name": "chaos_pipeline",
    "tasks": [
        {
            "name": "chaos_add",
            "taskReferenceName": "add",
            "inputParameters": {"n": "${workflow.input.n}", "add": "${workflow.input.add}"},
        },
        {
            "name": "chaos_mul",
            "taskReferenceName": "mul",
            "inputParameters": {"n": "${add.output.n}", "by": 3},
        },
        {
            "name": "chaos_fmt",
            "taskReferenceName": "fmt",
            "inputParameters": {"n": "${mul.output.n}", "label": "wf-${workflow.input.label}"},
        },
    ],
    "outputParameters": {
        "result": "${fmt.output.text}",
        "sum": "${add.output.n}",
        "product": "${mul.output.n}",
    },
}
FLAKY = {
    "name": "chaos_flaky_flow",
    "tasks": [
        {
            "name": "chaos_flaky",
            "taskReferenceName": "flaky",
            "inputParameters": {"n": "${workflow.input.n}"},
        },
        {
            "name": "chaos_mul",
            "taskReferenceName": "mul",
            "inputParameters": {"n": "${flaky.output.n}", "by": 2},
        },
    ],
    "outputParameters": {"n": "${mul.output.n}"},
}
HANG = {
    "name": "chaos_hang_flow",
    "tasks": [
        {"name": "chaos_hang", "taskReferenceName": "hang", "inputParameters": {"n": "${workflow.input.n}"}},
        {
            "name": "chaos_fmt",
            "taskReferenceName": "fmt",
            "inputParameters": {"n": "${hang.output.n}", "label": "${workflow.input.label}"},
        },
    ],
    "outputParameters": {"text": "${fmt.output.text}"},
}
WAIT = {
    "name": "chaos_wait_flow",
    "tasks": [
        {
            "name": "chaos_add",
            "taskReferenceName": "add",
            "inputParameters": {"n": "${workflow.input.n}", "add": "${workflow.input.add}"},
        },
        {"name": "approve", "taskReferenceName": WAIT_REF, "type": "WAIT"},
        {
            "name": "chaos_fmt",
            "taskReferenceName": "fmt",
            "inputParameters": {"n": f"${{{WAIT_REF}.output.amount}}", "label": f"${{{WAIT_REF}.output.by}}"},
        },
    ],
    "outputParameters": {
        "text": "${fmt.output.text}",
        "approvedBy": f"${{{WAIT_REF}.output.by}}",
        "sum": "${add.output.n}",
    },
}


def signal_payload(i: int) -> dict[str, Any]:
    """What the harness signals to the WAIT task of wait workflow `i`."""
    return {"by": f"ann{i}", "amount": i * 7}


@dataclass(frozen=True)
class Flow:
    """One kind of workflow in the mix: its definition, its input and exact output for index
    `i`, and the task references that must each complete exactly once."""

    kind: str
    definition: dict[str, Any]
    make_input: Callable[[int], dict[str, Any]]
    expected_output: Callable[[int], dict[str, Any]]
    steps: tuple[str, ...]
    signalled: bool = False

    @property
    def name(self) -> str:
        return str(self.definition["name"])


FLOWS: dict[str, Flow] = {
    flow.kind: flow
    for flow in (
        Flow(
            "pipeline",
            PIPELINE,
            lambda i: {"n": i, "add": 2, "label": f"L{i}"},
            lambda i: {"result": f"wf-L{i}={(i + 2) * 3}", "sum": i + 2, "product": (i + 2) * 3},
            ("add", "mul", "fmt"),
        ),
        Flow("flaky", FLAKY, lambda i: {"n": i}, lambda i: {"n": (i + 1) * 2}, ("flaky", "mul")),
        Flow(
            "hang",
            HANG,
            lambda i: {"n": i, "label": f"H{i}"},
            lambda i: {"text": f"H{i}={i * 10}"},
            ("hang", "fmt"),
        ),
        Flow(
            "wait",
            WAIT,
            lambda i: {"n": i, "add": 2},
            lambda i: {"text": f"ann{i}={i * 7}", "approvedBy": f"ann{i}", "sum": i + 2},
            ("add", WAIT_REF, "fmt"),
            signalled=True,
        ),
    )
}
KINDS: tuple[str, ...] = tuple(FLOWS)


def kind_of(i: int) -> str:
    """Workflow `i`'s kind: round robin, so every stretch of the run has all four kinds."""
    return KINDS[i % len(KINDS)]
