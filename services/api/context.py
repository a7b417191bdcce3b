"""What every route needs, and the errors routes raise (rendered as Conductor's error body)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fastapi import Request

from services.api.dispatch import TaskDispatcher
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
        error: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.problems = problems or []
        self.error = error
        """Orkes's reason code of a 401 (EXPIRED_TOKEN, INVALID_TOKEN): clients renew on it."""
