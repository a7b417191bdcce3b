"""Operator workflows the end-to-end tests run on both modes (workers in workers_operators.py)."""

from __future__ import annotations

from typing import Any

SHIP_CHILD: dict[str, Any] = {
    "name": "e2e_ship_child",
    "tasks": [
        {
            "name": "ship",
            "taskReferenceName": "ship",
            "inputParameters": {"orderId": "${workflow.input.orderId}", "carrier": "ups"},
        }
    ],
    "outputParameters": {"trackingId": "${ship.output.trackingId}"},
}
ROUNDS = 3
NESTED: dict[str, Any] = {
    "name": "e2e_nested",
    "description": "SWITCH inside FORK_JOIN inside DO_WHILE, with a SUB_WORKFLOW branch.",
    "tasks": [
        {
            "name": "fetch_order",
            "taskReferenceName": "fetch",
            "inputParameters": {"orderId": "${workflow.input.orderId}"},
        },
        {
            "name": "rounds",
            "taskReferenceName": "rounds",
            "type": "DO_WHILE",
            "loopCondition": f"$.rounds['iteration'] < {ROUNDS}",
            "loopOver": [
                {
                    "name": "split",
                    "taskReferenceName": "split",
                    "type": "FORK_JOIN",
                    "forkTasks": [
                        [
                            {
                                "name": "e2e_ship_child",
                                "taskReferenceName": "child",
                                "type": "SUB_WORKFLOW",
                                "subWorkflowParam": {"name": "e2e_ship_child"},
                                "inputParameters": {
                                    "orderId": "${fetch.output.orderId}-${rounds.output.iteration}"
                                },
                            }
                        ],
                        [
                            {
                                "name": "pick",
                                "taskReferenceName": "pick",
                                "type": "SWITCH",
                                "evaluatorType": "javascript",
                                "expression": "$.i % 2 == 1 ? 'odd' : 'even'",
                                "inputParameters": {"i": "${rounds.output.iteration}"},
                                "decisionCases": {
                                    "odd": [
                                        {
                                            "name": "slow_price",
                                            "taskReferenceName": "slow_odd",
                                            "inputParameters": {
                                                "sku": "book",
                                                "qty": "${rounds.output.iteration}",
                                            },
                                        }
                                    ],
                                    "even": [
                                        {
                                            "name": "slow_price",
                                            "taskReferenceName": "slow_even",
                                            "inputParameters": {
                                                "sku": "pen",
                                                "qty": "${rounds.output.iteration}",
                                            },
                                        }
                                    ],
                                },
                            },
                            {
                                "name": "price_item",
                                "taskReferenceName": "lamp",
                                "inputParameters": {"sku": "lamp", "qty": 1},
                            },
                        ],
                    ],
                },
                {"name": "join", "taskReferenceName": "merge", "type": "JOIN", "joinOn": ["child", "lamp"]},
                {
                    "name": "tally",
                    "taskReferenceName": "tally",
                    "type": "INLINE",
                    "inputParameters": {
                        "evaluatorType": "javascript",
                        "round": "${rounds.output.iteration}",
                        "merged": "${merge.output}",
                        # Inside a loop the JOIN's output is keyed by the iteration's refs, as
                        # in Conductor: child__1, lamp__1, ...
                        "expression": "({round: $.round, tracking: $.merged['child__' + $.round].trackingId, "
                        "lamp: $.merged['lamp__' + $.round].amount})",
                    },
                },
            ],
        },
        {
            "name": "summary",
            "taskReferenceName": "summary",
            "type": "JSON_JQ_TRANSFORM",
            "inputParameters": {
                "rounds": "${rounds.output}",
                "queryExpression": '[.rounds | to_entries[] | select(.key | test("^[0-9]+$")) '
                "| .value.tally.result] | sort_by(.round)",
            },
        },
    ],
    "outputParameters": {"rounds": "${rounds.output.iteration}", "tallies": "${summary.output.result}"},
}


def nested_output(order_id: str) -> dict[str, Any]:
    return {
        "rounds": ROUNDS,
        "tallies": [
            {"round": i, "tracking": f"ups-{order_id}-{i}", "lamp": 30.0} for i in range(1, ROUNDS + 1)
        ],
    }


LONG_LOOP_ITERATIONS = 10_000
LONG_LOOP: dict[str, Any] = {
    "name": "e2e_long_loop",
    "description": "10,000 iterations of a server-side body: bounded decisions, a bounded document.",
    "tasks": [
        {
            "name": "count",
            "taskReferenceName": "count",
            "type": "DO_WHILE",
            "loopCondition": f"$.count['iteration'] < {LONG_LOOP_ITERATIONS}",
            "inputParameters": {"keepLastN": 2},
            "loopOver": [
                {
                    "name": "inline",
                    "taskReferenceName": "step",
                    "type": "INLINE",
                    "inputParameters": {
                        "evaluatorType": "javascript",
                        "i": "${count.output.iteration}",
                        "expression": "$.i * 2",
                    },
                }
            ],
        }
    ],
    "outputParameters": {"iterations": "${count.output.iteration}", "last": "${step.output.result}"},
}
WIDE_FORK_BRANCHES = 1_000
WIDE_FORK: dict[str, Any] = {
    "name": "e2e_wide_fork",
    "description": "A 1,000-way dynamic fork of worker tasks, joined.",
    "tasks": [
        {
            "name": "inputs",
            "taskReferenceName": "inputs",
            "type": "INLINE",
            "inputParameters": {
                "evaluatorType": "javascript",
                "n": "${workflow.input.branches}",
                "expression": "Array.from({length: $.n}, (_, i) => ({n: i}))",
            },
        },
        {
            "name": "fan_out",
            "taskReferenceName": "fan_out",
            "type": "FORK_JOIN_DYNAMIC",
            "inputParameters": {"forkTaskName": "echo_branch", "forkTaskInputs": "${inputs.output.result}"},
        },
        {"name": "join", "taskReferenceName": "fan_in", "type": "JOIN"},
        {
            "name": "jq",
            "taskReferenceName": "total",
            "type": "JSON_JQ_TRANSFORM",
            "inputParameters": {"joined": "${fan_in.output}", "queryExpression": "[.joined[].doubled] | add"},
        },
    ],
    "outputParameters": {"total": "${total.output.result}"},
}


def wide_fork_total(branches: int) -> int:
    return sum(2 * i for i in range(branches))
