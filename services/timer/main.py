"""Composition root of `cairn run timer`."""

from __future__ import annotations

import asyncio
import os
import socket

from services.clock import now_ms
from services.common import mongo_store, service_bus
from services.timer.handler import TimerHandler
from shared.config import CairnSettings

GROUP = "cairn-timer"


async def main(settings: CairnSettings, stop: asyncio.Event) -> None:
    store = await mongo_store(settings)
    bus = await service_bus(settings, "cairn-timer")
    topics = settings.topics
    owner = f"{socket.gethostname()}:{os.getpid()}"
    handler = TimerHandler(store, bus, topics, now_ms, owner, int(settings.timer_lease_s * 1000))
    bus.subscribe([topics.timer_request], GROUP, handler.handle_requests, max_batch=500)
    await bus.start()
    try:
        await handler.run_firing_loop(stop, settings.timer_poll_interval_s)
    finally:
        await bus.stop()
        await store.close()
