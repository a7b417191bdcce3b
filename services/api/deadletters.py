"""Dead letters over HTTP (a Cairn extension; Conductor has no such API): list the newest, show
one, replay one to the topic it came from."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query

from services.api.context import ApiContext, ApiError, context
from shared.deadletters import DeadLetterNotFoundError, find_letter, letter_json, list_letters, replay_letter

router = APIRouter(prefix="/api/deadletters", tags=["deadletters"])
Ctx = Annotated[ApiContext, Depends(context)]


@router.get("")
async def dead_letters(ctx: Ctx, limit: Annotated[int, Query(ge=1, le=1000)] = 100) -> list[dict[str, Any]]:
    """The newest dead letters, newest first: why, where from, and the original message."""
    return await list_letters(ctx.bus, ctx.topics.dead_letter, limit)


@router.get("/{letter_id}")
async def dead_letter(ctx: Ctx, letter_id: str) -> dict[str, Any]:
    try:
        return letter_json(await find_letter(ctx.bus, ctx.topics.dead_letter, letter_id))
    except DeadLetterNotFoundError as error:
        raise ApiError(404, f"{error}; list them with GET /api/deadletters") from None


@router.post("/{letter_id}/replay")
async def replay(ctx: Ctx, letter_id: str) -> dict[str, Any]:
    """Publish the original message again, to its topic, with its key."""
    try:
        return await replay_letter(ctx.bus, ctx.topics.dead_letter, letter_id)
    except DeadLetterNotFoundError as error:
        raise ApiError(404, str(error)) from None
