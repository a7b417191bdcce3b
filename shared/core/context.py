"""The data `${...}` expressions read: `workflow` and one entry per task reference.

Built lazily: an expression names one or two references, so a decision in a workflow with a
thousand executions reads two of them instead of copying a thousand (Conductor builds the whole
map for every task it schedules). `ref` reads the latest execution of that node (inside a loop:
the current iteration, or the latest earlier one while this one has not run it yet; after the
loop: the last one); `ref__N` reads iteration N, from the execution
itself while it is current, else from its DO_WHILE's output, which keeps each iteration's
outputs (as Conductor's does, trimmed by keepLastN).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from shared.core.plan import Plan
from shared.core.refs import execution_ref, node_ref, scope_of
from shared.models.runtime import TaskState, WorkflowState


def workflow_entry(state: WorkflowState) -> dict[str, Any]:
    return {
        "workflowId": state.workflow_id,
        "workflowType": state.workflow_name,
        "version": state.workflow_version,
        "input": state.input,
        "output": state.output,
        "status": state.status.value,
        "variables": state.variables,
        "correlationId": state.correlation_id,
        "reasonForIncompletion": state.reason_for_incompletion,
        "parentWorkflowId": state.parent_workflow_id,
        "parentWorkflowTaskId": state.parent_workflow_task_id,
        "schemaVersion": 2,
        "createTime": state.create_time,
        "startTime": state.start_time,
    }


def task_entry(task: TaskState) -> dict[str, Any]:
    return {
        "input": task.input_data,
        "output": task.output_data,
        "status": task.status.value,
        "taskId": task.task_id,
        "taskType": task.task_type,
        "taskDefName": task.task_def_name,
        "referenceTaskName": task.reference_task_name,
        "retryCount": task.retry_count,
        "pollCount": task.dispatch_count,
        "iteration": task.iteration,
        "reasonForIncompletion": task.reason_for_incompletion,
        "workerId": task.worker_id,
        "callbackAfterSeconds": task.callback_after_seconds,
        "scheduledTime": task.scheduled_time,
        "startTime": task.start_time,
        "endTime": task.end_time,
        "workflowInstanceId": task.workflow_instance_id,
        "subWorkflowId": task.sub_workflow_id,
    }


def _member(data: dict[str, Any] | None, key: str) -> dict[str, Any] | None:
    found = data.get(key) if isinstance(data, dict) else None
    return found if isinstance(found, dict) else None


class ExpressionContext(Mapping[str, Any]):
    def __init__(self, state: WorkflowState, plan: Plan) -> None:
        self._state = state
        self._plan = plan

    def __getitem__(self, key: str) -> Any:
        if key == "workflow":
            return workflow_entry(self._state)
        node = node_ref(key)
        task = self._state.tasks.get(node)
        if task is not None and (key == node or task.reference_task_name == key):
            return task_entry(task)
        if key != node:
            output = self._iteration_output(node, key)
            if output is not None:
                return {"output": output, "referenceTaskName": key}
        elif task is None:
            latest = self._latest_iteration_output(node)
            if latest is not None:
                return {"output": latest}
        raise KeyError(key)

    def _latest_iteration_output(self, node: str) -> dict[str, Any] | None:
        """A loop body node not run yet in this iteration reads as its latest earlier one
        (Conductor resolves `ref` to the last execution in the task list)."""
        place = self._plan.place(node)
        loop = self._state.tasks.get(place.loops[-1]) if place and place.loops else None
        if loop is None:
            return None
        for key in sorted((k for k in loop.output_data if k.isdigit()), key=int, reverse=True):
            found = loop.output_data[key].get(node) if isinstance(loop.output_data[key], dict) else None
            if isinstance(found, dict):
                return found
        return None

    def _iteration_output(self, node: str, key: str) -> dict[str, Any] | None:
        """Iteration N's output of a loop body node, kept in its DO_WHILE's output; in nested
        loops (`x__2__1`) the inner loop's output is found in the outer loop's output for
        outer iteration 2, or in the inner loop's execution while outer iteration 2 runs."""
        place = self._plan.place(node)
        scope = scope_of(key)
        if place is None or not place.loops or len(scope) != len(place.loops):
            return None
        inner_ref = place.loops[-1]
        inner = self._state.tasks.get(inner_ref)
        if inner is not None and inner.reference_task_name == execution_ref(inner_ref, scope[:-1]):
            found = _member(_member(inner.output_data, str(scope[-1])), node)
            if found is not None:
                return found
        outermost = self._state.tasks.get(place.loops[0])
        data: dict[str, Any] | None = outermost.output_data if outermost is not None else None
        for depth, iteration in enumerate(scope):
            below = place.loops[depth + 1] if depth + 1 < len(place.loops) else node
            data = _member(_member(data, str(iteration)), below)
        return data

    def __iter__(self) -> Iterator[str]:
        yield "workflow"
        yield from self._state.tasks

    def __len__(self) -> int:
        return 1 + len(self._state.tasks)
