"""Builders for pure-core tests: definitions, starts and results without any I/O."""

from typing import Any

from shared.core import decide, new_workflow_state
from shared.core.decide import Decision
from shared.models.definitions import WorkflowDef
from shared.models.messages import StartWorkflow, TaskMessage, TaskResult
from shared.models.runtime import TaskStatus, WorkflowState

NOW = 1_700_000_000_000


def three_step_def(**task_def: Any) -> WorkflowDef:
    td = {"name": "t", "retryCount": 0, "retryDelaySeconds": 0, **task_def}
    return WorkflowDef.model_validate(
        {
            "name": "pipeline",
            "version": 1,
            "tasks": [
                {
                    "name": "t",
                    "taskReferenceName": "a",
                    "inputParameters": {"n": "${workflow.input.n}"},
                    "taskDefinition": {**td, "name": "t"},
                },
                {
                    "name": "t",
                    "taskReferenceName": "b",
                    "inputParameters": {"n": "${a.output.n}", "label": "b-${a.output.n}"},
                    "taskDefinition": {**td, "name": "t"},
                },
                {
                    "name": "t",
                    "taskReferenceName": "c",
                    "inputParameters": {"n": "${b.output.n}"},
                    "taskDefinition": {**td, "name": "t"},
                },
            ],
            "outputParameters": {"result": "${c.output.n}", "first": "${a.output.n}"},
        }
    )


def start(definition: WorkflowDef, input_: dict[str, Any] | None = None, wf_id: str = "wf-1") -> Decision:
    message = StartWorkflow(id="m-start", workflow_id=wf_id, name=definition.name, input=input_ or {})
    state = new_workflow_state(definition, message, NOW)
    return decide(definition, state, [message], NOW)


def dispatched(decision: Decision) -> list[TaskMessage]:
    return [m for m in decision.outbox if isinstance(m, TaskMessage)]


def result(
    state: WorkflowState, ref: str, status: TaskStatus = TaskStatus.COMPLETED, **kw: Any
) -> TaskResult:
    task = state.tasks[ref]
    return TaskResult(
        id=f"r-{task.task_id}-{status}",
        workflow_instance_id=state.workflow_id,
        task_id=task.task_id,
        status=status,
        **kw,
    )
