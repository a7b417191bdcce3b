"""`cairn status` for nested workflows: executions as a tree that follows the definition —
a SWITCH's case under the SWITCH, fork branches under the FORK, each DO_WHILE iteration as
its own branch — built from Conductor's Workflow JSON alone (the api's or the store's)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from typing import Any

from rich.tree import Tree

_SUFFIX = re.compile(r"(?:__\d+)+$")


def _base(reference: str) -> str:
    return _SUFFIX.sub("", reference)


def _scope(reference: str) -> tuple[int, ...]:
    suffix = _SUFFIX.search(reference)
    return tuple(int(p) for p in suffix.group(0).split("__") if p) if suffix else ()


def parents_of(definition: dict[str, Any] | None) -> dict[str, str]:
    """Task reference -> the reference of the operator whose list holds it."""
    parents: dict[str, str] = {}

    def walk(tasks: Iterable[dict[str, Any]], owner: str | None) -> None:
        for task in tasks:
            ref = task.get("taskReferenceName", "")
            if owner is not None:
                parents[ref] = owner
            for case in (task.get("decisionCases") or {}).values():
                walk(case, ref)
            walk(task.get("defaultCase") or [], ref)
            for branch in task.get("forkTasks") or []:
                walk(branch, ref)
            walk(task.get("loopOver") or [], ref)

    walk((definition or {}).get("tasks") or [], None)
    return parents


def is_nested(workflow: dict[str, Any]) -> bool:
    return bool(parents_of(workflow.get("workflowDefinition"))) or any(
        task.get("taskType") == "FORK" for task in workflow.get("tasks", [])
    )


def task_tree(workflow: dict[str, Any], header: str, label: Callable[[dict[str, Any]], str]) -> Tree:
    """The executions of `workflow` as a rich Tree under `header`, each line from `label`."""
    parents = parents_of(workflow.get("workflowDefinition"))
    tasks = sorted(workflow.get("tasks", []), key=lambda t: t.get("seq", 0))
    for task in tasks:  # dynamic fork branches hang under their fork
        for forked in (task.get("inputData") or {}).get("forkedTasks") or []:
            parents.setdefault(forked, _base(task["referenceTaskName"]))
    root = Tree(header)
    branches: list[tuple[dict[str, Any], Tree]] = []
    iterations: dict[tuple[int, int], Tree] = {}
    for task in tasks:
        reference = task["referenceTaskName"]
        owner = parents.get(_base(reference))
        parent = _latest(branches, owner, _scope(reference), task.get("seq", 0)) if owner else None
        if parent is None:
            where = root
        else:
            owner_task, where = parent
            if owner_task.get("taskType") == "DO_WHILE":
                iteration = task.get("iteration", 0)
                key = (id(owner_task), iteration)
                if key not in iterations:
                    iterations[key] = where.add(f"[dim]iteration {iteration}[/]")
                where = iterations[key]
        branches.append((task, where.add(label(task))))
    return root


def _latest(
    branches: list[tuple[dict[str, Any], Tree]], owner: str, scope: tuple[int, ...], seq: int
) -> tuple[dict[str, Any], Tree] | None:
    """The execution of `owner` this one belongs to: the latest earlier one in an enclosing scope."""
    for task, branch in reversed(branches):
        reference = task["referenceTaskName"]
        if _base(reference) != owner or task.get("seq", 0) > seq:
            continue
        owner_scope = _scope(reference)
        if scope[: len(owner_scope)] == owner_scope:
            return task, branch
    return None


def line(task: dict[str, Any], styled: Callable[[str], str]) -> str:
    attempt = f" attempt {task['retryCount']}" if task.get("retryCount") else ""
    output = json.dumps(task.get("outputData") or {})
    output = output if len(output) <= 60 else output[:59] + "…"
    return (
        f"[dim]{task.get('seq')}[/] [bold]{task['referenceTaskName']}[/] {task['taskType']} "
        f"{styled(task['status'])}{attempt}  {output}"
    )
