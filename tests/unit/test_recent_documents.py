"""The decider's cache of documents it just committed keeps only what it may decide on again soon:
no finished executions, nothing past its time (the embedded soak's memory and GC grew without it)."""

from services.decider.recent import RecentDocuments
from shared.models.documents import WorkflowDocument
from shared.models.runtime import WorkflowState, WorkflowStatus


def document(workflow_id: str, status: WorkflowStatus = WorkflowStatus.RUNNING) -> WorkflowDocument:
    state = WorkflowState(workflow_id=workflow_id, workflow_name="w", workflow_version=1, status=status)
    return WorkflowDocument(workflow_id=workflow_id, version=1, state=state)


def test_a_running_document_is_served_until_its_ttl() -> None:
    recent = RecentDocuments(ttl_ms=1_000)
    recent.put(document("a"), now=0)
    assert recent.get("a", now=1_000) is not None
    assert recent.get("a", now=1_001) is None
    assert len(recent) == 0


def test_a_finished_document_is_not_kept_and_drops_its_running_copy() -> None:
    recent = RecentDocuments()
    recent.put(document("a"), now=0)
    recent.put(document("a", WorkflowStatus.COMPLETED), now=1)
    recent.put(document("b", WorkflowStatus.FAILED), now=1)
    assert recent.get("a", now=2) is None and recent.get("b", now=2) is None
    assert len(recent) == 0


def test_expired_entries_leave_on_put_without_being_looked_up() -> None:
    recent = RecentDocuments(ttl_ms=1_000)
    for i in range(100):
        recent.put(document(f"old-{i}"), now=i)
    recent.put(document("kept"), now=600)
    recent.put(document("new"), now=1_050)
    assert len(recent) == 52  # old-50..old-99 are within 1 s of 1,050: only old-0..old-49 went
    recent.put(document("newer"), now=2_000)
    assert len(recent) == 2 and recent.get("new", now=2_000) is not None


def test_a_document_put_again_is_kept_from_its_last_put() -> None:
    recent = RecentDocuments(ttl_ms=1_000)
    recent.put(document("a"), now=0)
    recent.put(document("b"), now=500)
    recent.put(document("a"), now=900)
    recent.put(document("c"), now=1_600)  # b expired; a, put again at 900, has not
    assert recent.get("b", now=1_600) is None
    assert recent.get("a", now=1_600) is not None


def test_capacity_still_bounds_it() -> None:
    recent = RecentDocuments(capacity=3)
    for i in range(5):
        recent.put(document(f"w{i}"), now=0)
    assert len(recent) == 3 and recent.get("w0", now=0) is None and recent.get("w4", now=0) is not None
