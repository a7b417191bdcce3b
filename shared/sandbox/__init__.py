"""The scripts sandbox a decider uses: JavaScript in QuickJS in this process (QuickJS enforces its
own time and memory limits), jq in a pool of helper processes (jq_pool.py: jq cannot be stopped
inside a process)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from shared.core.scripting import ScriptLimits, run_javascript
from shared.sandbox.jq_pool import JqPool

__all__ = ["JqPool", "PooledSandbox"]


class PooledSandbox:
    """A `shared.core.scripting.Sandbox` for services; helpers start on first use of jq. Close it
    (`close`, or `aclose` from a loop) to stop them."""

    def __init__(self, limits: ScriptLimits, jq_workers: int) -> None:
        self.limits = limits
        self.jq_pool = JqPool(jq_workers, limits)

    def javascript(self, script: str, bindings: Mapping[str, Any], *, now_ms: int, seed: str) -> Any:
        return run_javascript(script, bindings, now_ms=now_ms, seed=seed, limits=self.limits)

    def jq(self, query: str, data: Any, *, now_ms: int) -> list[Any]:
        return self.jq_pool.evaluate(query, data, now_ms)

    def close(self) -> None:
        self.jq_pool.close()

    async def aclose(self) -> None:
        await asyncio.to_thread(self.close)
