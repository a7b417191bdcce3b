"""The histories this decider committed lately, so the turns it publishes carry their past events
without a store read (on FerretDB a read per turn was most of a code workflow's step).

Only chunks of commits that won are added, in order: a gap (another replica committed a chunk
of this workflow meanwhile, after a rebalance) drops the entry, and the store is read instead.
Bounded by entries and by events, oldest out first.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

Key = tuple[str, int]


class RecentHistories:
    def __init__(self, capacity: int = 2_000, max_events: int = 200_000) -> None:
        self._capacity = capacity
        self._max_events = max_events
        self._events = 0
        self._entries: OrderedDict[Key, list[dict[str, Any]]] = OrderedDict()

    def committed(
        self, workflow_id: str, generation: int, first: int, events: Sequence[dict[str, Any]]
    ) -> None:
        key = (workflow_id, generation)
        known = self._entries.pop(key, None)
        if known is None and first != 0:
            return  # its start was not seen here: the store has it
        if known is not None and len(known) != first:
            self._events -= len(known)
            return  # a gap: someone else appended meanwhile
        history = (known or []) + list(events)
        self._entries[key] = history
        self._events += len(events)
        while self._entries and (len(self._entries) > self._capacity or self._events > self._max_events):
            _, dropped = self._entries.popitem(last=False)
            self._events -= len(dropped)

    def get(self, workflow_id: str, generation: int, length: int) -> list[dict[str, Any]] | None:
        """The first `length` events, when this decider holds at least that many."""
        history = self._entries.get((workflow_id, generation))
        if history is None or len(history) < length:
            return None
        self._entries.move_to_end((workflow_id, generation))
        return history[:length]
