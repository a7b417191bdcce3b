"""What the decider adds to a code workflow's turn when it publishes it: the stored history.

A turn's task message in the committed outbox carries only the turn's new events and how long
the history is (`historyLength`): the document never holds the history, so a commit's cost does
not grow with it. The runtime needs the past events to replay, so they are read from the store
(written by the commit being published, or an earlier one) and put into the message on its way
out — for a republished outbox too.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from services.decider.recent_histories import RecentHistories
from shared.core import new_workflow_state
from shared.core.code.engine import CODE
from shared.core.code.run import code_definition, is_code_definition
from shared.models.definitions import WorkflowDef
from shared.models.documents import WorkflowDocument
from shared.models.history import ORCHESTRATIONS
from shared.models.messages import OutboxMessage, StartWorkflow, TaskMessage
from shared.models.runtime import CodeState
from shared.ports.store import Store, stitch_history


def is_turn(message: OutboxMessage) -> bool:
    return isinstance(message, TaskMessage) and message.task_type.startswith(ORCHESTRATIONS)


async def with_history(
    store: Store, document: WorkflowDocument, recent: RecentHistories | None = None
) -> list[OutboxMessage]:
    """The document's outbox with each turn's `pastEvents` filled in from the store (the chunks
    are read by id: the document says where each starts)."""
    messages = document.outbox
    turns = [m for m in messages if is_turn(m)]
    if not turns:
        return list(messages)
    code = document.state.code
    starts = code.chunk_starts if code is not None else []
    # A turn of an earlier generation (continue_as_new since) is superseded: sent as it is, its
    # answer is refused.
    turns = [t for t in turns if int(t.input_data.get("generation", 0)) == document.state.epoch]  # type: ignore[union-attr]
    histories = await asyncio.gather(*(_past_events(store, turn, starts, recent) for turn in turns))  # type: ignore[arg-type]
    filled = {id(turn): full for turn, full in zip(turns, histories, strict=True)}
    return [filled.get(id(m), m) for m in messages]


async def _past_events(
    store: Store, turn: TaskMessage, starts: Sequence[int], recent: RecentHistories | None
) -> TaskMessage:
    item = turn.input_data
    length = int(item.get("historyLength", 0))
    generation = int(item.get("generation", 0))
    past = (
        recent.get(turn.workflow_instance_id, generation, length) if recent is not None and length else None
    )
    if past is not None:
        return turn.model_copy(update={"input_data": {**item, "pastEvents": past}})
    past = []
    if length:
        firsts = [first for first in starts if first < length]
        chunks = await store.load_history(turn.workflow_instance_id, int(item.get("generation", 0)), firsts)
        past = stitch_history(chunks, length)
        if len(past) < length:  # never expected: the commit that made the turn wrote them
            raise RuntimeError(
                f"history of {turn.workflow_instance_id} has {len(past)} of its {length} events in the store"
            )
    return turn.model_copy(update={"input_data": {**item, "pastEvents": past}})


DEFAULT_APP = "default"
"""The app of a code workflow started without one (`CAIRN_APP` of the runtime, by default)."""


def new_code_document(start: StartWorkflow, now: int, traceparent: str | None) -> WorkflowDocument:
    """A version-0 document for a start of a code workflow: nothing to resolve, the code is the
    runtime's; the first decision hands the ExecutionStarted to it."""
    app = start.app or DEFAULT_APP
    definition = code_definition(start.name, app)
    state = new_workflow_state(definition, start, now)
    state.code = CodeState(app=app)
    return WorkflowDocument(
        workflow_id=start.workflow_id,
        version=0,
        kind=CODE,
        definition=definition,
        state=state,
        trace_parent=traceparent,
        updated_at=now,
    )


async def code_start_of(store: Store, start: StartWorkflow) -> StartWorkflow | None:
    """The start of a code workflow this start is, or None for a JSON workflow's. A Dapr client's
    start says so (`kind`); a code workflow's child (it names its parent's `app`) is a JSON one
    when a JSON definition of its name is registered, else code. A Conductor start by name is
    decided by the definition registered under the name (the handler, `is_code_definition`)."""
    if start.kind == "code":
        return start
    if start.app is None:
        return None
    found = await store.get_workflow_def(start.name, start.version)
    if found is not None and not is_code_definition(found):
        return None
    return start.model_copy(update={"kind": "code"})


def json_start_of(start: StartWorkflow) -> StartWorkflow:
    """A code workflow's child that is a JSON workflow: its input is the object the orchestrator
    passed (a value that is not an object arrives as `{"input": value}`)."""
    if start.app is None:
        return start
    value = start.input.get("input")
    workflow_input = value if isinstance(value, dict) else {} if value is None else {"input": value}
    return start.model_copy(update={"input": workflow_input, "app": None})


def as_code_start(start: StartWorkflow, definition: WorkflowDef) -> StartWorkflow:
    """A start by name of a registered code workflow, on the app that registered it."""
    return start.model_copy(update={"kind": "code", "app": definition.owner_app or DEFAULT_APP})
