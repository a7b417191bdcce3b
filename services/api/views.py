"""Read-side helpers the api and the CLI share: a workflow's executions from its document and
its task history."""

from __future__ import annotations

from shared.core.plan import plan_of
from shared.core.refs import node_ref
from shared.models.documents import WorkflowDocument
from shared.models.runtime import TaskState
from shared.ports.store import Store


def merge_executions(document: WorkflowDocument, records: list[TaskState]) -> list[TaskState]:
    """Every execution of the workflow, in scheduling order (Conductor's task list).

    The document is authoritative for executions it holds; history records cover retried-away
    attempts and earlier loop iterations. A record written by a decision that lost its commit
    (newer than the document) is left out, and so are executions of earlier runs (before a restart
    or rerun: still readable by task id) and iterations a DO_WHILE's keepLastN no longer
    keeps (Conductor deletes them)."""
    current = {task.task_id: task for task in document.state.tasks.values()}
    merged = {
        record.task_id: current.get(record.task_id, record)
        for record in records
        if record.workflow_version <= document.version and not document.state.is_superseded(record.seq)
    }
    for task_id, task in current.items():
        merged.setdefault(task_id, task)
    kept = _kept_iterations(document)
    return sorted(
        (task for task in merged.values() if _is_kept(task, kept)),
        key=lambda task: task.seq,
    )


def _kept_iterations(document: WorkflowDocument) -> dict[str, int]:
    """Body node ref -> the first iteration its DO_WHILE still keeps (keepLastN)."""
    if document.definition is None:
        return {}
    plan = plan_of(document.definition)
    first_kept: dict[str, int] = {}
    for ref, place in plan.places.items():
        keep = place.node.input_parameters.get("keepLastN") if place.node.type == "DO_WHILE" else None
        loop = document.state.tasks.get(ref)
        if not isinstance(keep, int) or isinstance(keep, bool) or keep < 1 or loop is None:
            continue
        for below in plan.descendants.get(ref, ()):
            first_kept[below] = loop.iteration - keep + 1
    return first_kept


def _is_kept(task: TaskState, first_kept: dict[str, int]) -> bool:
    first = first_kept.get(node_ref(task.reference_task_name))
    return first is None or not task.loop_over_task or task.iteration >= first


async def load_executions(store: Store, document: WorkflowDocument) -> list[TaskState]:
    return merge_executions(document, await store.list_tasks(document.workflow_id))


def find_execution(document: WorkflowDocument, task_id: str) -> TaskState | None:
    """The workflow's current execution with this id (None: not current, or unknown)."""
    return next((task for task in document.state.tasks.values() if task.task_id == task_id), None)
