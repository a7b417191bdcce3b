"""Composition root of `cairn run sweeper`."""

from __future__ import annotations

import asyncio

from services.clock import now_ms
from services.common import mongo_store, service_bus
from services.sweeper.handler import Sweeper
from shared.config import CairnSettings


async def main(settings: CairnSettings, stop: asyncio.Event) -> None:
    store = await mongo_store(settings)
    bus = await service_bus(settings, "cairn-sweeper")
    sweeper = Sweeper(
        store,
        bus,
        settings.topics,
        now_ms,
        int(settings.sweeper_outbox_grace_s * 1000),
        int(settings.sweeper_stale_after_s * 1000),
        int(settings.sweeper_stale_interval_s * 1000),
    )
    try:
        await sweeper.run(stop, settings.sweeper_interval_s)
    finally:
        await bus.stop()
        await store.close()
