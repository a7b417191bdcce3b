"""The events service: Conductor's event handlers, run on Cairn's bus (docs/operations.md).

It keeps one consumer group per source topic that an active handler listens on, refreshed from
the store every `CAIRN_EVENTS_REFRESH_S` (a handler registered, changed, deactivated or removed
takes effect within that), and for each message:
- the payload must be a JSON object within the payload limits: otherwise the message is
  dead-lettered with the reason and the partition goes on;
- each active handler of the source evaluates its condition — JavaScript with `$` bound to the
  payload (the same sandbox as INLINE), or `value-param`: a payload key — true, or a number above
  0, runs its actions (services/events/actions.py) in order; a condition that fails to run is
  logged and counts as false;
- a message no handler acts on is counted (`cairn.events.unmatched`).
The actions' messages are published before the batch is acknowledged, so a crash in between
publishes them again with the same ids: at least once, each acting once.

The message id (Conductor's `conductor.event.messageId`, and the idempotency key of the actions)
is the message's `id` header (a CloudEvents `ce_id` too) when it has one, so a producer that
publishes one event twice has it acted on once; otherwise its topic, partition and offset.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from typing import Any

from services.events.actions import ActionRunner, Event
from shared import telemetry
from shared.core.scripting import Sandbox, ScriptError
from shared.core.tasktypes.do_while import is_true
from shared.messaging import dead_letter
from shared.models.events import EventHandler
from shared.models.limits import PayloadLimits, describe, payload_problems
from shared.ports.bus import Bus, Outgoing, Received
from shared.ports.store import Store
from shared.topics import Topics

log = logging.getLogger(__name__)
meter = telemetry.meter("cairn.events")
acted = meter.create_counter("cairn.events.acted", description="Event handler actions run, by handler")
unmatched = meter.create_counter(
    "cairn.events.unmatched", description="Events no active handler acted on, by source"
)
ID_HEADERS = ("id", "ce_id", "message-id")


class EventsHandler:
    def __init__(
        self,
        store: Store,
        bus: Bus,
        topics: Topics,
        sandbox: Sandbox,
        clock: Callable[[], int],
        limits: PayloadLimits,
    ) -> None:
        self.bus = bus
        self.topics = topics
        self.sandbox = sandbox
        self.clock = clock
        self.limits = limits
        self.actions = ActionRunner(store, topics)
        self.by_topic: dict[str, list[EventHandler]] = {}
        """Active handlers by the topic of their source (set by the service's refresh)."""
        self.unmatched = 0

    async def handle_batch(self, batch: Sequence[Received]) -> None:
        out: list[Outgoing] = []
        for received in batch:
            out.extend(await self._one(received))
        await self.bus.publish(out)

    async def _one(self, received: Received) -> list[Outgoing]:
        try:
            payload = json.loads(received.value)
        except ValueError as error:
            return [dead_letter(received, f"event payload is not JSON: {error}", self.topics.dead_letter)]
        if not isinstance(payload, dict):
            reason = f"event payload must be a JSON object, not {type(payload).__name__}"
            return [dead_letter(received, reason, self.topics.dead_letter)]
        problems = payload_problems(payload, "payload", self.limits)
        if problems:
            return [
                dead_letter(
                    received, f"event payload past the limits: {describe(problems)}", self.topics.dead_letter
                )
            ]
        message_id = next(
            (received.headers[h] for h in ID_HEADERS if received.headers.get(h)),
            f"{received.topic}:{received.partition}:{received.offset}",
        )
        out: list[Outgoing] = []
        matched = False
        for handler in self.by_topic.get(received.topic, []):
            if not self._condition_holds(handler, payload, message_id):
                continue
            matched = True
            event = Event(message_id, handler.event, payload)
            for index, action in enumerate(handler.actions):
                try:
                    out.extend(await self.actions.messages(handler, index, action, event))
                except (ValueError, TypeError) as error:  # the payload made an action invalid
                    reason = f"event handler {handler.name}, action {index} ({action.action}): {error}"
                    return [dead_letter(received, reason[:2000], self.topics.dead_letter)]
                acted.add(1, {"handler": handler.name})
        if not matched:
            self.unmatched += 1
            unmatched.add(1, {"topic": received.topic})
        return out

    def _condition_holds(self, handler: EventHandler, payload: dict[str, Any], message_id: str) -> bool:
        condition = (handler.condition or "").strip()
        if not condition:
            return True
        if handler.evaluator_type == "value-param":
            return is_true(payload.get(condition))
        try:
            return is_true(self.sandbox.javascript(condition, payload, now_ms=self.clock(), seed=message_id))
        except ScriptError as error:
            log.warning("event handler %s: condition failed on %s: %s", handler.name, message_id, error)
            return False
