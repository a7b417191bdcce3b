"""The decider: inbox dedupe, load, decide, commit, publish outbox, mark sent — per batch.

A batch of events is grouped by workflow; each group is one decision. All decisions of a batch
are made durable by one group commit (a handful of store round trips however many workflows the
batch holds), their outboxes published in one produce batch, then marked sent. A decision that
lost its version check (another replica, a redelivery) is reloaded and decided again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from services.decider import keyed_starts
from services.decider.code_turns import (
    as_code_start,
    code_start_of,
    json_start_of,
    new_code_document,
    with_history,
)
from services.decider.deciding import Deciding, WorkflowMovedOnError
from services.decider.faults import DeciderFaults
from services.decider.outgoing import messages_of, refuse_past_limits
from services.decider.recent import RecentDocuments
from services.decider.recent_histories import RecentHistories
from services.decider.snapshot import SnapshotMemo, resolve_snapshot
from shared import telemetry
from shared.core import new_workflow_state
from shared.core.code.engine import CODE
from shared.core.code.run import is_code_definition
from shared.core.decide import Limits
from shared.core.run import Rejection
from shared.core.scripting import Sandbox
from shared.core.validation import DefinitionError, parse_workflow_def
from shared.created_watch import created_watch
from shared.messaging import PoisonMessageError, dead_letter, parse
from shared.models.definitions import ModelPrice, WorkflowDef
from shared.models.documents import INBOX_MEMORY, WorkflowDocument
from shared.models.messages import (
    DECIDER_INBOUND,
    DecideRequest,
    DeciderInbound,
    OutboxMessage,
    StartWorkflow,
    SubWorkflowEnded,
    WorkflowEvent,
    workflow_id_of,
)
from shared.models.runtime import WorkflowState, WorkflowStatus
from shared.ports.bus import Bus, Outgoing, Received, RedeliverError
from shared.ports.outbox import AtomicOutbox
from shared.ports.store import Commit, HistoryChunk, Store
from shared.search import searched_fields
from shared.topics import Topics

log = logging.getLogger(__name__)
tracer = telemetry.tracer("cairn.decider")
meter = telemetry.meter("cairn.decider")
decisions_committed = meter.create_counter("cairn.decider.commits", description="Decisions committed")
version_conflicts = meter.create_counter(
    "cairn.decider.conflicts", description="Commits lost to a newer version"
)
dead_lettered = meter.create_counter(
    "cairn.deadletters", description="Messages moved to the dead-letter topic"
)
rejected_events = meter.create_counter(
    "cairn.decider.rejected",
    description="Events the task state machine rejected (late results of superseded attempts, "
    "signals for no waiting task, ...), by reason code",
)
repairs_made = meter.create_counter(
    "cairn.decider.repairs", description="Lost dispatches and timer firings made good on a sweeper's request"
)
batch_duration = meter.create_histogram(
    "cairn.decider.batch.duration", unit="ms", description="Time per batch"
)

MAX_COMMIT_ATTEMPTS = 20


class CommitConflictError(RedeliverError):
    """Too many lost version checks in a row; the batch is redelivered (never a dead letter)."""


@dataclass
class _Item:
    received: Received
    message: DeciderInbound


@dataclass
class _Plan:
    """What one workflow's decision wants written and published."""

    workflow_id: str
    commit: Commit | None = None
    publish: WorkflowDocument | None = None
    headers: dict[str, str] = field(default_factory=dict)
    dead: list[Outgoing] = field(default_factory=list)
    ignored_events: bool = False
    """The decision changed nothing although it had new events (all rejected or no-ops)."""
    rejections: list[Rejection] = field(default_factory=list)
    repairs: list[str] = field(default_factory=list)
    published: bool = False
    """Its outbox went out with its commit (an AtomicOutbox): nothing left to publish or mark."""
    redo: bool = False
    """Decided in place, it had to be read again and had moved on: decide it again, freshly read."""
    cache: bool = True
    """Whether its published document may stay in the recent cache for the next decision."""


class DeciderHandler:
    def __init__(
        self,
        store: Store,
        bus: Bus,
        topics: Topics,
        clock: Callable[[], int],
        *,
        limits: Limits | None = None,
        sandbox: Sandbox | None = None,
        faults: DeciderFaults | None = None,
        prices: Mapping[str, ModelPrice] | None = None,
        outbox: AtomicOutbox | None = None,
    ) -> None:
        self.store = store
        self.outbox = outbox
        """Where the store and the bus are one database: commit, publish and acknowledge at once."""
        self.prices = dict(prices or {})
        """Model prices of the configuration, copied into the snapshots of budgets in dollars."""
        self.bus = bus
        self.topics = topics
        self.clock = clock
        self.limits = limits or Limits()
        self.sandbox = sandbox
        self.recent = RecentDocuments()
        self.snapshots = SnapshotMemo()
        self.deciding = Deciding(store, self.limits, sandbox, self.prices)
        self.histories = RecentHistories()
        self._background: set[asyncio.Task[None]] = set()
        self.faults = faults or DeciderFaults(topics)
        self.created = created_watch(store)
        """Where an api of this process waits for the executions its starts asked for."""

    async def aclose(self) -> None:
        """Wait for background bookkeeping (outbox markers) to finish."""
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)

    async def handle_batch(self, batch: Sequence[Received]) -> None:
        started = time.perf_counter()
        groups: dict[str, list[_Item]] = {}
        dead: list[Outgoing] = []
        forwards: list[Outgoing] = []
        for received in batch:
            try:
                message = parse(received, DECIDER_INBOUND)
                refuse_past_limits(message, self.limits.payload)
            except PoisonMessageError as error:
                log.warning("dead-lettering %s@%s: %s", received.topic, received.offset, error)
                dead.append(dead_letter(received, str(error), self.topics.dead_letter))
                continue
            if isinstance(message, StartWorkflow) and message.idempotency_key is not None:
                placement = await keyed_starts.place(self.store, self.topics, message)
                forwards.extend(placement.forward)
                if not placement.keep:
                    continue
            groups.setdefault(workflow_id_of(message), []).append(_Item(received, message))
        if forwards:  # before the batch is acknowledged: a crash forwards them again (same ids)
            await self.bus.publish(forwards)
        pending = groups
        for attempt in range(MAX_COMMIT_ATTEMPTS):
            if not pending:
                break
            lost = await self._decide_and_commit(pending, dead, batch, first_attempt=attempt == 0)
            pending = {workflow_id: groups[workflow_id] for workflow_id in lost}
        else:
            raise CommitConflictError(f"gave up on {sorted(pending)} after {MAX_COMMIT_ATTEMPTS} conflicts")
        await self.bus.publish(dead)
        dead_lettered.add(len(dead))
        elapsed_ms = (time.perf_counter() - started) * 1000
        batch_duration.record(elapsed_ms)
        log.debug("batch of %d messages for %d workflows in %.1f ms", len(batch), len(groups), elapsed_ms)

    async def _decide_and_commit(
        self,
        groups: dict[str, list[_Item]],
        dead: list[Outgoing],
        batch: Sequence[Received],
        *,
        first_attempt: bool = True,
    ) -> list[str]:
        """One round: load, decide, group-commit, publish. Returns the workflows that lost."""
        now = self.clock()
        t0 = time.perf_counter()
        # The sweeper's decide-requests read the store: what it saw there (an unsent outbox) is what
        # the request is about, and a copy kept here would not show it.
        documents = {
            wid: doc
            for wid, items in groups.items()
            if not any(isinstance(item.message, DecideRequest) for item in items)
            and (doc := self.recent.take(wid, now)) is not None
        }
        cached = set(documents)
        missing = [wid for wid in groups if wid not in documents]
        # Workflows being started are new: a finished execution under such an id is found by the
        # create's uniqueness (the commit is lost, and the next attempt looks everywhere).
        starting = [
            wid
            for wid in missing
            if first_attempt and all(isinstance(i.message, StartWorkflow) for i in groups[wid])
        ]
        others = [wid for wid in missing if wid not in starting]
        loaded = await asyncio.gather(
            self.store.load_workflows(starting, running_only=True), self.store.load_workflows(others)
        )
        for found in loaded:
            documents.update(found)
        t1 = time.perf_counter()
        definitions: dict[tuple[str, int | None], tuple[WorkflowDef | None, str]] = {}
        plans = [
            await self._plan(workflow_id, items, documents.get(workflow_id), now, definitions)
            for workflow_id, items in groups.items()
        ]
        t2 = time.perf_counter()
        # A decision that changes nothing commits nothing, so no version check fences it: made on
        # a cached copy, it may have refused events that a newer version (another replica's
        # commit: a timer armed, a task scheduled) accepts. Those workflows are decided again on
        # a fresh read, like a lost commit. Seen with three deciders, where one workflow's
        # topics are spread over different replicas.
        recheck = [
            plan.workflow_id
            for plan in plans
            if (plan.ignored_events and plan.workflow_id in cached) or plan.redo
        ]
        for workflow_id in recheck:
            self.recent.drop(workflow_id)
        plans = [plan for plan in plans if plan.workflow_id not in recheck]
        for plan in plans:
            dead.extend(plan.dead)
            _report(plan)
        commits = [plan for plan in plans if plan.commit is not None]
        self.faults.before_commit(
            {plan.workflow_id: {item.received.topic for item in groups[plan.workflow_id]} for plan in commits}
        )
        with tracer.start_as_current_span(
            "cairn.commit",
            attributes={
                "cairn.workflow_ids": [plan.workflow_id for plan in commits],
                "cairn.task_ids": [t.task_id for plan in commits for t in plan.commit.tasks],  # type: ignore[union-attr]
            },
        ):
            if self.outbox is not None:
                won = await self._commit_publishing(plans, commits, batch, last=not dead and not recheck)
            else:
                won = await self.store.commit_workflows([plan.commit for plan in commits])  # type: ignore[misc]
        t3 = time.perf_counter()
        created = [
            plan.workflow_id
            for plan, ok in zip(commits, won, strict=True)
            if ok and plan.commit.expected_version == 0  # type: ignore[union-attr]
        ]
        if created:
            self.created.announce(created)
        conflicted = [plan.workflow_id for plan, ok in zip(commits, won, strict=True) if not ok]
        if conflicted:  # rare with one owner per workflow: a redelivered batch, a rebalance
            log.info("%d commits lost to a newer version: %s", len(conflicted), conflicted[:10])
        lost = conflicted + recheck
        decisions_committed.add(len(commits) - len(conflicted))  # rechecks never were commits
        version_conflicts.add(len(lost))
        for plan, ok in zip(commits, won, strict=True):
            if ok:
                plan.publish = plan.commit.document  # type: ignore[union-attr]
                for chunk in plan.commit.history:  # type: ignore[union-attr]
                    self.histories.committed(chunk.workflow_id, chunk.generation, chunk.first, chunk.events)
            else:
                self.recent.drop(plan.workflow_id)
        await self._publish([plan for plan in plans if _unpublished(plan)])
        for plan in plans:
            if plan.publish is not None and plan.cache:
                self.recent.put(plan.publish.model_copy(update={"outbox": []}), now)
        log.debug(
            "round: load %.1f ms, decide %.1f ms, commit %.1f ms, publish %.1f ms",
            (t1 - t0) * 1e3,
            (t2 - t1) * 1e3,
            (t3 - t2) * 1e3,
            (time.perf_counter() - t3) * 1e3,
        )
        return lost

    async def _commit_publishing(
        self, plans: Sequence[_Plan], commits: Sequence[_Plan], batch: Sequence[Received], *, last: bool
    ) -> list[bool]:
        """Commit with the outboxes published in the same transaction (self.outbox). A code
        workflow's turn carries history read after its commit, so its outbox is published the
        usual way. `last`: nothing else of the batch is left to write once these commit (no dead
        letters, no decision to redo), so the transaction may acknowledge the batch as well —
        if every plan's messages go out in it."""
        assert self.outbox is not None
        messages = [
            None
            if plan.commit.document.kind == CODE  # type: ignore[union-attr]
            else messages_of(self.topics, plan.commit.document, plan.commit.document.outbox, plan.headers)  # type: ignore[union-attr]
            for plan in commits
        ]
        complete = all(out is not None for out in messages) and not any(
            plan.commit is None and plan.publish is not None and plan.publish.outbox for plan in plans
        )
        won = await self.outbox.commit_and_publish(
            [plan.commit for plan in commits],  # type: ignore[misc]
            messages,
            acknowledge=batch if last and complete else None,
        )
        for plan, out, ok in zip(commits, messages, won, strict=True):
            plan.published = ok and out is not None
        return won

    async def _plan(
        self,
        workflow_id: str,
        items: list[_Item],
        document: WorkflowDocument | None,
        now: int,
        definitions: dict[tuple[str, int | None], tuple[WorkflowDef | None, str]],
    ) -> _Plan:
        parent = telemetry.extract(items[0].received.headers)
        with tracer.start_as_current_span(
            "cairn.decide", context=parent, attributes={"cairn.workflow_id": workflow_id}
        ) as span:
            plan = _Plan(workflow_id, headers=telemetry.inject())
            exists = document is not None
            seen = set(document.inbox) if document is not None else set()
            events = []
            for item in items:  # a message redelivered within one batch, too, is applied once
                if item.message.id not in seen:
                    seen.add(item.message.id)
                    events.append(item.message)
            if document is None:
                start = next((event for event in events if isinstance(event, StartWorkflow)), None)
                if start is None:
                    reason = f"workflow {workflow_id!r} does not exist"
                    plan.dead = [
                        dead_letter(item.received, reason, self.topics.dead_letter) for item in items
                    ]
                    return plan
                key = (start.name, start.version)
                traceparent = next(
                    (i.received.headers.get("traceparent") for i in items if i.message is start), None
                )
                code_start = await code_start_of(self.store, start)
                if code_start is not None:
                    document = new_code_document(code_start, now, traceparent)
                else:
                    start = json_start_of(start)
                    if start.workflow_def is not None:
                        snapshot = await self._snapshot(start)
                    elif key in definitions:
                        snapshot = definitions[key]
                    else:
                        snapshot = definitions[key] = await self._snapshot(start)
                    if snapshot[0] is not None and is_code_definition(snapshot[0]):
                        document = new_code_document(as_code_start(start, snapshot[0]), now, traceparent)
                    else:
                        document = self._new_document(start, snapshot, now, traceparent)
                if document.definition is None:  # rejected start: record why, tell listeners
                    plan.commit = Commit(document, 0)
                    return plan
            if document.definition is None:
                log.info("events for %s ignored: its start was rejected", workflow_id)
                return plan
            # Read for this round (from the store, or taken out of the recent cache): the decision
            # may change it in place (services/decider/deciding.py). A new one is decided on a copy.
            searched_before = searched_fields(document.state)
            executions_before = {task.task_id for task in document.state.tasks.values()}
            try:
                decision, document = await self.deciding.decide(document, events, now, owned=exists)
            except WorkflowMovedOnError:
                plan.redo = True
                return plan
            except Exception as error:  # a bug in the core must not wedge the partition
                log.exception("decide failed for %s", workflow_id)
                reason = f"decide failed for workflow {workflow_id}: {error!r}"
                plan.dead = [dead_letter(item.received, reason, self.topics.dead_letter) for item in items]
                return plan
            plan.rejections, plan.repairs = list(decision.notes), list(decision.repairs)
            span.set_attribute("cairn.task_ids", [task.task_id for task in decision.tasks])
            if not decision.changed and exists:
                plan.publish = document  # repairs a crash between an earlier commit and its publish
                plan.ignored_events = bool(events)
                plan.cache = False  # decided in place, it may be part-changed with no commit
                return plan
            version = document.version + 1
            outbox = [*document.outbox, *decision.outbox]
            committed = document.model_copy(
                update={
                    "version": version,
                    "definition": decision.snapshot or document.definition,
                    "state": decision.state,
                    "outbox": outbox,
                    "inbox": [*document.inbox, *(event.id for event in events)][-INBOX_MEMORY:],
                    "updated_at": now,
                }
            )
            # Task records are history: executions that reached a terminal state.
            tasks = [
                task.model_copy(update={"workflow_version": version})
                for task in decision.tasks
                if task.status.is_terminal
            ]
            plan.commit = Commit(
                committed,
                document.version,
                tasks,
                read_at=now,
                base_updated_at=document.updated_at,
                searched_changed=searched_before != searched_fields(decision.state),
                new_task_ids=[
                    task.task_id
                    for task in decision.state.tasks.values()
                    if task.task_id not in executions_before
                ],
                history=[
                    HistoryChunk(workflow_id, generation, first, events)
                    for generation, first, events in decision.history
                ],
            )
            return plan

    def _new_document(
        self,
        start: StartWorkflow,
        snapshot: tuple[WorkflowDef | None, str],
        now: int,
        traceparent: str | None,
    ) -> WorkflowDocument:
        """A version-0 document for a start event: the definition snapshot, or a rejection."""
        definition, problem = snapshot
        if definition is not None:
            return WorkflowDocument(
                workflow_id=start.workflow_id,
                version=0,
                definition=definition,
                state=new_workflow_state(definition, start, now),
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
        outbox: list[OutboxMessage] = [
            WorkflowEvent(
                id=f"{start.workflow_id}:start_rejected",
                event="start_rejected",
                workflow_id=start.workflow_id,
                workflow_name=start.name,
                status=WorkflowStatus.FAILED.value,
                reason=problem,
            )
        ]
        if start.parent_workflow_id and start.parent_workflow_task_id:
            outbox.append(  # the SUB_WORKFLOW task waiting for this child fails with the reason
                SubWorkflowEnded(
                    id=f"{start.workflow_id}:ended:0",
                    workflow_id=start.parent_workflow_id,
                    task_id=start.parent_workflow_task_id,
                    sub_workflow_id=start.workflow_id,
                    status=WorkflowStatus.FAILED.value,
                    reason=problem,
                )
            )
        return WorkflowDocument(
            workflow_id=start.workflow_id,
            version=1,
            state=state,
            outbox=outbox,
            inbox=[start.id],
            trace_parent=traceparent,
            updated_at=now,
        )

    async def _snapshot(self, start: StartWorkflow) -> tuple[WorkflowDef | None, str]:
        """The definition to embed in a new execution — the registered one, or the start's
        inline `workflowDef` — with TaskDefs resolved and sub-workflow versions fixed; or why
        there is none. A registered one's is remembered while no definition changes."""
        if start.workflow_def is not None:
            try:
                definition = parse_workflow_def(start.workflow_def)
            except DefinitionError as error:
                return None, f"inline workflowDef: {error}"
            return await resolve_snapshot(self.store, definition, self.prices)
        generation = await self.store.definitions_generation()
        remembered = self.snapshots.get(start.name, start.version, generation)
        if remembered is not None:
            return remembered
        snapshot = await self._registered_snapshot(start)
        self.snapshots.put(start.name, start.version, generation, snapshot)
        return snapshot

    async def _registered_snapshot(self, start: StartWorkflow) -> tuple[WorkflowDef | None, str]:
        found = await self.store.get_workflow_def(start.name, start.version)
        if found is None:
            which = f"version {start.version}" if start.version is not None else "any version"
            return None, f"workflow definition {start.name!r} ({which}) is not registered"
        if is_code_definition(found):  # a registered code workflow: its code is the runtime's
            return found, ""
        return await resolve_snapshot(self.store, found, self.prices)

    async def _publish(self, plans: Sequence[_Plan]) -> None:
        if not plans:
            return
        messages: list[Outgoing] = []
        documents = [plan.publish for plan in plans if plan.publish is not None]
        # Code workflows' turns carry their histories, read from the store: all at once
        code = [d for d in documents if d.kind == CODE]
        outboxes = dict(
            zip(
                (id(d) for d in code),
                await asyncio.gather(*(with_history(self.store, d, self.histories) for d in code)),
                strict=True,
            )
        )
        for plan in plans:
            document = plan.publish
            assert document is not None
            messages.extend(
                messages_of(self.topics, document, outboxes.get(id(document), document.outbox), plan.headers)
            )
        with tracer.start_as_current_span(
            "cairn.publish",
            attributes={
                "cairn.workflow_ids": [plan.workflow_id for plan in plans],
                "cairn.messages": len(messages),
            },
        ):
            await self.bus.publish(messages)
        # Marking sent is bookkeeping: if it is lost, the sweeper republishes (duplicates are
        # harmless downstream), so it need not hold up the batch.
        sent = [(plan.workflow_id, plan.publish.version) for plan in plans]  # type: ignore[union-attr]
        task = asyncio.create_task(self._mark_sent(sent))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _mark_sent(self, sent: list[tuple[str, int]]) -> None:
        try:
            await self.store.mark_outboxes_sent(sent)
        except Exception:
            log.warning(
                "could not mark %d outboxes sent; the sweeper will republish them", len(sent), exc_info=True
            )


def _report(plan: _Plan) -> None:
    """Log and count what a decision refused or repaired (once it is final, not when it is about
    to be redone on a fresh read)."""
    for rejection in plan.rejections:
        log.warning("workflow %s: rejected (%s): %s", plan.workflow_id, rejection.code, rejection.message)
        rejected_events.add(1, {"reason": rejection.code})
    for repair in plan.repairs:
        log.warning("workflow %s: repaired: %s", plan.workflow_id, repair)
        repairs_made.add(1)


def _unpublished(plan: _Plan) -> bool:
    """Whether the plan's document has messages still to publish (and then to mark sent)."""
    return plan.publish is not None and bool(plan.publish.outbox) and not plan.published
