"""Waiting for a lifecycle command to be taken: the api and the CLI publish a command to the
decider, then read the workflow until its record of that command appears (the decider records
each one it applies or refuses, shared/core/operations.py)."""

from __future__ import annotations

import asyncio

from shared.models.runtime import OperationRecord
from shared.ports.store import Store


async def await_operation(
    store: Store, workflow_id: str, command_id: str, within_s: float
) -> OperationRecord | None:
    """The decider's record of command `command_id` on the workflow, once it exists; None if it
    did not appear within `within_s` (the engine is catching up, or is not running)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    delay = 0.002
    while True:
        document = await store.load_workflow(workflow_id)
        if document is not None:
            for record in reversed(document.state.operations):
                if record.id == command_id:
                    return record
        if loop.time() >= deadline:
            return None
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.1)
