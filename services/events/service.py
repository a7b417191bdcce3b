"""The events service's loop: follow the registered handlers, one consumer group per source."""

from __future__ import annotations

import asyncio
import logging

from services.events.handler import EventsHandler
from shared.models.events import EventHandler, source_topic
from shared.ports.bus import Bus, Subscription
from shared.ports.store import Store
from shared.topics import Topics

log = logging.getLogger(__name__)


class EventSources:
    def __init__(self, store: Store, bus: Bus, topics: Topics, handler: EventsHandler) -> None:
        self.store = store
        self.bus = bus
        self.topics = topics
        self.handler = handler
        self.subscriptions: dict[str, Subscription] = {}

    async def refresh(self) -> None:
        """Handlers from the store; join the groups of new sources, leave those of gone ones."""
        by_topic: dict[str, list[EventHandler]] = {}
        for handler in await self.store.list_event_handlers():
            topic = source_topic(handler.event, self.topics.prefix)
            if handler.active and topic is not None:
                by_topic.setdefault(topic, []).append(handler)
        self.handler.by_topic = by_topic
        new = [topic for topic in by_topic if topic not in self.subscriptions]
        if new:
            await self.bus.ensure_topics(new)
        for topic in new:
            group = self.topics.group(f"events.{topic}")
            self.subscriptions[topic] = await self.bus.add_subscription(
                [topic], group, self.handler.handle_batch
            )
            log.info("events: consuming %s for %s", topic, [h.name for h in by_topic[topic]])
        for topic in [t for t in self.subscriptions if t not in by_topic]:
            await self.subscriptions.pop(topic).close()
            log.info("events: no active handler for %s any more", topic)

    async def run(self, stop: asyncio.Event, every_s: float) -> None:
        while not stop.is_set():
            try:
                await self.refresh()
            except Exception:  # a store outage: keep the current sources, try again
                log.warning("events: could not refresh the handlers", exc_info=True)
            try:
                await asyncio.wait_for(stop.wait(), timeout=every_s)
            except TimeoutError:
                pass

    async def close(self) -> None:
        for subscription in self.subscriptions.values():
            await subscription.close()
        self.subscriptions.clear()
