"""The decider's cache of histories it committed: in order only, bounded, never past a gap."""

from __future__ import annotations

from services.decider.recent_histories import RecentHistories


def events(*names: str) -> list[dict[str, str]]:
    return [{"type": "EventRaised", "name": n} for n in names]


def test_chunks_committed_in_order_are_served_without_a_read() -> None:
    cache = RecentHistories()
    cache.committed("w", 0, 0, events("a", "b"))
    cache.committed("w", 0, 2, events("c"))
    assert cache.get("w", 0, 3) == events("a", "b", "c")
    assert cache.get("w", 0, 2) == events("a", "b")
    assert cache.get("w", 0, 4) is None  # more than it holds: the store is read
    assert cache.get("w", 1, 1) is None


def test_a_gap_or_an_unseen_start_drops_the_entry() -> None:
    cache = RecentHistories()
    cache.committed("w", 0, 3, events("x"))  # its beginning was committed elsewhere
    assert cache.get("w", 0, 1) is None
    cache.committed("v", 0, 0, events("a"))
    cache.committed("v", 0, 2, events("c"))  # chunk 1 was committed by another replica
    assert cache.get("v", 0, 1) is None


def test_bounded_by_entries_and_events() -> None:
    cache = RecentHistories(capacity=2, max_events=3)
    cache.committed("a", 0, 0, events("1"))
    cache.committed("b", 0, 0, events("1"))
    cache.committed("c", 0, 0, events("1"))
    assert cache.get("a", 0, 1) is None and cache.get("c", 0, 1) is not None
    cache.committed("c", 0, 1, events("2", "3", "4"))  # 5 events in all: the oldest go
    assert cache.get("b", 0, 1) is None
