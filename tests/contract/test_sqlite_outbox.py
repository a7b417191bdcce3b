"""`cairn dev`'s outbox (shared/adapters/sqlite_outbox.py): a decision's commit, its messages and
the delivered batch's acknowledgement in one SQLite transaction. The real DeciderHandler, the
real SqliteStore and EmbeddedBus on one file, the bus's real consumer members."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

import shared.adapters.embedded_bus as embedded_bus
import shared.adapters.sqlite_outbox as sqlite_outbox
from services.decider.handler import DeciderHandler
from shared.adapters.embedded_bus import EmbeddedBus
from shared.adapters.sqlite_outbox import SqliteOutbox, atomic_outbox
from shared.adapters.sqlite_store import SqliteStore
from shared.created_watch import created_watch
from shared.guard import GuardedBus
from shared.ports.bus import Outgoing
from shared.ports.store import Commit
from shared.topics import Topics
from tests.integration.test_decider_races import (
    add_completed,
    dispatches,
    pipeline_start,
    received,
    register_pipeline,
)
from tests.waiting import eventually

NOW = 1_800_000_000_000
TOPICS = Topics()


class CountingBus:
    """The real bus, counting the publishes that carry messages (the decider's own publishes)."""

    def __init__(self, bus: EmbeddedBus) -> None:
        self.inner = bus
        self.publishes = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def publish(self, messages: Sequence[Outgoing]) -> None:
        self.publishes += bool(messages)
        await self.inner.publish(messages)


@pytest.fixture
async def pair(tmp_path: Path) -> AsyncIterator[tuple[SqliteStore, EmbeddedBus, Path]]:
    """A store and a bus on one state file, as `cairn dev` runs them, with the pipeline
    workflow registered."""
    path = tmp_path / "state.db"
    store, bus = SqliteStore(str(path)), EmbeddedBus(str(path), poll_interval_s=0.02)
    await store.open()
    await register_pipeline(store)
    try:
        yield store, bus, path
    finally:
        await bus.stop()
        await store.close()


def decider_on(store: SqliteStore, bus: Any, outbox: SqliteOutbox | None = None) -> DeciderHandler:
    """The real decider publishing through `bus` (the bare bus, a guard or a counter around it),
    with the outbox the assembly would find for it unless one is given."""
    return DeciderHandler(store, bus, TOPICS, lambda: NOW, outbox=outbox or atomic_outbox(store, bus))


def unsent(path: Path) -> list[str]:
    with sqlite3.connect(path) as connection:
        rows = connection.execute("SELECT id FROM store_workflows WHERE outbox_since IS NOT NULL")
        return [row[0] for row in rows]


def committed_offset(path: Path, group: str) -> int:
    with sqlite3.connect(path) as connection:
        row = connection.execute("SELECT MAX(committed) FROM bus_offsets WHERE grp = ?", (group,)).fetchone()
    return -1 if row[0] is None else int(row[0])


async def test_the_assembly_finds_the_outbox_only_where_store_and_bus_share_a_file(
    pair: tuple[SqliteStore, EmbeddedBus, Path], tmp_path: Path
) -> None:
    store, bus, _ = pair
    assert isinstance(atomic_outbox(store, GuardedBus(bus, "dead")), SqliteOutbox)
    other = EmbeddedBus(str(tmp_path / "other.db"))
    assert atomic_outbox(store, other) is None
    with pytest.raises(ValueError, match="different files"):
        SqliteOutbox(store, other)


async def test_a_decision_publishes_its_dispatch_in_its_commit(
    pair: tuple[SqliteStore, EmbeddedBus, Path],
) -> None:
    store, bus, path = pair
    counting = CountingBus(bus)
    decider = decider_on(store, counting, atomic_outbox(store, bus))
    await decider.handle_batch([received(TOPICS, pipeline_start("wf-one"), 0)])
    await decider.aclose()
    document = await store.load_workflow("wf-one")
    assert document is not None and document.version == 1
    sent = dispatches(path, TOPICS.tasks("%"))
    assert [m.task_id for m in sent] == [document.state.tasks["add"].task_id]
    assert unsent(path) == [], "the outbox is recorded as sent by the commit itself"
    assert counting.publishes == 0, "no publish of its own, so no mark-sent either"


async def test_a_failure_inside_the_transaction_stores_nothing(
    pair: tuple[SqliteStore, EmbeddedBus, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, bus, path = pair

    def broken_append(*args: object) -> None:
        raise sqlite3.DatabaseError("disk image is malformed (test)")

    monkeypatch.setattr(sqlite_outbox, "append_rows", broken_append)
    decider = decider_on(store, bus)
    with pytest.raises(sqlite3.DatabaseError):
        await decider.handle_batch([received(TOPICS, pipeline_start("wf-broken"), 0)])
    assert await store.load_workflow("wf-broken") is None, "the commit was rolled back with the append"
    assert dispatches(path, TOPICS.tasks("%")) == []


async def test_a_commit_that_loses_its_version_check_publishes_nothing(
    pair: tuple[SqliteStore, EmbeddedBus, Path],
) -> None:
    store, bus, path = pair
    decider = decider_on(store, bus)
    await decider.handle_batch([received(TOPICS, pipeline_start("wf-lost"), 0)])
    document = await store.load_workflow("wf-lost")
    assert document is not None
    before = len(dispatches(path, TOPICS.tasks("%")))
    stale = document.model_copy(update={"version": 1})  # a rival's decision on version 0
    message = Outgoing(topic=TOPICS.tasks("e2e_add"), value=b"{}", key="wf-lost", headers={})
    won = await SqliteOutbox(store, bus).commit_and_publish([Commit(stale, 0)], [[message]])
    assert won == [False]
    assert len(dispatches(path, TOPICS.tasks("%"))) == before


async def test_the_delivered_batch_is_acknowledged_in_the_decisions_transaction(
    pair: tuple[SqliteStore, EmbeddedBus, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the bus's member and the poison guard, as the services run it: the member's own
    offset commit is not called for a batch whose decisions acknowledged it; it still is for a
    batch they could not (a dead letter, published after the commit)."""
    store, bus, path = pair
    own_commits: list[str] = []
    real_commit = embedded_bus.commit

    def counting_commit(connection: sqlite3.Connection, group: str, *args: Any) -> Any:
        own_commits.append(group)
        return real_commit(connection, group, *args)

    monkeypatch.setattr(embedded_bus, "commit", counting_commit)
    guarded = GuardedBus(bus, TOPICS.dead_letter)
    decider = decider_on(store, guarded)
    group = "decider-test"
    guarded.subscribe([TOPICS.workflow_start], group, decider.handle_batch)
    await guarded.start()
    start = pipeline_start("wf-acked")
    await bus.publish(
        [Outgoing(topic=TOPICS.workflow_start, value=start.to_bytes(), key="wf-acked", headers={})]
    )
    await eventually(lambda: committed_offset(path, group) >= 1, within_s=10)
    assert await store.load_workflow("wf-acked") is not None
    assert own_commits == [], "acknowledged with the commit"

    garbage = Outgoing(topic=TOPICS.workflow_start, value=b"not json", key="wf-acked", headers={})
    await bus.publish([garbage])
    await eventually(lambda: committed_offset(path, group) >= 2, within_s=10)
    assert own_commits == [group], "a dead-lettered message is acknowledged by the member"
    await decider.aclose()


async def test_a_batch_the_guard_splits_is_never_acknowledged_by_a_part_of_it(
    pair: tuple[SqliteStore, EmbeddedBus, Path],
) -> None:
    """Only the very batch the member delivered may be acknowledged by a decision: a one-message
    retry must not move the offsets past messages it does not hold."""
    store, bus, path = pair
    outbox = SqliteOutbox(store, bus)
    batch = [received(TOPICS, pipeline_start(f"wf-part-{i}"), i) for i in range(3)]
    delivery = embedded_bus.Delivery(
        path=bus.path, group="g", member="m", batch=batch, positions={("t", 0): 3}
    )
    token = embedded_bus.CURRENT_DELIVERY.set(delivery)
    try:
        decider = decider_on(store, bus, outbox)
        await decider.handle_batch(batch[:1])  # a part of the delivered batch: a different list
    finally:
        embedded_bus.CURRENT_DELIVERY.reset(token)
    assert await store.load_workflow("wf-part-0") is not None
    assert not delivery.acknowledged
    assert committed_offset(path, "g") == -1


async def test_concurrent_batches_on_one_file_all_land(pair: tuple[SqliteStore, EmbeddedBus, Path]) -> None:
    """Many decisions racing other writers of the file (a second bus publishing on its own
    connection): every workflow committed once, every dispatch appended once."""
    store, bus, path = pair
    decider = decider_on(store, bus)
    other = EmbeddedBus(str(path))
    noise = [Outgoing(topic="noise", value=b"x", key=str(i), headers={}) for i in range(20)]
    try:
        await asyncio.gather(
            *(decider.handle_batch([received(TOPICS, pipeline_start(f"wf-c{i}"), i)]) for i in range(20)),
            *(other.publish([message]) for message in noise),
        )
    finally:
        await other.stop()
    sent = dispatches(path, TOPICS.tasks("%"))
    assert sorted(m.workflow_instance_id for m in sent) == sorted(f"wf-c{i}" for i in range(20))
    assert unsent(path) == []


async def test_a_decision_that_creates_an_execution_wakes_the_start_waiting_for_it(
    pair: tuple[SqliteStore, EmbeddedBus, Path],
) -> None:
    """`cairn dev`'s api waits for its starts on the watch of the store it shares with the decider
    (shared/created_watch.py): the commit that creates the execution wakes it, the one that only
    moves it on does not (that start had returned long before)."""
    store, bus, _ = pair
    decider = decider_on(store, bus)
    watch = created_watch(store)
    with watch.waiting("wf-watched") as created, watch.waiting("wf-other") as other:
        await decider.handle_batch([received(TOPICS, pipeline_start("wf-watched"), 0)])
        await asyncio.sleep(0)
        assert created.done() and await store.load_workflow("wf-watched") is not None
        assert not other.done()
    document = await store.load_workflow("wf-watched")
    assert document is not None and document.version == 1
    done = add_completed("wf-watched", document.state.tasks["add"].task_id)
    with watch.waiting("wf-watched") as again:
        await decider.handle_batch([received(TOPICS, done, 1)])
        await asyncio.sleep(0)
        moved_on = await store.load_workflow("wf-watched")
        assert moved_on is not None and moved_on.version == 2, "the result was committed"
        assert not again.done(), "a commit that moves an execution on creates nothing"
    await decider.aclose()
