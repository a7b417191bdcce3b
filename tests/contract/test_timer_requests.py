"""Issue 12 point 4: the timer service applies a batch's arm and cancel requests in the order they
were published, on both stores. Before the fix it applied every arm as it read it and all cancels
at the end, so [cancel W, arm W] in one batch left no timer and the workflow's deadline was lost."""

from __future__ import annotations

from collections.abc import Sequence

from services.timer.handler import TimerHandler
from shared.models.messages import TimerRequest
from shared.ports.bus import Outgoing, Received
from shared.ports.store import Store
from shared.topics import Topics

NOW = 1_800_000_000_000


class Published:
    """Only what the handler publishes from a request batch: dead letters."""

    def __init__(self) -> None:
        self.messages: list[Outgoing] = []

    async def publish(self, messages: Sequence[Outgoing]) -> None:
        self.messages.extend(messages)


def request(action: str, timer_id: str, offset: int, fire_at: int = NOW) -> Received:
    message = TimerRequest(
        id=f"{timer_id}:{action}:{offset}",
        action=action,
        timer_id=timer_id,
        workflow_id="wf",
        fire_at=fire_at,
    )  # type: ignore[arg-type]
    return Received("cairn.timer.request", message.to_bytes(), "wf", {}, 0, offset)


async def armed(store: Store) -> set[str]:
    return {timer.timer_id for timer in await store.claim_due_timers(NOW + 1, "probe", 1000, 100)}


async def test_the_last_request_for_a_timer_in_a_batch_wins(store: Store) -> None:
    bus = Published()
    handler = TimerHandler(store, bus, Topics(), lambda: NOW, "test", 1000)  # type: ignore[arg-type]
    await handler.handle_requests(
        [
            request("arm", "rearmed", 1),
            request("cancel", "rearmed", 2),
            request("arm", "rearmed", 3),  # cancel then arm again: armed
            request("arm", "cancelled", 4),
            request("cancel", "cancelled", 5),  # arm then cancel: gone
            request("cancel", "armed-late", 6),
            request("arm", "armed-late", 7),
        ]
    )
    assert await armed(store) == {"rearmed", "armed-late"}
    assert bus.messages == []


async def test_a_timer_request_past_year_9999_is_dead_lettered_and_the_batch_goes_on(store: Store) -> None:
    bus = Published()
    handler = TimerHandler(store, bus, Topics(), lambda: NOW, "test", 1000)  # type: ignore[arg-type]
    bad = TimerRequest.model_construct(id="x", action="arm", timer_id="far", workflow_id="wf", fire_at=2**63)
    poison = Received("cairn.timer.request", bad.to_bytes(), "wf", {}, 0, 1)
    await handler.handle_requests([poison, request("arm", "fine", 2)])
    assert await armed(store) == {"fine"}
    [dead] = bus.messages
    assert dead.topic == Topics().dead_letter and b"fireAt" in dead.value
