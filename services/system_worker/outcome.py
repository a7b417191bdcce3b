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

    @staticmethod
    def failed(reason: str, output: dict[str, Any] | None = None) -> Outcome:
        return Outcome(TaskStatus.FAILED, output or {}, reason)
