"""`cairn status` draws nested operators as a tree (cairn/tree.py), from Conductor's Workflow JSON."""

from rich.console import Console

from cairn.tree import is_nested, line, task_tree


def _task(seq: int, ref: str, task_type: str, iteration: int = 0, **extra: object) -> dict[str, object]:
    return {
        "seq": seq,
        "referenceTaskName": ref,
        "taskType": task_type,
        "status": "COMPLETED",
        "iteration": iteration,
        **extra,
    }


WORKFLOW = {
    "workflowDefinition": {
        "tasks": [
            {"taskReferenceName": "fetch"},
            {
                "taskReferenceName": "loop",
                "loopOver": [
                    {"taskReferenceName": "think"},
                    {
                        "taskReferenceName": "choose",
                        "decisionCases": {"search": [{"taskReferenceName": "act"}]},
                    },
                ],
            },
            {"taskReferenceName": "fan", "type": "FORK_JOIN_DYNAMIC"},
            {"taskReferenceName": "join"},
        ]
    },
    "tasks": [
        _task(1, "fetch", "fetch_order"),
        _task(2, "loop", "DO_WHILE", 2),
        _task(3, "think__1", "think", 1),
        _task(4, "choose__1", "SWITCH", 1),
        _task(5, "act__1", "search_tool", 1),
        _task(6, "think__2", "think", 2, retryCount=1),
        _task(7, "choose__2", "SWITCH", 2),
        _task(8, "fan", "FORK", inputData={"forkedTasks": ["_p_0", "_p_1"]}),
        _task(9, "_p_0", "price_item"),
        _task(10, "_p_1", "price_item"),
        _task(11, "join", "JOIN"),
    ],
}


def render(workflow: dict[str, object]) -> str:
    console = Console(width=120, record=True, color_system=None)
    console.print(task_tree(workflow, "tasks", lambda task: line(task, str)))
    return console.export_text()


def test_loop_iterations_cases_and_forked_branches_nest_under_their_operator() -> None:
    text = render(WORKFLOW)
    assert text.splitlines() == [
        "tasks",
        "├── 1 fetch fetch_order COMPLETED  {}",
        "├── 2 loop DO_WHILE COMPLETED  {}",
        "│   ├── iteration 1",
        "│   │   ├── 3 think__1 think COMPLETED  {}",
        "│   │   └── 4 choose__1 SWITCH COMPLETED  {}",
        "│   │       └── 5 act__1 search_tool COMPLETED  {}",
        "│   └── iteration 2",
        "│       ├── 6 think__2 think COMPLETED attempt 1  {}",
        "│       └── 7 choose__2 SWITCH COMPLETED  {}",
        "├── 8 fan FORK COMPLETED  {}",
        "│   ├── 9 _p_0 price_item COMPLETED  {}",
        "│   └── 10 _p_1 price_item COMPLETED  {}",
        "└── 11 join JOIN COMPLETED  {}",
    ]


def test_a_flat_workflow_keeps_the_table() -> None:
    flat = {"workflowDefinition": {"tasks": [{"taskReferenceName": "a"}]}, "tasks": [_task(1, "a", "t")]}
    assert not is_nested(flat) and is_nested(WORKFLOW)
