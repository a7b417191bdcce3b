"""TERMINATE: end the workflow now with `terminationStatus` (COMPLETED, FAILED or TERMINATED).

As Conductor: the task's output is `workflowOutput` spread flat when it is a map (`{output: v}`
otherwise), and becomes the workflow's output (outputParameters are not used); the workflow's
reason is `terminationReason`; other live tasks are cancelled; FAILED and TERMINATED start the
failureWorkflow. The status must be written literally, so registration can check it.
"""

from __future__ import annotations

from shared.core.refs import Scope
from shared.core.tasktypes.base import BaseTaskType, Engine, Problems
from shared.models.definitions import WorkflowTask
from shared.models.runtime import TaskState, TaskStatus, WorkflowStatus

TERMINATION_STATUSES = ("COMPLETED", "FAILED", "TERMINATED")


class TerminateTask(BaseTaskType):
    name = "TERMINATE"
    retriable = False
    server_side = True

    def start(self, engine: Engine, node: WorkflowTask, task: TaskState, scope: Scope) -> None:
        status = task.input_data.get("terminationStatus")
        if status not in TERMINATION_STATUSES:
            engine.fail(task, TaskStatus.FAILED, "given termination status is not valid")
            return
        output = task.input_data.get("workflowOutput")
        task.output_data = (
            dict(output) if isinstance(output, dict) else {} if output is None else {"output": output}
        )
        engine.complete(task)

    def advance(self, engine: Engine, node: WorkflowTask, task: TaskState, scope: Scope) -> bool:
        """The workflow ends in the pass after the TERMINATE completed, as in Conductor, where a
        fork's other branch heads and its JOIN are created before the TERMINATE runs (and are
        then cancelled)."""
        status = str(task.input_data.get("terminationStatus"))
        reason = task.input_data.get("terminationReason")
        engine.state.output = dict(task.output_data)
        engine.end_workflow(
            WorkflowStatus(status),
            str(reason) if reason else f"Workflow is {status} by TERMINATE task: {task.task_id}",
        )
        return False

    def problems(self, node: WorkflowTask, path: str) -> Problems:
        found: Problems = []
        status = node.input_parameters.get("terminationStatus")
        if status not in TERMINATION_STATUSES:
            found.append(
                (
                    f"{path}.inputParameters.terminationStatus",
                    f"must be written as one of {', '.join(TERMINATION_STATUSES)} (got {status!r})",
                )
            )
        if node.optional:
            found.append((f"{path}.optional", "a TERMINATE task cannot be optional"))
        return found
