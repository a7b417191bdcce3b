"""The store port. Adapters: MongoDB (production), SQLite (embedded, issue 3).

No multi-document transactions: the commit point of a decision is `commit_workflow`, one
conditional update of the workflow document by version. Everything else is idempotent under
deterministic ids, so a retried decision overwrites what a failed one left behind.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from shared.models.definitions import TaskDef, WorkflowDef
from shared.models.documents import TimerRecord, WorkflowDocument
from shared.models.runtime import TaskState


class Store(Protocol):
    async def open(self) -> None:
        """Connect and create indexes; safe to call on every start."""
        ...

    async def close(self) -> None: ...

    # ---- definitions ----
    async def put_workflow_def(self, definition: WorkflowDef) -> None: ...
    async def get_workflow_def(self, name: str, version: int | None = None) -> WorkflowDef | None:
        """The given version, or the highest registered version when `version` is None."""
        ...

    async def list_workflow_defs(self) -> list[WorkflowDef]: ...
    async def put_task_def(self, task_def: TaskDef) -> None: ...
    async def get_task_defs(self, names: Sequence[str]) -> dict[str, TaskDef]: ...

    # ---- workflows ----
    async def create_workflow(self, document: WorkflowDocument) -> bool:
        """Insert a new document at its version; False if the id exists already."""
        ...

    async def load_workflow(self, workflow_id: str) -> WorkflowDocument | None: ...

    async def commit_workflow(self, document: WorkflowDocument, expected_version: int) -> bool:
        """Replace the document iff its stored version is `expected_version`.

        `document.version` must be `expected_version + 1`. False means someone else committed
        first (or the document vanished): reload and decide again.
        """
        ...

    async def mark_outbox_sent(self, workflow_id: str, version: int) -> None:
        """Clear the outbox of `version` after publishing it; does not change the version. A no-op
        if the document moved on: the newer version's outbox holds ours and is published with it."""
        ...

    async def list_workflows(
        self, status: str | None = None, name: str | None = None, limit: int = 100
    ) -> list[WorkflowDocument]: ...

    async def find_workflows_to_sweep(
        self, outbox_older_than: int, running_stale_before: int, limit: int
    ) -> list[str]:
        """Ids of workflows with outbox messages unsent since before `outbox_older_than`, or
        RUNNING without a commit since `running_stale_before`."""
        ...

    # ---- task records ----
    async def upsert_tasks(self, tasks: Sequence[TaskState]) -> None: ...
    async def get_task(self, task_id: str) -> TaskState | None: ...
    async def list_tasks(self, workflow_id: str) -> list[TaskState]:
        """Every execution of the workflow (retries included), in scheduling order."""
        ...

    # ---- timers ----
    async def upsert_timer(self, timer: TimerRecord) -> None:
        """Arm (or re-arm, idempotently) a timer under its id."""
        ...

    async def delete_timers(self, timer_ids: Sequence[str]) -> None: ...
    async def claim_due_timers(self, now: int, owner: str, lease_ms: int, limit: int) -> list[TimerRecord]:
        """Claim up to `limit` timers due at `now` that no live claim holds; each claim lasts
        `lease_ms`, so a timer whose claimant died is claimed again once the lease runs out."""
        ...
