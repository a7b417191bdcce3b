"""What every route needs, and the errors routes raise (rendered as Conductor's error body)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fastapi import Request

from services.api.dispatch import TaskDispatcher
from shared.models.limits import (
    DEFAULT_PAYLOAD_LIMITS,
    WORKFLOW_ID_PATTERN,
    LimitError,
    PayloadLimits,
    check_payload,
)
from shared.ports.bus import Bus
from shared.ports.store import Store
from shared.topics import Topics

if TYPE_CHECKING:
    from services.api.auth import ApiAuth


@dataclass
class ApiContext:
    store: Store
    bus: Bus
    topics: Topics
    clock: Callable[[], int]
    dispatcher: TaskDispatcher
    payload_limits: PayloadLimits = DEFAULT_PAYLOAD_LIMITS
    """CAIRN_MAX_PAYLOAD_*: what a start's input, a signal's output or a worker's result may be."""
    start_visible_within_s: float = 5.0
    """How long `POST /api/workflow` waits for the new execution to become readable, so a client
    that starts and then reads (as Conductor clients do) finds it."""
    auth: ApiAuth | None = None
    """The api's keys and token signer; None: no authentication (services/api/auth.py)."""


async def context(request: Request) -> ApiContext:
    """Async so FastAPI runs it inline instead of in its thread pool (a sync dependency costs a
    thread hand-off per request)."""
    ctx: ApiContext = request.app.state.cairn
    return ctx


class ApiError(Exception):
    """An error answer: HTTP status, a message saying what is wrong and what to do, and for
    invalid definitions the (field path, message) pairs."""

    def __init__(
        self,
        status: int,
        message: str,
        problems: list[tuple[str, str]] | None = None,
        headers: dict[str, str] | None = None,
        error: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.problems = problems or []
        self.headers = headers or {}
        self.error = error
        """Orkes's reason code of a 401 (EXPIRED_TOKEN, INVALID_TOKEN): clients renew on it."""


def refuse_past_limits(ctx: ApiContext, value: object, where: str) -> None:
    """A 400 naming the first member of `value` past the payload limits (nothing is published)."""
    try:
        check_payload(value, where, ctx.payload_limits)
    except LimitError as error:
        raise ApiError(400, str(error), error.problems) from None


def is_workflow_id(text: str) -> bool:
    """Whether `text` can be a workflow id at all: an id no workflow can have is answered with
    404 without asking the store (a NUL or a 5,000-character id never reaches a query)."""
    return WORKFLOW_ID_PATTERN.fullmatch(text) is not None
