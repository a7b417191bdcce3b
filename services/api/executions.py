"""Conductor's workflow execution API. Writes are commands published to the decider's topics;
the api never writes workflow state itself, it only reads the store."""

from __future__ import annotations

import asyncio
import uuid
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Depends, Header, Query, Response
from fastapi.responses import PlainTextResponse
from pydantic import Field

from services.api.code_workflows import APP_PATTERN, start_code_workflow
from services.api.conductor import workflow_json, workflow_summary_json
from services.api.context import ApiContext, ApiError, context, is_workflow_id, refuse_past_limits
from services.api.search_params import parsed_search
from services.api.views import load_executions
from services.decider.code_turns import DEFAULT_APP
from shared import idempotency, telemetry
from shared.core.validation import DefinitionError, parse_workflow_def
from shared.created_watch import created_watch
from shared.messaging import outgoing
from shared.models.documents import WorkflowDocument
from shared.models.limits import (
    JAVA_INT_MAX,
    NAME_PATTERN,
    NAME_RULE,
    DefinitionName,
    Text,
    WorkflowId,
    definition_limits,
    payload_problems,
)
from shared.models.messages import IdempotencyStrategy, StartWorkflow, TerminateWorkflow
from shared.models.runtime import CamelModel, WorkflowStatus
from shared.search import (
    MAX_SIZE,
    AllOf,
    Condition,
    SearchRequest,
    free_text_of,
)

router = APIRouter(prefix="/api/workflow", tags=["workflow"])
Ctx = Annotated[ApiContext, Depends(context)]


class StartWorkflowRequest(CamelModel):
    """Conductor's StartWorkflowRequest (fields Cairn does not use are accepted and ignored).
    With `workflowDef`, that definition runs (validated like a registration) instead of a
    registered one."""

    name: DefinitionName
    version: int | None = Field(default=None, ge=1, le=JAVA_INT_MAX)
    correlation_id: Text | None = None
    input: dict[str, Any] = Field(default_factory=dict)
    workflow_id: WorkflowId | None = Field(
        default=None, description="Cairn extension: choose the id (idempotent start)."
    )
    workflow_def: dict[str, Any] | None = None
    idempotency_key: Text | None = None
    idempotency_strategy: IdempotencyStrategy = IdempotencyStrategy.FAIL
    kind: Literal["code"] | None = Field(
        default=None, description="Cairn extension: `code` starts a code workflow (docs/code-workflows.md)."
    )
    app: Annotated[str, Field(pattern=APP_PATTERN)] | None = Field(
        default=None, description="Cairn extension: the app whose runtime replays a code workflow."
    )


async def start_execution(ctx: ApiContext, request: StartWorkflowRequest) -> str:
    """Start one execution (validating an inline definition); its id once it is readable.
    Everything is checked before the start is published: a refused start leaves no trace."""
    if not NAME_PATTERN.fullmatch(request.name):  # a path parameter skips the model's check
        raise ApiError(
            400, f"name: {request.name[:60]!r} is not a valid name: {NAME_RULE}", [("name", NAME_RULE)]
        )
    refuse_past_limits(ctx, request.input, "input")
    if request.kind == "code":
        return await start_code_workflow(
            ctx,
            StartWorkflow(
                id=f"start:{request.workflow_id or 'new'}:{uuid.uuid4()}",
                workflow_id=request.workflow_id or uuid.uuid4().hex,
                name=request.name,
                input=request.input,
                correlation_id=request.correlation_id,
                kind="code",
                app=request.app or DEFAULT_APP,
            ),
        )
    inline: dict[str, Any] | None = None
    if request.workflow_def is not None:
        problems = payload_problems(
            request.workflow_def, "workflowDef", definition_limits(ctx.payload_limits)
        )
        if problems:
            raise ApiError(400, "; ".join(f"{path}: {text}" for path, text in problems), problems)
        # Validated like a registration, run from its snapshot, registered nowhere.
        try:
            inline = parse_workflow_def(request.workflow_def).to_json_dict()
        except DefinitionError as error:
            problems = [(f"workflowDef.{path}", text) for path, text in error.problems]
            raise ApiError(400, f"workflowDef: {error}", problems) from None
    elif not await ctx.store.has_workflow_def(request.name, request.version):
        which = f"version {request.version} of " if request.version is not None else ""
        raise ApiError(404, f"no {which}workflow definition named {request.name!r}; register it first")
    key = request.idempotency_key
    if key is not None:
        if request.workflow_id is not None:
            raise ApiError(
                400,
                "workflowId and idempotencyKey: give one (a keyed execution's id is derived from its key)",
            )
        resolution = await idempotency.resolve(ctx.store, request.name, key, request.idempotency_strategy)
        if resolution.action == "existing":
            return resolution.workflow_id
        if resolution.action == "conflict":
            raise ApiError(409, resolution.conflict_message(key))
        workflow_id = resolution.workflow_id
        message_id = f"start:{workflow_id}:{uuid.uuid4()}"  # which of racing starts created it
    else:
        workflow_id = request.workflow_id or str(uuid.uuid4())
        message_id = f"start:{workflow_id}"
    message = StartWorkflow(
        id=message_id,
        workflow_id=workflow_id,
        name=request.name,
        version=request.version,
        input=request.input,
        correlation_id=request.correlation_id,
        workflow_def=inline,
        idempotency_key=key,
        idempotency_strategy=request.idempotency_strategy if key is not None else None,
    )
    await ctx.bus.publish([outgoing(ctx.topics.workflow_start, message, workflow_id, telemetry.inject())])
    visible = await _until_visible(ctx, workflow_id)
    if visible and key is not None:
        document = await ctx.store.load_workflow(workflow_id)
        if document is not None and document.state.started_by != message_id:  # another start won
            if request.idempotency_strategy is IdempotencyStrategy.RETURN_EXISTING:
                return workflow_id
            raise ApiError(409, f"Workflow with the idempotency key {key} already exists ({workflow_id})")
    if not visible:
        raise ApiError(
            503,
            f"workflow {workflow_id!r} was started (its start is durable) but the engine has not made it "
            f"readable within {ctx.start_visible_within_s:g} s: it is catching up. Read it with "
            f"GET /api/workflow/{workflow_id} in a few seconds; starting again without a workflowId "
            "would start a second execution",
            headers={"Retry-After": "2", "X-Cairn-Workflow-Id": workflow_id},
        )
    return workflow_id


REPLY_DEFERRAL_S = 0.002
"""How long a start woken by its decider waits before it replies. The decision that created the
execution has just handed its first task to a waiting worker on this same event loop; replying at
once put the reply (and the client's process, on a small machine) in that hand-out's way:
W2 K=1 p50 7.1 and 7.5 ms, against 5.9 and 5.9 with this deferral and 6.0 and 6.3 before the
watch (two alternating rounds, benchmarks/README.md). A poll's second look came 2 ms after the
start's first too."""


async def _until_visible(ctx: ApiContext, workflow_id: str) -> bool:
    """Wait (bounded by CAIRN_API_START_VISIBLE_S) until the decider committed the new
    execution: read-your-writes for the caller, so an id this api returns never answers 404.
    A decider of this process says so at once (shared/created_watch.py), and then the store is
    read only now and then, for one in another process; otherwise it is polled, soon at first."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + ctx.start_visible_within_s
    watch = created_watch(ctx.store)
    with watch.waiting(workflow_id) as created:
        delay = 0.05 if watch.announced else 0.002
        while True:
            # Among running executions: a look for an id not stored yet costs more among finished
            # ones (a scan on FerretDB). There, one that finished at once is found by the last look.
            if created.done():  # let the decision's dispatch go out before this reply
                await asyncio.sleep(REPLY_DEFERRAL_S)
                return True
            if await ctx.store.load_heads([workflow_id], running_only=True):
                return True
            if loop.time() >= deadline:
                return bool(await ctx.store.load_heads([workflow_id]))
            await asyncio.wait([created], timeout=min(delay, max(deadline - loop.time(), 0)))
            delay = min(delay * 2, 0.1)


async def _document(ctx: ApiContext, workflow_id: str) -> WorkflowDocument:
    document = await ctx.store.load_workflow(workflow_id) if is_workflow_id(workflow_id) else None
    if document is None:
        raise ApiError(404, f"no workflow with id {workflow_id!r}")
    return document


@router.post("", response_class=PlainTextResponse)
async def start_workflow(ctx: Ctx, request: StartWorkflowRequest) -> str:
    """Start an execution from a StartWorkflowRequest; returns its id as text."""
    return await start_execution(ctx, request)


@router.get("/running/{name}")
async def running_workflows(
    ctx: Ctx,
    name: str,
    version: Annotated[int | None, Query(ge=1, le=JAVA_INT_MAX)] = None,
    limit: Annotated[int, Query(ge=1, le=5000)] = 1000,
) -> list[str]:
    documents = await ctx.store.list_workflows(status=WorkflowStatus.RUNNING, name=name, limit=limit)
    return [d.workflow_id for d in documents if version is None or d.state.workflow_version == version]


@router.get("/search")
async def search_workflows(
    ctx: Ctx,
    start: Annotated[int, Query(ge=0, le=100_000)] = 0,
    size: Annotated[int, Query(ge=0)] = 100,
    sort: str | None = None,
    freeText: str | None = None,
    query: str | None = None,
    status: WorkflowStatus | None = None,
    workflowType: str | None = None,
) -> dict[str, Any]:
    """Conductor's search: its query language, freeText, sort, start and size, answered as a
    SearchResult of WorkflowSummary with the exact totalHits (shared/search.py). `status` and
    `workflowType` parameters, Cairn's own, are conditions ANDed to the query."""
    parsed, order = parsed_search(query, sort, size, "workflows")
    extra = [
        Condition(field, "=", (value,))
        for field, value in (("status", status), ("workflowType", workflowType))
        if value
    ]
    if extra:
        parsed = AllOf((*extra, parsed)) if parsed is not None else AllOf(tuple(extra))
    request = SearchRequest(parsed, free_text_of(freeText), order, start, size)
    total, documents = await ctx.store.search_workflows(request)
    return {"totalHits": total, "results": [workflow_summary_json(d) for d in documents]}


@router.get("/{name}/correlated/{correlation_id}")
async def correlated_workflows(
    ctx: Ctx, name: str, correlation_id: str, includeClosed: bool = False, includeTasks: bool = False
) -> list[dict[str, Any]]:
    """The executions of `name` with this correlationId (RUNNING only unless includeClosed:
    as in Conductor, a PAUSED one counts as closed here), oldest first."""
    return (await _correlated(ctx, name, [correlation_id], includeClosed, includeTasks))[correlation_id]


@router.post("/{name}/correlated")
async def correlated_workflows_of_many(
    ctx: Ctx,
    name: str,
    correlation_ids: Annotated[list[str], Body(max_length=1000)],
    includeClosed: bool = False,
    includeTasks: bool = False,
) -> dict[str, list[dict[str, Any]]]:
    """Conductor's batch form: correlationId -> its executions."""
    return await _correlated(ctx, name, correlation_ids, includeClosed, includeTasks)


async def _correlated(
    ctx: ApiContext, name: str, correlation_ids: list[str], include_closed: bool, include_tasks: bool
) -> dict[str, list[dict[str, Any]]]:
    answers: dict[str, list[dict[str, Any]]] = {}
    for correlation_id in dict.fromkeys(correlation_ids):
        conditions: list[Condition] = [  # IN: exact (`=` takes `*` as a wildcard)
            Condition("workflowType", "IN", (name,)),
            Condition("correlationId", "IN", (correlation_id,)),
        ]
        if not include_closed:
            conditions.append(Condition("status", "=", (WorkflowStatus.RUNNING.value,)))
        request = SearchRequest(AllOf(tuple(conditions)), None, (("startTime", False),), 0, MAX_SIZE)
        _, documents = await ctx.store.search_workflows(request)
        answers[correlation_id] = [
            workflow_json(d, await load_executions(ctx.store, d) if include_tasks else None)
            for d in documents
        ]
    return answers


@router.post("/{name}", response_class=PlainTextResponse)
async def start_workflow_by_name(
    ctx: Ctx,
    name: str,
    body: Annotated[dict[str, Any] | None, Body()] = None,
    version: Annotated[int | None, Query(ge=1, le=JAVA_INT_MAX)] = None,
    correlationId: Annotated[str | None, Query(max_length=1000)] = None,
    idempotency_key: Annotated[str | None, Header(alias="X-Idempotency-key", max_length=1000)] = None,
    on_conflict: Annotated[IdempotencyStrategy, Header(alias="X-on-conflict")] = IdempotencyStrategy.FAIL,
) -> str:
    """Start an execution of `name` with the body as its input; returns its id as text. Orkes's
    headers X-Idempotency-key and X-on-conflict make it an idempotent start."""
    request = StartWorkflowRequest(
        name=name,
        version=version,
        correlation_id=correlationId,
        input=body or {},
        idempotency_key=idempotency_key,
        idempotency_strategy=on_conflict,
    )
    return await start_execution(ctx, request)


@router.get("/{workflow_id}")
async def get_workflow(ctx: Ctx, workflow_id: str, includeTasks: bool = True) -> dict[str, Any]:
    document = await _document(ctx, workflow_id)
    tasks = await load_executions(ctx.store, document) if includeTasks else None
    return workflow_json(document, tasks)


async def terminate(
    ctx: ApiContext, workflow_id: str, reason: str | None, trigger_failure_workflow: bool
) -> None:
    document = await _document(ctx, workflow_id)
    if document.state.status.is_terminal:
        raise ApiError(409, f"workflow {workflow_id!r} already finished ({document.state.status.value})")
    message = TerminateWorkflow(
        id=f"terminate:{uuid.uuid4()}",
        workflow_id=workflow_id,
        reason=reason,
        trigger_failure_workflow=trigger_failure_workflow,
    )
    await ctx.bus.publish([outgoing(ctx.topics.workflow_command, message, workflow_id, telemetry.inject())])


@router.delete("/{workflow_id}", status_code=200)
async def terminate_workflow(
    ctx: Ctx, workflow_id: str, reason: str | None = None, triggerFailureWorkflow: bool = False
) -> Response:
    """Stop a running (or paused) execution; with triggerFailureWorkflow its failureWorkflow
    starts, as after a failure."""
    await terminate(ctx, workflow_id, reason, triggerFailureWorkflow)
    return Response(status_code=200)


@router.delete("/{workflow_id}/remove", status_code=200)
async def remove_workflow(ctx: Ctx, workflow_id: str) -> Response:
    """Delete a finished execution and its task history. A running one must be terminated first
    (removing it under the decider's feet would resurrect it on the next event)."""
    document = await _document(ctx, workflow_id)
    if not document.state.status.is_terminal:
        raise ApiError(409, f"workflow {workflow_id!r} is {document.state.status.value}; terminate it first")
    await ctx.store.remove_workflow(workflow_id)
    return Response(status_code=200)
