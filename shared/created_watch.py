"""An api's start told at once that a decider of the same process has committed the execution.

A start returns once the new execution is readable (read-your-writes: an id the api returns never
answers 404), and the api cannot know when that is: it polls the store, first after 2 ms, then
less and less often. Where the decider that commits the execution runs in the api's own process
(`cairn dev`, the default, and any process running both services on one store), that decider
announces what it created here and the start wakes at once, without polling: at concurrency 100
the polls were 4.4% of `cairn dev`'s CPU samples in W1-engine, and starts that returned at once
ran ~6% faster (benchmarks/README.md, seventeenth part). The store both
services share is the meeting point, so nothing is shared between stores, tests or processes.
An api without a decider in its process (every deployment but `cairn dev`) polls as before. One
with a decider still reads the store, from 50 ms on, as a fallback: an execution this process's
decider does not create (one created by a decider in another process, as with two `cairn dev
--kafka` processes in one group; a wrapped store) is found that way, up to ~50 ms later than the
polling from 2 ms would have found it.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Iterable, Iterator
from contextlib import contextmanager


class CreatedWatch:
    """Starts waiting for executions to be committed, woken by the deciders that commit them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiters: dict[str, list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]]] = {}
        self.announced = False
        """Whether a decider of this process has announced anything here: until one has, a waiter
        relies on polling alone."""

    def announce(self, workflow_ids: Iterable[str]) -> None:
        """Executions just committed as created, readable now (any thread)."""
        self.announced = True
        with self._lock:
            if not self._waiters:
                return
            woken = [waiter for w in workflow_ids for waiter in self._waiters.pop(w, ())]
        for loop, future in woken:
            try:
                if asyncio.get_running_loop() is loop:
                    _settle(future)
                    continue
            except RuntimeError:  # announced from a thread without a loop
                pass
            try:
                loop.call_soon_threadsafe(_settle, future)
            except RuntimeError:  # that loop has closed: its start is gone, nothing to wake
                pass

    @contextmanager
    def waiting(self, workflow_id: str) -> Iterator[asyncio.Future[None]]:
        """A future done once `workflow_id` is announced. Enter before the first look at the
        store, so an announcement between that look and the wait is not missed."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        entry = (loop, future)
        with self._lock:
            self._waiters.setdefault(workflow_id, []).append(entry)
        try:
            yield future
        finally:
            with self._lock:
                waiters = self._waiters.get(workflow_id)
                if waiters is not None and entry in waiters:
                    waiters.remove(entry)
                    if not waiters:
                        del self._waiters[workflow_id]


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


_WATCHES: weakref.WeakKeyDictionary[object, CreatedWatch] = weakref.WeakKeyDictionary()
_WATCHES_LOCK = threading.Lock()


def created_watch(store: object) -> CreatedWatch:
    """The watch of the store the deciders and the api of this process share."""
    with _WATCHES_LOCK:
        watch = _WATCHES.get(store)
        if watch is None:
            watch = _WATCHES[store] = CreatedWatch()
        return watch
