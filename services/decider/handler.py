"""The decider: inbox dedupe, load, decide, commit, publish outbox, mark sent.

Events are grouped by workflow; each workflow's group is one decision and one conditional update
of its document (the commit point). Different workflows in a batch are decided concurrently.
A version conflict (another replica or a redelivery got there first) reloads and decides again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from opentelemetry import trace

from shared import telemetry
from shared.core import decide, new_workflow_state
from shared.core.validation import DefinitionError, validate_workflow_def
from shared.messaging import PoisonMessageError, dead_letter, outgoing, parse
from shared.models.definitions import WorkflowDef
from shared.models.documents import INBOX_MEMORY, WorkflowDocument
from shared.models.messages import (
    DECIDER_INBOUND,
    DeciderInbound,
    OutboxMessage,
    StartWorkflow,
    WorkflowEvent,
    workflow_id_of,
)
from shared.models.runtime import WorkflowState, WorkflowStatus
from shared.ports.bus import Bus, Outgoing, Received
from shared.ports.store import Store
from shared.topics import Topics

log = logging.getLogger(__name__)
tracer = telemetry.tracer("cairn.decider")

MAX_COMMIT_ATTEMPTS = 20


class CommitConflictError(RuntimeError):
    """Too many concurrent commits on one workflow; the batch is redelivered."""


@dataclass
class _Item:
    received: Received
    message: DeciderInbound


class DeciderHandler:
    def __init__(self, store: Store, bus: Bus, topics: Topics, clock: Callable[[], int]) -> None:
        self.store = store
        self.bus = bus
        self.topics = topics
        self.clock = clock

    async def handle_batch(self, batch: Sequence[Received]) -> None:
        groups: dict[str, list[_Item]] = {}
        dead: list[Outgoing] = []
        for received in batch:
            try:
                message = parse(received, DECIDER_INBOUND)
            except PoisonMessageError as error:
                log.warning("dead-lettering %s@%s: %s", received.topic, received.offset, error)
                dead.append(dead_letter(received, str(error), self.topics.dead_letter))
                continue
            groups.setdefault(workflow_id_of(message), []).append(_Item(received, message))
        results = await asyncio.gather(*(self._decide_workflow(wf, items) for wf, items in groups.items()))
        dead.extend(letter for letters in results for letter in letters)
        await self.bus.publish(dead)

    async def _decide_workflow(self, workflow_id: str, items: list[_Item]) -> list[Outgoing]:
        """Decide and commit one workflow's events; returns dead letters for events that cannot apply."""
        parent = telemetry.extract(items[0].received.headers)
        with tracer.start_as_current_span(
            "cairn.decide", context=parent, attributes={"cairn.workflow_id": workflow_id}
        ) as span:
            for _ in range(MAX_COMMIT_ATTEMPTS):
                outcome = await self._attempt(workflow_id, items, span)
                if outcome is not None:
                    return outcome
            raise CommitConflictError(f"workflow {workflow_id}: gave up after {MAX_COMMIT_ATTEMPTS} conflicts")

    async def _attempt(self, workflow_id: str, items: list[_Item], span: trace.Span) -> list[Outgoing] | None:
        now = self.clock()
        document = await self.store.load_workflow(workflow_id)
        exists = document is not None
        events = [item.message for item in items if document is None or item.message.id not in document.inbox]
        if document is None:
            start = next((event for event in events if isinstance(event, StartWorkflow)), None)
            if start is None:
                reason = f"workflow {workflow_id!r} does not exist"
                return [dead_letter(item.received, reason, self.topics.dead_letter) for item in items]
            traceparent = next(
                (i.received.headers.get("traceparent") for i in items if i.message is start), None
            )
            document = await self._new_document(start, now, traceparent)
            if document.definition is None:  # rejected start: record why, tell listeners
                if not await self.store.create_workflow(document):
                    return None
                await self._publish_outbox(document)
                return []
        if document.definition is None:
            log.info("events for %s ignored: its start was rejected", workflow_id)
            return []
        try:
            decision = decide(document.definition, document.state, events, now)
        except Exception as error:  # a bug in the core must not wedge the partition
            log.exception("decide failed for %s", workflow_id)
            reason = f"decide failed for workflow {workflow_id}: {error!r}"
            return [dead_letter(item.received, reason, self.topics.dead_letter) for item in items]
        for note in decision.notes:
            log.info("workflow %s: %s", workflow_id, note)
        if not decision.changed and exists:
            await self._publish_outbox(document)  # repair a crash between commit and publish
            return []
        version = document.version + 1
        outbox = [*document.outbox, *decision.outbox]
        committed = document.model_copy(
            update={
                "version": version,
                "state": decision.state,
                "outbox": outbox,
                "outbox_since": (document.outbox_since or now) if outbox else None,
                "inbox": [*document.inbox, *(event.id for event in events)][-INBOX_MEMORY:],
                "updated_at": now,
            }
        )
        tasks = [task.model_copy(update={"workflow_version": version}) for task in decision.tasks]
        with tracer.start_as_current_span(
            "cairn.commit",
            attributes={
                "cairn.workflow_id": workflow_id,
                "cairn.version": version,
                "cairn.task_ids": [task.task_id for task in tasks],
            },
        ):
            await self.store.upsert_tasks(tasks)
            ok = (
                await self.store.commit_workflow(committed, document.version)
                if exists
                else await self.store.create_workflow(committed)
            )
        if not ok:
            span.add_event("version conflict", {"cairn.version": document.version})
            return None
        await self._publish_outbox(committed)
        return []

    async def _new_document(self, start: StartWorkflow, now: int, traceparent: str | None) -> WorkflowDocument:
        """A version-0 document for a start event: the definition snapshot, or a rejection."""
        snapshot, problem = await self._snapshot(start.name, start.version)
        if snapshot is not None:
            return WorkflowDocument(
                workflow_id=start.workflow_id,
                version=0,
                definition=snapshot,
                state=new_workflow_state(snapshot, start, now),
                trace_parent=traceparent,
                updated_at=now,
            )
        log.warning("start of %s rejected: %s", start.workflow_id, problem)
        state = WorkflowState(
            workflow_id=start.workflow_id,
            workflow_name=start.name,
            workflow_version=start.version or 0,
            status=WorkflowStatus.FAILED,
            input=start.input,
            correlation_id=start.correlation_id,
            reason_for_incompletion=problem,
            create_time=now,
            start_time=now,
            end_time=now,
            update_time=now,
        )
        event = WorkflowEvent(
            id=f"{start.workflow_id}:start_rejected",
            event="start_rejected",
            workflow_id=start.workflow_id,
            workflow_name=start.name,
            status=WorkflowStatus.FAILED.value,
            reason=problem,
        )
        return WorkflowDocument(
            workflow_id=start.workflow_id,
            version=1,
            state=state,
            outbox=[event],
            outbox_since=now,
            inbox=[start.id],
            trace_parent=traceparent,
            updated_at=now,
        )

    async def _snapshot(self, name: str, version: int | None) -> tuple[WorkflowDef | None, str]:
        definition = await self.store.get_workflow_def(name, version)
        if definition is None:
            which = f"version {version}" if version is not None else "any version"
            return None, f"workflow definition {name!r} ({which}) is not registered"
        snapshot = definition.model_copy(deep=True)
        simple = [node for node in snapshot.all_tasks() if node.type == "SIMPLE" and node.task_definition is None]
        task_defs = await self.store.get_task_defs(sorted({node.name for node in simple}))
        for node in simple:
            node.task_definition = task_defs.get(node.name)
        try:
            validate_workflow_def(snapshot)
        except DefinitionError as error:
            return None, str(error)
        return snapshot, ""

    async def _publish_outbox(self, document: WorkflowDocument) -> None:
        if not document.outbox:
            return
        with tracer.start_as_current_span(
            "cairn.publish",
            attributes={"cairn.workflow_id": document.workflow_id, "cairn.messages": len(document.outbox)},
        ):
            headers = telemetry.inject()
            await self.bus.publish([self._outgoing(message, document, headers) for message in document.outbox])
        await self.store.mark_outbox_sent(document.workflow_id, document.version)

    def _outgoing(self, message: OutboxMessage, document: WorkflowDocument, headers: dict[str, str]) -> Outgoing:
        return outgoing(self.topics.for_outbox(message), message, document.workflow_id, headers)
