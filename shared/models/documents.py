"""Stored documents: the workflow document (the commit point) and durable timers."""

from __future__ import annotations

from pydantic import Field

from shared.models.definitions import WorkflowDef
from shared.models.messages import OutboxMessage
from shared.models.runtime import CamelModel, WorkflowState

INBOX_MEMORY = 64
"""How many recently applied message ids a workflow remembers for inbox dedupe."""


class WorkflowDocument(CamelModel):
    """One execution. Its `version` is the fencing token: every commit is `version v -> v+1`.

    `definition` is the snapshot taken at start (TaskDefs embedded), so later edits to the
    registered definition never change a running execution. It is None only for a start that
    was rejected (unknown workflow name), whose state carries the reason.
    """

    workflow_id: str
    version: int = 0
    kind: str = "graph"
    """Which engine decides this execution (shared/core/engines.py): "graph" for Conductor's
    JSON workflows."""
    definition: WorkflowDef | None = None
    state: WorkflowState
    outbox: list[OutboxMessage] = Field(default_factory=list)
    """Messages committed but not yet published (carried over until they are)."""
    inbox: list[str] = Field(default_factory=list)
    trace_parent: str | None = None
    """W3C traceparent of the start event, so sweeper-driven work joins the workflow's trace."""
    updated_at: int = 0


class TimerRecord(CamelModel):
    """A durable timer owned by the timer service. `claim_until` fences replicas apart."""

    timer_id: str
    workflow_id: str
    fire_at: int
    claimed_by: str | None = None
    claim_until: int = 0
