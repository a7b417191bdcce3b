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
    """A store in which the execution never shows: only the watch can end the wait. With
    `announce_after`, its decider announces the execution right after that many looks."""

    def __init__(self, announce_after: int | None = None) -> None:
        self.looks: list[float] = []
        self.announce_after = announce_after

    async def load_heads(self, workflow_ids: Sequence[str], running_only: bool = False) -> dict[str, Any]:
        self.looks.append(asyncio.get_running_loop().time())
        if len(self.looks) == self.announce_after:
            asyncio.get_running_loop().call_soon(created_watch(self).announce, list(workflow_ids))
        return {}


def context(store: object, within_s: float) -> ApiContext:
    return cast(ApiContext, SimpleNamespace(store=store, start_visible_within_s=within_s))


async def test_a_start_returns_when_its_decider_announces_and_looks_at_the_store_seldom() -> None:
    store = NeverVisible(announce_after=3)
    created_watch(store).announce([])  # a decider of this process has committed before
    assert await _until_visible(context(store, 10), "wf-new")
    assert len(store.looks) == 3, "no look after the announcement"
    # Polling looked again 2 ms after its first look; with a decider here, the fallback waits 50 ms.
    assert store.looks[1] - store.looks[0] >= 0.045


async def test_without_a_decider_here_a_start_polls_and_gives_up_at_the_deadline() -> None:
    store = NeverVisible()
    assert not await _until_visible(context(store, 0.3), "wf-elsewhere")
    assert len(store.looks) >= 6, "no decider announces in this process: the store is polled soon and often"
