"""Issue 12: a poller cannot make the api join consumer groups without end. Every task type an
HTTP poller names is a consumer group the api joins (and on Kafka a consumer with its own
connections and heartbeats); any string is a task type, so a worker key, or anyone where the api
is open, could name thousands. The api serves at most CAIRN_API_MAX_POLLED_TASK_TYPES at once and
answers 429, naming the limit, until a type nobody polls is released.

The real TaskDispatcher over the embedded bus and the SQLite store."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from services.api.dispatch import TaskDispatcher, TooManyTaskTypesError
from services.clock import now_ms
from shared.adapters.embedded_bus import EmbeddedBus
from shared.adapters.sqlite_store import SqliteStore
from shared.topics import Topics


async def test_past_the_limit_a_new_task_type_is_refused_until_an_idle_one_is_released(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "cairn.db")
    store = SqliteStore(path)
    await store.open()
    bus = EmbeddedBus(path)
    await bus.start()
    dispatcher = TaskDispatcher(bus, store, Topics(), now_ms, max_task_types=2, idle_close_s=0.4)
    try:
        assert (await dispatcher.poll("type_a", "w", 1, 0)).tasks == []
        assert (await dispatcher.poll("type_b", "w", 1, 0)).tasks == []
        with pytest.raises(TooManyTaskTypesError) as refused:
            await dispatcher.poll("type_c", "w", 1, 0)
        assert "CAIRN_API_MAX_POLLED_TASK_TYPES" in str(refused.value)
        assert (await dispatcher.poll("type_a", "w", 1, 0)).tasks == [], "a type it serves is still served"
        for _ in range(100):  # type_b goes idle (type_a too) and is released; then type_c fits
            await asyncio.sleep(0.1)
            try:
                await dispatcher.poll("type_c", "w", 1, 0)
                break
            except TooManyTaskTypesError:
                continue
        else:
            raise AssertionError("an idle task type was never released")
    finally:
        await dispatcher.aclose()
        await bus.stop()
        await store.close()
