"""Between bytes on the bus and typed envelopes: encoding, parsing, dead letters."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import TypeAdapter, ValidationError

from shared.core.validation import format_location
from shared.models.messages import Envelope
from shared.ports.bus import Outgoing, Received

T = TypeVar("T")


class PoisonMessageError(ValueError):
    """A message that can never be processed: not JSON, or not the schema its topic carries."""


def parse(received: Received, adapter: TypeAdapter[T]) -> T:
    try:
        data = json.loads(received.value)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise PoisonMessageError(f"not JSON: {error}") from None
    try:
        return adapter.validate_python(data)
    except ValidationError as error:
        problems = "; ".join(
            f"{format_location(item['loc'])}: {item['msg']}" for item in error.errors(include_url=False)
        )
        raise PoisonMessageError(f"schema violation: {problems}") from None


def outgoing(topic: str, message: Envelope, key: str, headers: Mapping[str, str] | None = None) -> Outgoing:
    return Outgoing(topic=topic, value=message.to_bytes(), key=key, headers=dict(headers or {}))


def dead_letter(received: Received, reason: str, topic: str) -> Outgoing:
    """A dead-letter record: why, where from, and the original bytes (as text and base64)."""
    body: dict[str, Any] = {
        "type": "dead_letter",
        "v": 1,
        "reason": reason,
        "topic": received.topic,
        "partition": received.partition,
        "offset": received.offset,
        "key": received.key,
        "headers": received.headers,
        "valueText": received.value.decode("utf-8", "replace"),
        "valueBase64": base64.b64encode(received.value).decode(),
    }
    return Outgoing(
        topic=topic,
        value=json.dumps(body).encode(),
        key=received.key,
        headers={"cairn-dead-letter-reason": reason[:500], "cairn-source-topic": received.topic},
    )
