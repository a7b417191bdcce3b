"""Waiting for a condition in tests: poll it until it holds, or fail saying what never happened."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Protocol


class Diagnosed(Protocol):
    def diagnostics(self) -> str: ...


async def until(
    what: str,
    check: Callable[[], Awaitable[bool]],
    cluster: Diagnosed | None = None,
    within_s: float = 60,
    every_s: float = 0.1,
) -> None:
    """Await `check()` until it is true; past `within_s`, fail naming `what` (and, given a
    cluster, with its processes' diagnostics)."""
    deadline = asyncio.get_running_loop().time() + within_s
    while not await check():
        if asyncio.get_running_loop().time() > deadline:
            details = f"\n{cluster.diagnostics()}" if cluster is not None else ""
            raise AssertionError(f"never within {within_s:.0f} s: {what}{details}")
        await asyncio.sleep(every_s)


async def eventually(check: Callable[[], bool], within_s: float = 45.0) -> None:
    """`until` for a plain predicate, polled every 50 ms."""

    async def holds() -> bool:
        return check()

    await until("condition not met in time", holds, within_s=within_s, every_s=0.05)
