"""Conductor's metadata API: task and workflow definitions."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Path, Query, Response

from services.api.context import ApiContext, ApiError, context
from shared.core.validation import DefinitionError, parse_task_def, parse_workflow_def
from shared.models.definitions import TaskDef, WorkflowDef
from shared.models.limits import JAVA_INT_MAX, PayloadLimits, definition_limits, payload_problems

router = APIRouter(prefix="/api/metadata", tags=["metadata"])
Ctx = Annotated[ApiContext, Depends(context)]


def _dump(model: TaskDef | WorkflowDef) -> dict[str, Any]:
    return model.model_dump(by_alias=True, mode="json", exclude_none=True)


def _prefixed(problems: list[tuple[str, str]], prefix: str) -> list[tuple[str, str]]:
    """Problem paths inside item `[i]` of a list body: `tasks[0].name` -> `[2].tasks[0].name`."""
    if not prefix:
        return problems
    return [(prefix + ("" if path == "(root)" else f".{path}"), text) for path, text in problems]


def _invalid(problems: list[tuple[str, str]], what: str) -> ApiError:
    return ApiError(
        400, f"invalid {what}: " + "; ".join(f"{path}: {text}" for path, text in problems), problems
    )


def _refuse_past_limits(data: Any, prefix: str, limits: PayloadLimits, what: str) -> None:
    """Before parsing: a definition nested or sized past the limits is refused whole (pydantic
    would otherwise walk all of it, and the stores could not read it back)."""
    problems = payload_problems(data, prefix or "(root)", limits)
    if problems:
        raise _invalid(problems, what)


def _parse_workflow(ctx: ApiContext, data: Any, prefix: str = "") -> WorkflowDef:
    _refuse_past_limits(data, prefix, definition_limits(ctx.payload_limits), "workflow definition")
    try:
        return parse_workflow_def(data)
    except DefinitionError as error:
        raise _invalid(_prefixed(error.problems, prefix), "workflow definition") from None


def _parse_task(ctx: ApiContext, data: Any, prefix: str = "") -> TaskDef:
    _refuse_past_limits(data, prefix, ctx.payload_limits, "task definition")
    try:
        return parse_task_def(data)
    except DefinitionError as error:
        raise _invalid(_prefixed(error.problems, prefix), "task definition") from None


def _require_list(body: Any, what: str) -> list[Any]:
    if not isinstance(body, list):
        raise ApiError(
            400,
            f"(root): expected a JSON list of {what}, got {type(body).__name__}",
            [("(root)", f"expected a list of {what}")],
        )
    return body


@router.post("/taskdefs", status_code=200)
async def register_task_defs(ctx: Ctx, body: Annotated[Any, Body()]) -> Response:
    """Create or replace task definitions (a JSON list, as Conductor takes them)."""
    items = _require_list(body, "task definitions")
    task_defs = [_parse_task(ctx, item, f"[{index}]") for index, item in enumerate(items)]
    for task_def in task_defs:
        await ctx.store.put_task_def(task_def)
    return Response(status_code=200)


@router.put("/taskdefs", status_code=200)
async def update_task_def(ctx: Ctx, body: Annotated[Any, Body()]) -> Response:
    task_def = _parse_task(ctx, body)
    await ctx.store.put_task_def(task_def)
    return Response(status_code=200)


@router.delete("/taskdefs/{name}", status_code=200)
async def delete_task_def(ctx: Ctx, name: str) -> Response:
    """Unregister a TaskDef. Running executions keep the copy in their definition snapshot."""
    if not await ctx.store.delete_task_def(name):
        raise ApiError(404, f"no task definition named {name!r}")
    return Response(status_code=200)


@router.get("/taskdefs")
async def list_task_defs(ctx: Ctx) -> list[dict[str, Any]]:
    """Every registered task definition, by name (Conductor's list)."""
    return [_dump(task_def) for task_def in await ctx.store.list_task_defs()]


@router.get("/taskdefs/{name}")
async def get_task_def(ctx: Ctx, name: str) -> dict[str, Any]:
    found = (await ctx.store.get_task_defs([name])).get(name)
    if found is None:
        raise ApiError(
            404, f"no task definition named {name!r}; register it with POST /api/metadata/taskdefs"
        )
    return _dump(found)


@router.post("/workflow", status_code=200)
async def register_workflow_def(ctx: Ctx, body: Annotated[Any, Body()], overwrite: bool = True) -> Response:
    """Register one workflow definition. Conductor refuses an existing name+version unless
    `overwrite`; Cairn keeps that rule when `overwrite=false` is passed."""
    definition = _parse_workflow(ctx, body)
    if not overwrite and await ctx.store.has_workflow_def(definition.name, definition.version):
        raise ApiError(409, f"workflow {definition.name!r} version {definition.version} already exists")
    await ctx.store.put_workflow_def(definition)
    return Response(status_code=200)


@router.put("/workflow", status_code=200)
async def update_workflow_defs(ctx: Ctx, body: Annotated[Any, Body()]) -> dict[str, Any]:
    """Create or replace several workflow definitions; all are validated before any is stored."""
    items = _require_list(body, "workflow definitions")
    definitions = [_parse_workflow(ctx, item, f"[{index}]") for index, item in enumerate(items)]
    for definition in definitions:
        await ctx.store.put_workflow_def(definition)
    return {"bulkSuccessfulResults": [d.name for d in definitions], "bulkErrorResults": {}}


@router.get("/workflow/{name}")
async def get_workflow_def(
    ctx: Ctx, name: str, version: Annotated[int | None, Query(ge=1, le=JAVA_INT_MAX)] = None
) -> dict[str, Any]:
    found = await ctx.store.get_workflow_def(name, version)
    if found is None:
        which = f"version {version} of " if version is not None else ""
        raise ApiError(
            404, f"no {which}workflow definition named {name!r}; list them with GET /api/metadata/workflow"
        )
    return _dump(found)


@router.delete("/workflow/{name}/{version}", status_code=200)
async def delete_workflow_def(
    ctx: Ctx, name: str, version: Annotated[int, Path(ge=1, le=JAVA_INT_MAX)]
) -> Response:
    """Unregister one version (Conductor's DELETE). Running executions finish on the snapshot
    they started with; new starts of it are refused with 404."""
    if not await ctx.store.delete_workflow_def(name, version):
        raise ApiError(404, f"no version {version} of workflow definition named {name!r}")
    return Response(status_code=200)


@router.get("/workflow")
async def list_workflow_defs(ctx: Ctx) -> list[dict[str, Any]]:
    return [_dump(definition) for definition in await ctx.store.list_workflow_defs()]
