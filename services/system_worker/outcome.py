"""What running one system task came to: the status, output and reason of its TaskResult."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from shared.models.runtime import TaskStatus


@dataclass(frozen=True)
class Outcome:
    status: TaskStatus
    output: dict[str, Any] = field(default_factory=dict)
    reason: str | None = None
    retry_after_s: int = 0
    """A FAILED attempt's soonest retry (a provider's Retry-After), as callbackAfterSeconds."""

    @staticmethod
    def failed(reason: str, output: dict[str, Any] | None = None, retry_after_s: int = 0) -> Outcome:
        return Outcome(TaskStatus.FAILED, output or {}, reason, retry_after_s)

    @staticmethod
    def terminal(reason: str, output: dict[str, Any] | None = None) -> Outcome:
        """A failure no retry can fix (bad input, a refused key): FAILED_WITH_TERMINAL_ERROR."""
        return Outcome(TaskStatus.FAILED_WITH_TERMINAL_ERROR, output or {}, reason)
