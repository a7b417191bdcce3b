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
from cairn.workflow.client import DaprWorkflowClient
from cairn.workflow.retry_policy import RetryPolicy
from cairn.workflow.runtime import WorkflowRuntime
from cairn.workflow.state import WorkflowState, WorkflowStatus


def alternate_name(name: str | None = None):  # type: ignore[no-untyped-def]
    """Register a function under another name (Dapr's @alternate_name)."""

    def decorate(fn):  # type: ignore[no-untyped-def]
        if getattr(fn, "_dapr_alternate_name", None):
            raise ValueError(
                f"Function {fn.__name__} already has an alternate name {fn._dapr_alternate_name}"
            )
        fn.__dict__["_dapr_alternate_name"] = name or fn.__name__
        return fn

    return decorate


__all__ = [
    "DaprWorkflowClient",
    "DaprWorkflowContext",
    "FailureDetails",
    "NonDeterminismError",
    "RetryPolicy",
    "Task",
    "TaskFailedError",
    "WorkflowActivityContext",
    "WorkflowRuntime",
    "WorkflowState",
    "WorkflowStatus",
    "alternate_name",
    "when_all",
    "when_any",
]
