"""SUB_WORKFLOW: run another workflow as one task; START_WORKFLOW: start one and go on.

SUB_WORKFLOW (Conductor's SubWorkflow): `subWorkflowParam` names the child's definition (name and
version — the decider fixes a missing version to the latest when the parent starts — or an
inline `workflowDefinition`); the task's resolved inputParameters are the child's input. The
child's id derives from the task execution, so a redelivered decision starts it once and a retry
starts a new one; it carries parentWorkflowId / parentWorkflowTaskId and the parent's
correlationId. The task is IN_PROGRESS with output `subWorkflowId` until the child ends; the
child's decision then tells the parent (SubWorkflowEnded). Child COMPLETED -> COMPLETED, FAILED ->
FAILED, TIMED_OUT -> TIMED_OUT, TERMINATED -> CANCELED, with the child's output merged into the
task's. Cancelling the task (the parent ended) terminates the child.

START_WORKFLOW: `inputParameters.startWorkflow` is a StartWorkflowRequest (name, version, input,
correlationId, workflowDef); the workflow is started fire-and-forget (no parent link) and the
task COMPLETED with output `workflowId`.
"""

from __future__ import annotations

from typing import Any

from shared.core import ids
from shared.core.refs import Scope
from shared.core.tasktypes.base import BaseTaskType, Engine, Problems, in_progress
from shared.models.definitions import WorkflowTask
from shared.models.messages import StartWorkflow, SubWorkflowEnded, TerminateWorkflow
from shared.models.runtime import TaskState, TaskStatus

CHILD_STATUS_TO_TASK = {
    "COMPLETED": TaskStatus.COMPLETED,
    "FAILED": TaskStatus.FAILED,
    "TIMED_OUT": TaskStatus.TIMED_OUT,
    "TERMINATED": TaskStatus.CANCELED,
}


def _inline_definition(engine: Engine, value: Any) -> dict[str, Any] | None:
    if isinstance(value, str):
        value = engine.evaluate({"definition": value})["definition"]
    return dict(value) if isinstance(value, dict) else None


class SubWorkflowTask(BaseTaskType):
    name = "SUB_WORKFLOW"
    retriable = True

    def start(self, engine: Engine, node: WorkflowTask, task: TaskState, scope: Scope) -> None:
        params = node.sub_workflow_param
        assert params is not None  # validation refuses a SUB_WORKFLOW without it
        extra = params.model_extra or {}
        inline = _inline_definition(engine, extra.get("workflowDefinition"))
        resolved = engine.evaluate({"name": params.name or ""})
        name = str((inline or {}).get("name") or resolved["name"])
        version = params.version if inline is None else (inline or {}).get("version")
        # The child's input is the resolved inputParameters (a retry's task input also holds the
        # previous attempt's subWorkflow* keys).
        workflow_input = engine.evaluate(node.input_parameters)
        task.input_data = {
            "subWorkflowName": name,
            "subWorkflowVersion": version,
            "subWorkflowTaskToDomain": None,
            "subWorkflowDefinition": inline,
            "priority": extra.get("priority"),
            "workflowInput": workflow_input,
        }
        child_id = ids.child_workflow_id(task.task_id)
        engine.publish(
            StartWorkflow(
                id=f"start:{child_id}",
                workflow_id=child_id,
                name=name,
                version=version if isinstance(version, int) and version >= 1 else None,
                input=workflow_input,
                correlation_id=engine.state.correlation_id,
                workflow_def=inline,
                parent_workflow_id=engine.state.workflow_id,
                parent_workflow_task_id=task.task_id,
            )
        )
        task.sub_workflow_id = child_id
        task.output_data = {"subWorkflowId": child_id}
        in_progress(engine, task)

    def on_cancel(self, engine: Engine, node: WorkflowTask, task: TaskState) -> None:
        if task.sub_workflow_id:
            engine.publish(
                TerminateWorkflow(
                    id=f"terminate:{task.sub_workflow_id}:parent:{engine.state.epoch}",
                    workflow_id=task.sub_workflow_id,
                    reason=f"Parent workflow has been terminated with status {engine.state.status}",
                )
            )

    def problems(self, node: WorkflowTask, path: str) -> Problems:
        params = node.sub_workflow_param
        if params is None:
            return [(f"{path}.subWorkflowParam", "required: the name (and version) of the workflow to run")]
        extra = params.model_extra or {}
        if not params.name and not extra.get("workflowDefinition"):
            return [(f"{path}.subWorkflowParam.name", "required (or an inline workflowDefinition)")]
        unknown = sorted(set(extra) - {"workflowDefinition", "priority", "taskToDomain"})
        found: Problems = [
            (f"{path}.subWorkflowParam.{key}", "unknown field (not a Conductor field Cairn knows)")
            for key in unknown
        ]
        inline = extra.get("workflowDefinition")
        if isinstance(inline, dict):  # checked now, not when the child would start
            from shared.core.validation import DefinitionError, parse_workflow_def

            try:
                parse_workflow_def(inline)
            except DefinitionError as error:
                where = f"{path}.subWorkflowParam.workflowDefinition"
                found += [(f"{where}.{inner}", text) for inner, text in error.problems]
        return found


def on_child_ended(engine: Engine, task: TaskState, ended: SubWorkflowEnded) -> None:
    """The child of a SUB_WORKFLOW task ended: finish the task as Conductor maps the status."""
    if ended.sub_workflow_id != task.sub_workflow_id:
        engine.reject(
            "subworkflow_result_ignored",
            f"end of sub-workflow {ended.sub_workflow_id} ignored: task {task.task_id} runs "
            f"{task.sub_workflow_id}",
        )
        return
    status = CHILD_STATUS_TO_TASK.get(ended.status, TaskStatus.FAILED)
    task.output_data = {**task.output_data, **ended.output}
    if status is TaskStatus.COMPLETED:
        engine.complete(task)
        return
    engine.fail(task, status, f"Sub workflow {ended.sub_workflow_id} failure reason: {ended.reason}")


class StartWorkflowTask(BaseTaskType):
    name = "START_WORKFLOW"
    retriable = True
    server_side = True

    def start(self, engine: Engine, node: WorkflowTask, task: TaskState, scope: Scope) -> None:
        request = task.input_data.get("startWorkflow")
        if not isinstance(request, dict) or not request.get("name"):
            engine.fail(task, TaskStatus.FAILED, "Missing 'startWorkflow' in input data.")
            return
        version = request.get("version")
        given_input = request.get("input")
        workflow_id = ids.started_workflow_id(task.task_id)
        engine.publish(
            StartWorkflow(
                id=f"start:{workflow_id}",
                workflow_id=workflow_id,
                name=str(request["name"]),
                version=version if isinstance(version, int) and version >= 1 else None,
                input=given_input if isinstance(given_input, dict) else {},
                correlation_id=request.get("correlationId") or engine.state.correlation_id,
                workflow_def=request.get("workflowDef")
                if isinstance(request.get("workflowDef"), dict)
                else None,
            )
        )
        engine.complete(task, {"workflowId": workflow_id})

    def problems(self, node: WorkflowTask, path: str) -> Problems:
        request = node.input_parameters.get("startWorkflow")
        if request is None:
            return [
                (
                    f"{path}.inputParameters.startWorkflow",
                    "required: a StartWorkflowRequest (name, input, ...)",
                )
            ]
        if isinstance(request, dict) and not request.get("name"):
            return [(f"{path}.inputParameters.startWorkflow.name", "required")]
        return []
