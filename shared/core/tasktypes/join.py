"""JOIN: wait until the tasks named in `joinOn` are done, then output {ref: output}.

Conductor's rules: a joined task that failed for good — not optional, and either not permissive
or permissive with every joined task finished — fails the JOIN with the joined reasons; an
optional task that completed with errors makes it COMPLETED_WITH_ERRORS; refs with an empty
output are left out of the output; an empty `joinOn` completes at once. After a dynamic fork,
`joinOn` is the forked references (the fork records them); inside a loop each reference is the
current iteration's. A JOIN is never retried (a Conductor built-in).
"""

from __future__ import annotations

from typing import Any

from shared.core.refs import Scope, execution_ref
from shared.core.tasktypes.base import BaseTaskType, Engine, Problems, in_progress
from shared.models.definitions import WorkflowTask
from shared.models.runtime import TaskState, TaskStatus


def join_on(engine: Engine, node: WorkflowTask) -> list[str]:
    fork = engine.previous_sibling(node.task_reference_name)
    if fork is not None and fork.type == "FORK_JOIN_DYNAMIC":
        return list(engine.dynamic_refs(fork.task_reference_name))
    return list(node.join_on)


class JoinTask(BaseTaskType):
    name = "JOIN"
    retriable = False
    server_side = True

    def start(self, engine: Engine, node: WorkflowTask, task: TaskState, scope: Scope) -> None:
        task.task_def_name = self.name
        refs = join_on(engine, node)
        if node.type == "JOIN":
            task.input_data = {**task.input_data, "joinOn": [execution_ref(ref, scope) for ref in refs]}
        # Looked at from the next pass on, as Conductor's JOIN is evaluated after it was created:
        # a TERMINATE among the fork's heads ends the workflow before the JOIN collects anything.
        in_progress(engine, task)

    def advance(self, engine: Engine, node: WorkflowTask, task: TaskState, scope: Scope) -> bool:
        if task.status.is_terminal:
            return task.status.is_successful
        joined = [(ref, engine.current(ref, scope)) for ref in join_on(engine, node)]
        all_done = all(t is not None and t.status.is_terminal for _, t in joined)
        output: dict[str, Any] = {}
        failures: list[str] = []
        with_errors: list[str] = []
        for ref, joined_task in joined:
            if joined_task is None:
                continue
            if joined_task.output_data:
                output[joined_task.reference_task_name] = joined_task.output_data
            joined_node = engine.node_of(joined_task)
            status = joined_task.status
            if status.is_terminal and not status.is_successful and not joined_node.optional:
                if not joined_node.permissive or all_done:
                    failures.append(joined_task.reason_for_incompletion or f"{ref} {status.value}")
            if status is TaskStatus.COMPLETED_WITH_ERRORS:
                with_errors.append(f"{joined_task.task_def_name}/{joined_task.task_id}")
        task.output_data = output
        if failures:
            engine.fail(task, TaskStatus.FAILED, " ".join(failures))
            return False
        if not all_done:
            return False
        if with_errors:
            engine.finish(
                task, TaskStatus.COMPLETED_WITH_ERRORS, f"{', '.join(with_errors)} completed with errors"
            )
        else:
            engine.complete(task)
        return True

    def problems(self, node: WorkflowTask, path: str) -> Problems:
        return []


class ExclusiveJoinTask(BaseTaskType):
    """EXCLUSIVE_JOIN, after a SWITCH: done when the first of `joinOn` that ran (not SKIPPED)
    finished — or, when none did, the first of `defaultExclusiveJoinTask` — and its output is
    that task's whole output."""

    name = "EXCLUSIVE_JOIN"
    retriable = False
    server_side = True

    def start(self, engine: Engine, node: WorkflowTask, task: TaskState, scope: Scope) -> None:
        task.task_def_name = self.name
        task.input_data = {
            **task.input_data,
            "joinOn": list(node.join_on),
            "defaultExclusiveJoinTask": list(node.default_exclusive_join_task),
        }
        in_progress(engine, task)
        self.advance(engine, node, task, scope)

    def _first_ran(self, engine: Engine, refs: list[str], scope: Scope) -> TaskState | None:
        for ref in refs:
            candidate = engine.current(ref, scope)
            if candidate is not None and candidate.status is not TaskStatus.SKIPPED:
                return candidate
        return None

    def advance(self, engine: Engine, node: WorkflowTask, task: TaskState, scope: Scope) -> bool:
        if task.status.is_terminal:
            return task.status.is_successful
        chosen = self._first_ran(engine, node.join_on, scope)
        if chosen is None or not chosen.status.is_terminal:
            fallback = self._first_ran(engine, node.default_exclusive_join_task, scope)
            if fallback is not None and fallback.status.is_terminal:
                chosen = fallback
        if chosen is None or not chosen.status.is_terminal:
            return False
        task.output_data = dict(chosen.output_data)
        if not chosen.status.is_successful:
            engine.fail(task, TaskStatus.FAILED, chosen.reason_for_incompletion or "joined task failed")
            return False
        engine.complete(task)
        return True

    def problems(self, node: WorkflowTask, path: str) -> Problems:
        if not node.join_on:
            return [(f"{path}.joinOn", "an EXCLUSIVE_JOIN needs the tasks it joins")]
        return []
