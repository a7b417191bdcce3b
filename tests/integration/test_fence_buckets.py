"""MongoDB fences in time buckets (shared/adapters/mongo_fences.py), on a real MongoDB-protocol
server: every rival for a version meets in one collection, a lost read-model write is never lost
with its bucket, and a commit on an old base is fenced late and version-checked.

The adapter's wall clock is pinned (`_wall_clock_ms`) so the bucket rules can be walked through
without waiting: the decider's clock (`NOW`) writes the documents' times, as in production."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from services.decider.handler import DeciderHandler
from shared.adapters.embedded_bus import EmbeddedBus
from shared.adapters.mongo_fences import BUCKET_PREFIX
from shared.models.documents import WorkflowDocument
from shared.models.runtime import TaskStatus
from shared.ports.store import Commit
from shared.topics import Topics
from tests.integration.test_decider_races import NOW, received
from tests.integration.test_fence_bugs import result, started

pytestmark = pytest.mark.integration

RETENTION_MS = 600_000  # the adapter's default fence retention; a bucket is as wide
BUCKET_START = NOW - NOW % RETENTION_MS
BUCKET_END = BUCKET_START + RETENTION_MS


@pytest.fixture
async def bus(tmp_path: Path) -> AsyncIterator[EmbeddedBus]:
    bus = EmbeddedBus(str(tmp_path / "bus.db"))
    yield bus
    await bus.stop()


def pin_clock(store: Any, at_ms: float) -> None:
    store._wall_clock_ms = lambda: at_ms


async def bucket_names(store: Any) -> list[str]:
    return [name for name in await store._db.list_collection_names() if name.startswith(BUCKET_PREFIX)]


async def second_version(
    store: Any, bus: EmbeddedBus, workflow_id: str
) -> tuple[WorkflowDocument, dict[str, Any]]:
    """v1 (as its raw read model) and v2 committed by a decider on it."""
    topics = Topics()
    document = await started(store, bus, topics, workflow_id)
    raw_v1 = await store._workflows.find_one({"_id": workflow_id})
    await DeciderHandler(store, bus, topics, lambda: NOW + 10).handle_batch(
        [received(topics, result(document, "add", 3), 1)]
    )
    committed = await store.load_workflow(workflow_id)
    assert committed is not None and committed.version == 2
    return document, raw_v1


def commit_on(base: WorkflowDocument, at: float) -> Commit:
    """Another decider's commit of `base`'s next version, with nothing in it, read just before
    `at` (a read model that was late to show the newer version)."""
    return Commit(
        base.model_copy(update={"version": base.version + 1, "updated_at": int(at)}),
        base.version,
        read_at=int(at - 5),
        base_updated_at=base.updated_at,
    )


async def assert_second_version_stands(store: Any, document: WorkflowDocument, what: str) -> None:
    """v2 (the decider's result for `add`) is the read model, with its task record."""
    after = await store.load_workflow(document.workflow_id)
    assert after is not None and after.version == 2, what
    assert after.state.tasks["add"].status is TaskStatus.COMPLETED, what
    record = await store.get_task(document.state.tasks["add"].task_id)
    assert record is not None and record.output_data == {"n": 3}


async def test_rivals_on_one_base_meet_in_its_bucket_and_the_loser_rolls_the_winner_forward(
    mongo_store: Any, bus: EmbeddedBus
) -> None:
    store = mongo_store
    pin_clock(store, NOW + 100)
    document, raw_v1 = await second_version(store, bus, "wf-bucket-rival")
    assert await bucket_names(store) == [f"{BUCKET_PREFIX}{BUCKET_START // 1000}_{RETENTION_MS // 1000}"]
    assert await store._commits.count_documents({}) == 0, "a recent base's fence went to `late`"
    # The crash: the winner's read-model write was lost, the read model is v1 as it was.
    await store._workflows.replace_one({"_id": "wf-bucket-rival"}, raw_v1)
    assert await store.commit_workflows([commit_on(document, NOW + 20)]) == [False]
    await assert_second_version_stands(store, document, "the winner was not rolled forward")


async def test_housekeeping_rolls_the_newest_commit_forward_before_it_drops_the_bucket(
    mongo_store: Any, bus: EmbeddedBus
) -> None:
    store = mongo_store
    pin_clock(store, NOW + 100)
    document, raw_v1 = await second_version(store, bus, "wf-bucket-drop")
    await store._workflows.replace_one({"_id": "wf-bucket-drop"}, raw_v1)  # the lost write
    # Just before the bucket's last possible commit plus the skew margin: kept.
    await store.housekeeping(BUCKET_END + RETENTION_MS - 1)
    assert await bucket_names(store), "the bucket was dropped while a commit could still land there"
    stale = await store.load_workflow("wf-bucket-drop")
    assert stale is not None and stale.version == 1
    await store.housekeeping(BUCKET_END + RETENTION_MS)
    assert await bucket_names(store) == []
    await assert_second_version_stands(store, document, "the newest commit went with its bucket")


async def test_a_commit_on_an_old_base_is_fenced_late_and_always_checks_the_stored_version(
    mongo_store: Any, bus: EmbeddedBus
) -> None:
    store = mongo_store
    pin_clock(store, NOW + 100)
    document, _ = await second_version(store, bus, "wf-bucket-late")
    # The bucket of v1's time is gone (housekeeping, much later); v2 stands in the read model.
    await store.housekeeping(BUCKET_END + RETENTION_MS)
    assert await bucket_names(store) == []
    # A rival that read v1 just now (a read model that was late to show v2), an hour on: its
    # base is past every live bucket, so its fence is a late one; the stored v2 refuses it.
    later = BUCKET_END + 3_600_000
    pin_clock(store, later)
    stale = commit_on(document, later)
    assert await store.commit_workflows([stale]) == [False], "a late commit overtook the stored version"
    assert await bucket_names(store) == [], "a late commit recreated a dropped bucket"
    await assert_second_version_stands(store, document, "a late commit overtook the stored version")
    # A workflow idle since v2 resumes an hour on: its commit is late too, and wins; a rival for
    # the same version meets it in `late`.
    current = await store.load_workflow("wf-bucket-late")
    assert current is not None
    resume = commit_on(current, later)
    assert await store.commit_workflows([resume]) == [True]
    assert await store._commits.count_documents({"workflowId": "wf-bucket-late", "version": 3}) == 1
    assert await store.commit_workflows([resume]) == [False]


async def test_under_steady_load_a_bucket_is_dropped_without_reading_it(
    mongo_url: str, unique: str, bus: EmbeddedBus
) -> None:
    """Every running workflow's document is newer than the bucket being dropped (it was written
    moments ago), so no fence in it can be ahead of one: the pass asks the bucket for nothing.
    (Reading every fence of a 35,000-fence bucket cost 14 s of FerretDB's time.)"""
    from pymongo import monitoring

    from shared.adapters.mongo_store import MongoStore

    class Finds(monitoring.CommandListener):
        def __init__(self) -> None:
            self.collections: list[str] = []

        def started(self, event: monitoring.CommandStartedEvent) -> None:
            if event.command_name == "find":
                self.collections.append(str(event.command["find"]))

        def succeeded(self, event: monitoring.CommandSucceededEvent) -> None: ...

        def failed(self, event: monitoring.CommandFailedEvent) -> None: ...

    finds = Finds()
    store: Any = MongoStore(mongo_url, f"cairn_test_{unique}", event_listeners=[finds])
    await store.open()
    try:
        pin_clock(store, NOW + 100)
        await second_version(store, bus, "wf-bucket-busy")  # v2 based on v1, in the bucket
        # The workflow moved on in a later bucket (its read model is written at NOW + 700 s).
        raw = await store._workflows.find_one({"_id": "wf-bucket-busy"})
        await store._workflows.replace_one(
            {"_id": "wf-bucket-busy"}, {**raw, "version": 3, "updatedAt": BUCKET_END + 100}
        )
        [name] = await bucket_names(store)
        finds.collections.clear()
        await store.housekeeping(BUCKET_END + RETENTION_MS)
        assert await bucket_names(store) == []
        assert name not in finds.collections, "the pass read a bucket no running workflow is based in"
    finally:
        await store._client.drop_database(f"cairn_test_{unique}")
        await store.close()
