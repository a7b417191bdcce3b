"""Composition root of `cairn run decider`."""

from __future__ import annotations

import asyncio

from services.clock import now_ms
from services.common import mongo_store, service_bus
from services.decider.handler import DeciderHandler
from shared.config import CairnSettings

GROUP = "cairn-decider"


async def main(settings: CairnSettings, stop: asyncio.Event) -> None:
    store = await mongo_store(settings)
    bus = await service_bus(settings, "cairn-decider")
    topics = settings.topics
    handler = DeciderHandler(store, bus, topics, now_ms)
    bus.subscribe(topics.decider_inbound, GROUP, handler.handle_batch, max_batch=settings.decider_max_batch)
    await bus.start()
    try:
        await stop.wait()
    finally:
        await bus.stop()
        await handler.aclose()
        await store.close()
