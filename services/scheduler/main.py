"""Composition root of `cairn run scheduler`."""

from __future__ import annotations

import asyncio

from services.common import service_bus
from services.scheduler.handler import SchedulerHandler
from shared.config import CairnSettings

GROUP = "cairn-scheduler"


async def main(settings: CairnSettings, stop: asyncio.Event) -> None:
    bus = await service_bus(settings, "cairn-scheduler")
    topics = settings.topics
    bus.subscribe([topics.task_dispatch], GROUP, SchedulerHandler(bus, topics).handle_batch, max_batch=500)
    await bus.start()
    try:
        await stop.wait()
    finally:
        await bus.stop()
