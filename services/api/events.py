"""Conductor's event handler API (`/api/event`): register, update, list, delete. The events
service (services/events) reads the handlers from the store and consumes their sources."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Response
from pydantic import ValidationError

from services.api.context import ApiContext, ApiError, context
from shared.models.events import EventHandler, handler_problems

router = APIRouter(prefix="/api/event", tags=["event handlers"])
Ctx = Annotated[ApiContext, Depends(context)]


def _handler(body: dict[str, Any]) -> EventHandler:
    try:
        handler = EventHandler.model_validate(body)
    except ValidationError as error:
        problems = [(".".join(str(p) for p in e["loc"]), e["msg"]) for e in error.errors()]
        raise ApiError(400, "; ".join(f"{path}: {text}" for path, text in problems), problems) from None
    problems = handler_problems(handler)
    if problems:
        raise ApiError(400, "; ".join(f"{path}: {text}" for path, text in problems), problems)
    return handler


def _json(handler: EventHandler) -> dict[str, Any]:
    return handler.model_dump(by_alias=True, mode="json", exclude_none=True)


@router.post("", status_code=200)
async def add_event_handler(ctx: Ctx, body: Annotated[dict[str, Any], Body()]) -> Response:
    """Register a new handler (409 if one has its name)."""
    handler = _handler(body)
    if not await ctx.store.put_event_handler(handler, create=True):
        raise ApiError(409, f"EventHandler with name {handler.name} already exists!")
    return Response(status_code=200)


@router.put("", status_code=200)
async def update_event_handler(ctx: Ctx, body: Annotated[dict[str, Any], Body()]) -> Response:
    """Replace the handler of this name (404 if there is none)."""
    handler = _handler(body)
    if not await ctx.store.put_event_handler(handler, create=False):
        raise ApiError(404, f"EventHandler with name {handler.name} not found!")
    return Response(status_code=200)


@router.get("")
async def list_event_handlers(ctx: Ctx) -> list[dict[str, Any]]:
    return [_json(handler) for handler in await ctx.store.list_event_handlers()]


@router.get("/{event}")
async def event_handlers_for(ctx: Ctx, event: str, activeOnly: bool = True) -> list[dict[str, Any]]:
    """The handlers of one source (`kafka:orders`), the active ones unless activeOnly=false."""
    return [
        _json(handler)
        for handler in await ctx.store.list_event_handlers()
        if handler.event == event and (handler.active or not activeOnly)
    ]


@router.delete("/{name}", status_code=200)
async def remove_event_handler(ctx: Ctx, name: str) -> Response:
    if not await ctx.store.delete_event_handler(name):
        raise ApiError(404, f"EventHandler with name {name} not found!")
    return Response(status_code=200)
