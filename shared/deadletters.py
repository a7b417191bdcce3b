"""Reading and replaying dead letters (`cairn deadletter ls / show / replay`, `/api/deadletters`).

A dead letter (shared/messaging.dead_letter) keeps the reason and the original message whole:
its source topic, partition, offset, key, headers and bytes. Listing shows them; replaying
publishes the original bytes to the original topic with the original key, so once what made it
fail is fixed (a deployed bug fix, a definition registered), it is handled like any message.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from shared.ports.bus import Bus, Outgoing, Received

REPLAYED_FROM = "cairn-replayed-from"
"""Header of a replayed message: the dead letter's id (partition:offset on the dead-letter topic)."""

SCAN_LIMIT = 10_000
"""How far back `show` and `replay` look for a dead letter by id."""


class DeadLetterNotFoundError(LookupError):
    pass


def letter_id(received: Received) -> str:
    return f"{received.partition}:{received.offset}"


def letter_json(received: Received) -> dict[str, Any]:
    """A dead letter as the api and `--json` show it; a record that is not a dead letter (written
    by someone else) is shown with the reason that it cannot be read."""
    try:
        body = json.loads(received.value)
    except ValueError:
        body = {"reason": "not a Cairn dead letter (not JSON)"}
    if not isinstance(body, dict):
        body = {"reason": "not a Cairn dead letter"}
    return {
        "id": letter_id(received),
        "reason": body.get("reason"),
        "sourceTopic": body.get("topic"),
        "sourcePartition": body.get("partition"),
        "sourceOffset": body.get("offset"),
        "key": body.get("key"),
        "headers": body.get("headers") or {},
        "valueText": body.get("valueText"),
    }


async def list_letters(bus: Bus, topic: str, limit: int) -> list[dict[str, Any]]:
    """The newest `limit` dead letters, newest first."""
    return [letter_json(received) for received in reversed(await bus.peek(topic, limit))]


async def find_letter(bus: Bus, topic: str, wanted: str) -> Received:
    for received in await bus.peek(topic, SCAN_LIMIT):
        if letter_id(received) == wanted:
            return received
    raise DeadLetterNotFoundError(f"no dead letter {wanted!r} among the newest {SCAN_LIMIT}")


async def replay_letter(bus: Bus, topic: str, wanted: str) -> dict[str, Any]:
    """Publish the dead letter's original message again; what was sent where."""
    received = await find_letter(bus, topic, wanted)
    body = json.loads(received.value)
    source = body.get("topic")
    if not isinstance(source, str) or "valueBase64" not in body:
        raise DeadLetterNotFoundError(f"dead letter {wanted!r} holds no original message to replay")
    headers = {str(k): str(v) for k, v in (body.get("headers") or {}).items()}
    headers[REPLAYED_FROM] = wanted
    await bus.publish([Outgoing(source, base64.b64decode(body["valueBase64"]), body.get("key"), headers)])
    return {"id": wanted, "replayedTo": source, "key": body.get("key")}
