"""shared/created_watch.py: an api's start woken by the decider of its own process, and the
start's wait (services/api/executions.py) relying on it instead of polling the store."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any, cast

from services.api.context import ApiContext
from services.api.executions import _until_visible
from shared.created_watch import CreatedWatch, created_watch


async def test_an_announcement_wakes_the_waiter_of_that_execution_only() -> None:
    watch = CreatedWatch()
    with watch.waiting("wf-a") as a, watch.waiting("wf-b") as b:
        watch.announce(["wf-a"])
        await asyncio.sleep(0)
        assert a.done() and not b.done()
    assert watch.announced


async def test_an_announcement_from_another_thread_wakes_the_waiter() -> None:
    watch = CreatedWatch()
    with watch.waiting("wf-a") as waiter:
        thread = threading.Thread(target=watch.announce, args=(["wf-a"],))
        thread.start()
        await asyncio.wait_for(waiter, 5)
        thread.join()


async def test_a_waiter_that_left_is_forgotten() -> None:
    watch = CreatedWatch()
    with watch.waiting("wf-a"), watch.waiting("wf-a"):
        pass
    assert watch._waiters == {}
    watch.announce(["wf-a"])  # nobody waits: nothing to wake, nothing kept


class NeverVisible:
    """A store in which the execution never shows: only the watch can end the wait."""

    def __init__(self) -> None:
        self.looks = 0

    async def load_heads(self, workflow_ids: Sequence[str], running_only: bool = False) -> dict[str, Any]:
        self.looks += 1
        return {}


def test_each_store_has_its_own_watch() -> None:
    one, other = NeverVisible(), NeverVisible()
    assert created_watch(one) is created_watch(one)
    assert created_watch(one) is not created_watch(other)


def context(store: object, within_s: float) -> ApiContext:
    return cast(ApiContext, SimpleNamespace(store=store, start_visible_within_s=within_s))


async def test_a_start_returns_when_its_decider_announces_and_looks_at_the_store_seldom() -> None:
    store = NeverVisible()
    watch = created_watch(store)
    watch.announce([])  # a decider of this process has committed before

    async def decider() -> None:
        await asyncio.sleep(0.3)
        watch.announce(["wf-new"])

    announcing = asyncio.create_task(decider())
    assert await _until_visible(context(store, 10), "wf-new")
    await announcing
    # Polling from 2 ms on would have looked 8 times in 0.3 s; the watch's fallback looks from
    # 50 ms on (at 0, 50, 150 and 250 ms).
    assert store.looks <= 4


async def test_without_a_decider_here_a_start_polls_and_gives_up_at_the_deadline() -> None:
    store = NeverVisible()
    assert not await _until_visible(context(store, 0.3), "wf-elsewhere")
    assert store.looks >= 6, "no decider announces in this process: the store is polled soon and often"
