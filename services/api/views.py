"""Read-side helpers the api and the CLI share: a workflow's executions from its document and
its task history."""

from __future__ import annotations

from shared.models.documents import WorkflowDocument
from shared.models.runtime import TaskState
from shared.ports.store import Store


def merge_executions(document: WorkflowDocument, records: list[TaskState]) -> list[TaskState]:
    """Every execution of the workflow, in scheduling order.

    The document is authoritative for executions it holds; history records cover retried-away
    attempts. A record written by a decision that lost its commit (newer than the document) is
    left out."""
    current = {task.task_id: task for task in document.state.tasks.values()}
    merged = {
        record.task_id: current.get(record.task_id, record)
        for record in records
        if record.workflow_version <= document.version
    }
    for task_id, task in current.items():
        merged.setdefault(task_id, task)
    return sorted(merged.values(), key=lambda task: task.seq)


async def load_executions(store: Store, document: WorkflowDocument) -> list[TaskState]:
    return merge_executions(document, await store.list_tasks(document.workflow_id))


def find_execution(document: WorkflowDocument, task_id: str) -> TaskState | None:
    """The workflow's current execution with this id (None: not current, or unknown)."""
    return next((task for task in document.state.tasks.values() if task.task_id == task_id), None)
