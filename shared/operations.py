"""Waiting for a lifecycle command to be taken: the api and the CLI publish a command to the
decider, then read the workflow until its record of that command appears (the decider records
each one it applies or refuses, shared/core/operations.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from shared.models.documents import WorkflowDocument
from shared.models.runtime import OperationRecord
from shared.ports.store import Store


async def await_document(
    store: Store, workflow_id: str, ready: Callable[[WorkflowDocument], bool], within_s: float
) -> WorkflowDocument | None:
    """The workflow's document once `ready` holds for it, read with a backoff from 2 ms to
    100 ms; None if it did not within `within_s` (the engine is catching up, or not running):
    how the api answers an operator only once the decider has done what was asked."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    delay = 0.002
    while True:
        document = await store.load_workflow(workflow_id)
        if document is not None and ready(document):
            return document
        if loop.time() >= deadline:
            return None
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.1)


async def await_operation(
    store: Store, workflow_id: str, command_id: str, within_s: float
) -> OperationRecord | None:
    """The decider's record of command `command_id` on the workflow, once it exists; None if it
    did not appear within `within_s`."""

    def record_of(document: WorkflowDocument) -> OperationRecord | None:
        return next((r for r in reversed(document.state.operations) if r.id == command_id), None)

    found = await await_document(store, workflow_id, lambda d: record_of(d) is not None, within_s)
    return record_of(found) if found is not None else None
