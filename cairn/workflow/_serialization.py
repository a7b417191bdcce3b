"""How workflow inputs, outputs and events travel: JSON values, as Dapr's SDK encodes them.

Dapr's SDK turns a dataclass or a SimpleNamespace into a JSON object marked with
`__durabletask_autoobject__`, and any marked object back into a SimpleNamespace; a pydantic model
becomes its `model_dump(mode="json")`. Cairn keeps payloads as JSON values rather than JSON text,
so the same rules apply on the way in (`encode`) and on the way out (`decode`), and a program
written for Dapr sees the same Python objects.
"""

from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace
from typing import Any

AUTO_OBJECT = "__durabletask_autoobject__"


class _Encoder(json.JSONEncoder):
    def default(self, o: Any) -> Any:
        if hasattr(o, "model_dump") and hasattr(type(o), "model_validate"):
            return o.model_dump(mode="json")
        if dataclasses.is_dataclass(o) and not isinstance(o, type):
            return {**dataclasses.asdict(o), AUTO_OBJECT: True}
        if isinstance(o, SimpleNamespace):
            return {**vars(o), AUTO_OBJECT: True}
        return super().default(o)


def encode(value: Any) -> Any:
    """A Python value as the JSON value Cairn stores (None stays None)."""
    if value is None:
        return None
    if isinstance(value, tuple) and hasattr(value, "_asdict"):  # a namedtuple at the top
        value = {**value._asdict(), AUTO_OBJECT: True}
    return json.loads(json.dumps(value, cls=_Encoder))


def _hook(data: dict[str, Any]) -> Any:
    if data.pop(AUTO_OBJECT, None):
        return SimpleNamespace(**data)
    return data


def decode(value: Any) -> Any:
    """A stored JSON value as the Python value the workflow code receives."""
    if value is None:
        return None
    return json.loads(json.dumps(value), object_hook=_hook)


def to_text(value: Any) -> str | None:
    """Dapr's serialized form (`serialized_input`, `serialized_output`): JSON text, or None."""
    return None if value is None else json.dumps(value)
