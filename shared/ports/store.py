"""The store port. Adapters: MongoDB (production), SQLite (embedded, issue 3).

No multi-document transactions: the commit point of a decision is one conditional write of the
workflow document by version (`commit_workflows` does many such commits in one group).
Everything else is idempotent under deterministic ids, so a retried decision overwrites
what a failed one left behind.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from shared.models.definitions import TaskDef, WorkflowDef
from shared.models.documents import TimerRecord, WorkflowDocument
from shared.models.events import EventHandler
from shared.models.runtime import TaskState, TaskStatus, WorkflowState, WorkflowStatus
from shared.search import SearchRequest


@dataclass(frozen=True)
class HistoryChunk:
    """The history events one decision of a code workflow appended (docs/code-workflows.md):
    events `first` .. `first + len(events) - 1` of generation `generation`. Written once, with
    the commit that made them (never by a decision that lost), and never rewritten."""

    workflow_id: str
    generation: int
    first: int
    events: Sequence[dict[str, Any]]

    @property
    def chunk_id(self) -> str:
        return chunk_id(self.workflow_id, self.generation, self.first)


def chunk_id(workflow_id: str, generation: int, first: int) -> str:
    return f"{workflow_id}#{generation}#{first}"


def stitch_history(chunks: Sequence[HistoryChunk], length: int | None = None) -> list[dict[str, Any]]:
    """A generation's events from its chunks, in order, up to `length` (the committed document's
    `historyLength`; a newer commit's chunk past it is left out)."""
    events: list[dict[str, Any]] = []
    for chunk in sorted(chunks, key=lambda c: c.first):
        if chunk.first != len(events):
            break  # a gap: nothing after it belongs to a committed history this reader knows
        events.extend(chunk.events)
    return events if length is None else events[:length]


@dataclass(frozen=True)
class Commit:
    """One decision to make durable: the new document (version = expected_version + 1) and the
    task records it created or changed."""

    document: WorkflowDocument
    expected_version: int
    tasks: Sequence[TaskState] = ()
    read_at: int | None = None
    """Epoch ms when the decision began: its base version was read then (or, from the decider's
    cache of its own commits, at most 30 s before). A commit made long after its read — a decider
    frozen between the two — gets a version check of its own on MongoDB (its fence may be gone);
    None always gets it."""
    searched_changed: bool = True
    """Whether a field searches look at (status, correlation id, times, version: shared/search.py)
    differs from the base version's; the decider says False for the many commits that change
    none, and an adapter that keeps a search index apart (SQLite) leaves it alone then."""
    history: Sequence[HistoryChunk] = ()
    """History a code workflow's decision appended: written only if the commit wins."""
    base_updated_at: int | None = None
    """`updated_at` of the version the decision is based on (`expected_version`), which every
    rival for the next version shares: the MongoDB adapter files the commit's fence by it
    (shared/adapters/mongo_fences.py). None: the commit is fenced as a late one."""
    new_task_ids: Sequence[str] | None = None
    """The current executions this decision created (in the document's tasks, not in the base
    version's): an adapter that indexes executions by id (SQLite) writes only these. None: not
    known, so every current one is indexed again (a no-op for those already there)."""


@dataclass(frozen=True)
class ExecutionHead:
    """What the api needs of a current execution to answer a worker: no input, no output."""

    task_id: str
    reference_task_name: str
    task_type: str
    status: TaskStatus
    dispatch_count: int
    retry_count: int


@dataclass(frozen=True)
class WorkflowHeads:
    """A workflow's status and the heads of its current executions, by node reference: read
    without parsing the whole document (a 1,000-way fork's document is a megabyte)."""

    workflow_id: str
    status: WorkflowStatus
    executions: dict[str, ExecutionHead]

    def by_task_id(self, task_id: str) -> ExecutionHead | None:
        return next((head for head in self.executions.values() if head.task_id == task_id), None)


def heads_of(document: WorkflowDocument) -> WorkflowHeads:
    return WorkflowHeads(
        document.workflow_id,
        document.state.status,
        {
            ref: ExecutionHead(
                t.task_id, t.reference_task_name, t.task_type, t.status, t.dispatch_count, t.retry_count
            )
            for ref, t in document.state.tasks.items()
        },
    )


def encode_heads(state: WorkflowState) -> str:
    """The compact form both adapters keep beside each document (JSON text: a list of
    [ref, taskId, referenceTaskName, taskType, status, dispatchCount, retryCount])."""
    return json.dumps(
        [
            [
                ref,
                t.task_id,
                t.reference_task_name,
                t.task_type,
                t.status.value,
                t.dispatch_count,
                t.retry_count,
            ]
            for ref, t in state.tasks.items()
        ],
        separators=(",", ":"),
    )


def decode_heads(workflow_id: str, status: str, text: str) -> WorkflowHeads:
    return WorkflowHeads(
        workflow_id,
        WorkflowStatus(status),
        {
            ref: ExecutionHead(task_id, reference, task_type, TaskStatus(task_status), dispatches, retries)
            for ref, task_id, reference, task_type, task_status, dispatches, retries in json.loads(text)
        },
    )


async def commit_one(store: Store, document: WorkflowDocument, expected_version: int) -> bool:
    [won] = await store.commit_workflows([Commit(document, expected_version)])
    return won


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

    async def has_workflow_def(self, name: str, version: int | None = None) -> bool:
        """Whether `get_workflow_def` would find one, without reading or parsing it: a start
        only needs to know (a definition can be large, and every start asks)."""
        ...

    async def list_workflow_defs(self) -> list[WorkflowDef]: ...
    async def delete_workflow_def(self, name: str, version: int) -> bool:
        """Forget one version; True if it existed. Running executions keep their snapshot."""
        ...

    async def definitions_generation(self) -> int | None:
        """A number that changes whenever any workflow or task definition is registered,
        replaced or deleted, by anyone: while it reads the same, a snapshot resolved from the
        definitions still holds. None: this store cannot tell, so nothing may be kept."""
        ...

    async def put_task_def(self, task_def: TaskDef) -> None: ...
    async def list_task_defs(self) -> list[TaskDef]:
        """Every registered TaskDef, by name."""
        ...

    async def get_task_defs(self, names: Sequence[str]) -> dict[str, TaskDef]: ...
    async def delete_task_def(self, name: str) -> bool:
        """Forget a TaskDef; True if it existed. Snapshots already taken keep their copy."""
        ...

    # ---- event handlers ----
    async def put_event_handler(self, handler: EventHandler, *, create: bool) -> bool:
        """create: store a new handler (False if one has its name); else replace the handler of
        its name (False if there is none)."""
        ...

    async def list_event_handlers(self) -> list[EventHandler]: ...
    async def delete_event_handler(self, name: str) -> bool: ...

    # ---- workflows ----
    async def load_workflow(self, workflow_id: str) -> WorkflowDocument | None:
        """The current document; its `outbox` holds only messages not yet marked sent."""
        ...

    async def load_workflows(
        self, workflow_ids: Sequence[str], running_only: bool = False
    ) -> dict[str, WorkflowDocument]:
        """The existing documents among `workflow_ids`, by id. With `running_only` the caller
        needs only executions that have not finished (a decider about to start new ones: a
        finished one under the id is found by the create's uniqueness instead); an adapter may
        then leave finished ones out where looking for them costs more (MongoDB)."""
        ...

    async def load_heads(
        self, workflow_ids: Sequence[str], running_only: bool = False
    ) -> dict[str, WorkflowHeads]:
        """Status and current-execution heads of the existing workflows among `workflow_ids`
        (what `load_workflows` would say, at a fraction of the cost for large documents).
        `running_only` as for `load_workflows`: an adapter may leave finished ones out only where
        looking for them costs more (FerretDB), since an api's start polls with it."""
        ...

    async def list_workflows(
        self, *, status: WorkflowStatus | None = None, name: str | None = None, limit: int = 100
    ) -> list[WorkflowDocument]:
        """Executions filtered by status and/or workflow name, most recently updated first
        (what `cairn ls` and `GET /api/workflow/running/{name}` show)."""
        ...

    async def search_workflows(self, request: SearchRequest) -> tuple[int, list[WorkflowDocument]]:
        """Conductor's workflow search (shared/search.py): the exact number of executions that
        match, and the page `request.start`, `request.size` of them in `request.sort` order."""
        ...

    async def search_tasks(self, request: SearchRequest) -> tuple[int, list[TaskState]]:
        """Task records (executions that ended) matching a query over shared/search.TASK_FIELDS:
        the exact count and one page. Not indexed: a scan, for operators."""
        ...

    async def find_task_workflow(self, task_id: str) -> str | None:
        """The id of the workflow holding task execution `task_id` (live or in history), so an
        API given only a task id can load its workflow."""
        ...

    async def commit_workflows(self, commits: Sequence[Commit]) -> list[bool]:
        """Group commit. For each commit, first write its task records (idempotent upserts), then
        make its document current iff the stored version is still `expected_version` (0: the
        document must not exist yet). Result i is False when commit i lost to another writer:
        reload and decide again. Commits of different workflows never affect each other."""
        ...

    async def remove_workflow(self, workflow_id: str) -> bool:
        """Delete an execution and its task history (Conductor's remove); True if it existed.
        Callers remove only finished executions: nothing is left for the decider to drive."""
        ...

    async def mark_outboxes_sent(self, published: Sequence[tuple[str, int]]) -> None:
        """Clear the outbox of each (workflow id, version) after publishing it; no version change.
        A no-op where the document moved on: the newer version's outbox holds ours."""
        ...

    async def find_unpublished(self, older_than: int, limit: int) -> list[str]:
        """Workflows whose outbox was committed before `older_than` and is still not marked sent."""
        ...

    async def find_needing_attention(
        self, before: int, after: tuple[int, str] | None, limit: int
    ) -> list[tuple[int, str]]:
        """(attention time, workflow id) of RUNNING workflows whose attention time
        (shared/core/attention.py, kept with each commit) is before `before`, in that order,
        strictly after the cursor `after`: the sweeper pages through all of them, whatever the
        number of healthy idle workflows."""
        ...

    async def housekeeping(self, now: int) -> None:
        """Periodic maintenance the adapter needs (pruning); the sweeper calls it."""
        ...

    async def purge_finished(self, ended_before: int, limit: int) -> list[str]:
        """Retention: delete up to `limit` finished executions last written before
        `ended_before` (epoch ms) with everything they own — task records, task claims, index
        rows, timers, fences, outbox — and return their ids. Never touches an execution that is
        not finished; the document goes last, so a purge cut short is completed by the next."""
        ...

    # ---- code workflows' histories ----
    async def load_history(
        self, workflow_id: str, generation: int, firsts: Sequence[int]
    ) -> list[HistoryChunk]:
        """The chunks of one generation of a code workflow's history that start at `firsts` (the
        document's `chunkStarts`: read by id, which every MongoDB-protocol server indexes), in
        any order (see `stitch_history`). Removed with the workflow."""
        ...

    # ---- task records ----
    async def upsert_tasks(self, tasks: Sequence[TaskState]) -> None:
        """Write task records (history: executions in a terminal state) under their ids."""
        ...

    async def get_task(self, task_id: str) -> TaskState | None: ...
    async def list_tasks(self, workflow_id: str) -> list[TaskState]:
        """Every execution of the workflow (retries included), in scheduling order."""
        ...

    async def claim_task(self, task_id: str, worker_id: str, now: int, lease_ms: int) -> bool:
        """Hand task execution `task_id` to one poller. True for the first claim, or when the
        previous claim's lease has run out; False while another claim (any worker's) is live.
        This is what keeps two HTTP pollers, on one api instance or several, from receiving the
        same execution when the bus delivers its message twice."""
        ...

    async def renew_task_claim(self, task_id: str, holder: str, now: int, lease_ms: int) -> bool:
        """Extend `holder`'s claim of task execution `task_id` to `now + lease_ms` (a renewal never
        shortens a claim). True unless another holder's claim is live: the holder's own claim is
        extended whether or not its lease ran out, provided nobody claimed the execution since
        (an execution nobody holds is simply claimed). False once a rival claimed it after the
        holder's lease ran out: the execution stays the rival's.

        The api claims a hand-out for a few seconds and renews it to the task's response timeout
        only once the poller has its answer (services/api/dispatch.py): a hand-out lost with its
        process or its poller is free again in seconds, not after responseTimeoutSeconds."""
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
