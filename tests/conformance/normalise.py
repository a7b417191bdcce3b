"""What is compared between the two servers, and how a difference is shown.

`normalise` keeps, of `GET /api/workflow/{id}?includeTasks=true`, the workflow's status and
output and, for each task in list order, its referenceTaskName, taskType, status, iteration,
retryCount and outputData. Ids, times, worker ids and the rest of Conductor's bookkeeping are
dropped; a field whose value is an id (`subWorkflowId`, a START_WORKFLOW's `workflowId`, a
failure workflow's id under `conductor.failure_workflow`, or any string equal to an id of this
execution) is kept as `<id>`, so its presence is still compared. The run's name prefix is
replaced by `conf_` in keys and values, so names are comparable across runs.

`flatten_result` turns a normalised result into `{path: JSON text of a leaf}`. Tasks are keyed
by reference name (`#2`, `#3`... for a second or third execution of the same reference, i.e. a
retry), and their order is one leaf of its own, so a missing or extra task shows up as that task's
paths plus `taskOrder`, not as a shift of every later task (a task only one side has is the
single path `tasks[<key>]`, its whole normalised record the value). Paths look like `status`,
`output.join.left.echo.x`, `taskOrder`, `tasks[body__2].outputData.result`, `tasks[flaky#2].status`
or `output["conductor.failure_workflow"]`. Leaves are compared as JSON text, so `2` and `2.0`
differ (a client sees the difference), while the key order of an object does not matter (JSON
objects are unordered).
"""

from __future__ import annotations

import difflib
import json
import re
from typing import Any

ID = "<id>"
ID_KEYS = frozenset(
    {
        "subWorkflowId",
        "workflowId",
        "workflowInstanceId",
        "taskId",
        "parentWorkflowId",
        "parentWorkflowTaskId",
        "conductor.failure_workflow",
    }
)
TASK_FIELDS = ("referenceTaskName", "taskType", "status", "iteration", "retryCount", "outputData")
ABSENT = "<absent>"
_PLAIN_KEY = re.compile(r"^[A-Za-z0-9_]+$")


def execution_ids(execution: dict[str, Any]) -> set[str]:
    found = {execution.get("workflowId")}
    for task in execution.get("tasks") or []:
        found.update({task.get("taskId"), task.get("subWorkflowId")})
        output = task.get("outputData") or {}
        if isinstance(output.get("workflowId"), str):
            found.add(output["workflowId"])
    output = execution.get("output") or {}
    if isinstance(output.get("conductor.failure_workflow"), str):
        found.add(output["conductor.failure_workflow"])
    return {value for value in found if isinstance(value, str) and value}


def normalise(execution: dict[str, Any], prefix: str) -> dict[str, Any]:
    ids = execution_ids(execution)

    def clean(value: Any, key: str | None = None) -> Any:
        if isinstance(value, dict):
            return {k.replace(prefix, "conf_"): clean(v, k) for k, v in value.items()}
        if isinstance(value, list):
            return [clean(item) for item in value]
        if isinstance(value, str):
            if value and (key in ID_KEYS or value in ids):
                return ID
            return value.replace(prefix, "conf_")
        return value

    tasks = []
    for task in execution.get("tasks") or []:
        kept = {name: clean(task.get(name), name) for name in TASK_FIELDS}
        tasks.append(kept)
    result = {
        "status": execution.get("status"),
        "output": clean(execution.get("output") or {}),
        "tasks": tasks,
    }
    if "answers" in execution:  # what the operations' calls answered (operation_cases.py)
        result["answers"] = clean(execution["answers"])
    return result


def _key(key: str) -> str:
    return f".{key}" if _PLAIN_KEY.match(key) else f"[{json.dumps(key)}]"


def flatten(value: Any, path: str = "") -> dict[str, str]:
    if isinstance(value, dict) and value:
        flat: dict[str, str] = {}
        for key, item in value.items():
            flat.update(flatten(item, f"{path}{_key(str(key))}"))
        return flat
    if isinstance(value, list) and value:
        flat = {}
        for index, item in enumerate(value):
            flat.update(flatten(item, f"{path}[{index}]"))
        return flat
    return {path.lstrip("."): json.dumps(value, sort_keys=True)}


def task_keys(tasks: list[dict[str, Any]]) -> list[str]:
    """Each task's key: its reference name, with `#N` for the N-th execution of that reference."""
    seen: dict[str, int] = {}
    keys = []
    for task in tasks:
        ref = str(task.get("referenceTaskName"))
        seen[ref] = seen.get(ref, 0) + 1
        keys.append(ref if seen[ref] == 1 else f"{ref}#{seen[ref]}")
    return keys


def flatten_result(result: dict[str, Any]) -> dict[str, str]:
    flat = flatten({"status": result.get("status"), "output": result.get("output")})
    if "answers" in result:
        flat.update(flatten({"answers": result["answers"]}))
    tasks = result.get("tasks") or []
    keys = task_keys(tasks)
    flat["taskOrder"] = json.dumps(", ".join(keys))
    for key, task in zip(keys, tasks, strict=True):
        fields = {name: value for name, value in task.items() if name != "referenceTaskName"}
        for path, leaf in flatten(fields).items():
            flat[f"tasks[{key}].{path}"] = leaf
    return flat


def _tasks_by_key(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    tasks = result.get("tasks") or []
    return dict(zip(task_keys(tasks), tasks, strict=True))


def differing_paths(conductor: dict[str, Any], cairn: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """path -> (Conductor's value, Cairn's value), for every path whose leaf differs. A task only
    one side has is one path, `tasks[<key>]`, with that task as its value."""
    left, right = flatten_result(conductor), flatten_result(cairn)
    found: dict[str, tuple[str, str]] = {}
    left_tasks, right_tasks = _tasks_by_key(conductor), _tasks_by_key(cairn)
    for key in sorted(set(left_tasks) ^ set(right_tasks)):
        prefix = f"tasks[{key}]."
        for flat in (left, right):
            for path in [p for p in flat if p.startswith(prefix)]:
                del flat[path]
        a, b = (
            json.dumps(side[key], sort_keys=True) if key in side else ABSENT
            for side in (left_tasks, right_tasks)
        )
        found[f"tasks[{key}]"] = (a, b)
    for path in sorted(set(left) | set(right)):
        a, b = left.get(path, ABSENT), right.get(path, ABSENT)
        if a != b:
            found[path] = (a, b)
    return dict(sorted(found.items()))


def task_table(result: dict[str, Any]) -> str:
    rows = [
        f"  [{i}] {t['referenceTaskName']:<24} {t['taskType']!s:<20} {t['status']!s:<24} "
        f"it={t['iteration']} retry={t['retryCount']}"
        for i, t in enumerate(result.get("tasks", []))
    ]
    return "\n".join(rows) or "  (no tasks)"


def report(
    case: str,
    conductor: dict[str, Any],
    cairn: dict[str, Any],
    unexpected: dict[str, tuple[str, str]],
    fixed: list[str],
) -> str:
    """A readable failure message: what differs that is not listed, what is listed but no longer
    differs, both task lists side by side, and a unified diff of the two normalised results."""
    lines = [f"conformance case {case!r}: Conductor and Cairn differ other than listed"]
    if unexpected:
        lines.append("differences not in KNOWN_DIFFERENCES (path: Conductor | Cairn):")
        lines += [f"  {path}: {a} | {b}" for path, (a, b) in unexpected.items()]
    if fixed:
        lines.append("listed in KNOWN_DIFFERENCES but equal now (remove them from the entry):")
        lines += [f"  {path}" for path in fixed]
    lines += [
        f"Conductor: {conductor.get('status')}",
        task_table(conductor),
        f"Cairn: {cairn.get('status')}",
        task_table(cairn),
        "unified diff (--- Conductor, +++ Cairn):",
    ]
    a = json.dumps(conductor, indent=1, sort_keys=True).splitlines()
    b = json.dumps(cairn, indent=1, sort_keys=True).splitlines()
    lines += list(difflib.unified_diff(a, b, "conductor", "cairn", lineterm="", n=2))
    return "\n".join(lines)
