"""Definitions the end-to-end tests run (workers in tests/e2e/workers_e2e.py)."""

from __future__ import annotations

from typing import Any

PIPELINE = {
    "name": "e2e_pipeline",
    "version": 1,
    "tasks": [
        {
            "name": "e2e_add",
            "taskReferenceName": "add",
            "inputParameters": {"n": "${workflow.input.n}", "add": "${workflow.input.add}"},
        },
        {"name": "e2e_mul", "taskReferenceName": "mul", "inputParameters": {"n": "${add.output.n}", "by": 3}},
        {
            "name": "e2e_fmt",
            "taskReferenceName": "fmt",
            "inputParameters": {"n": "${mul.output.n}", "label": "wf-${workflow.input.label}"},
        },
    ],
    "outputParameters": {
        "result": "${fmt.output.text}",
        "sum": "${add.output.n}",
        "product": "${mul.output.n}",
        "id": "${workflow.workflowId}",
    },
}
FLAKY = {
    "name": "e2e_flaky_pipeline",
    "tasks": [
        {"name": "e2e_flaky", "taskReferenceName": "flaky", "inputParameters": {"n": "${workflow.input.n}"}},
        {
            "name": "e2e_mul",
            "taskReferenceName": "mul",
            "inputParameters": {"n": "${flaky.output.n}", "by": 2},
        },
    ],
    "outputParameters": {"n": "${mul.output.n}", "attempt": "${flaky.output.attempt}"},
}
TASK_DEFS = [
    {"name": "e2e_add", "retryCount": 0},
    {"name": "e2e_mul", "retryCount": 0},
    {"name": "e2e_fmt", "retryCount": 0},
    {"name": "e2e_flaky", "retryCount": 2, "retryDelaySeconds": 3},
]


def expected_output(i: int, workflow_id: str) -> dict[str, Any]:
    total = i + 2
    return {"result": f"wf-L{i}={total * 3}", "sum": total, "product": total * 3, "id": workflow_id}
