"""Code-first workflows on Cairn with Dapr Workflow's Python API (docs/code-workflows.md).

A module written for Dapr runs here with `import dapr.ext.workflow as wf` changed to
`import cairn.workflow as wf`: the same names, the same calls, the same semantics, replayed by
Cairn's engine from a history Cairn keeps.
"""

from cairn.workflow._context import DaprWorkflowContext, WorkflowActivityContext
from cairn.workflow._tasks import (
    FailureDetails,
    NonDeterminismError,
    Task,
    TaskFailedError,
    when_all,
    when_any,
)
from cairn.workflow.retry_policy import RetryPolicy

__all__ = [
    "DaprWorkflowContext",
    "FailureDetails",
    "NonDeterminismError",
    "RetryPolicy",
    "Task",
    "TaskFailedError",
    "WorkflowActivityContext",
    "when_all",
    "when_any",
]
