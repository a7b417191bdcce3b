"""User data in MongoDB documents: stored opaque, as JSON text or compressed JSON text.

Fields holding user data (inputs, outputs, definitions' parameters) are never stored as nested
documents. User keys may contain "." or start with "$", which MongoDB restricts and FerretDB 1.x
refuses outright: a worker returning {"a.b": 1} made every commit of its workflow fail,
redelivering the decider's batch forever. Nothing filters inside these fields; queries use
top-level copies (mongo_codec), and free text reads the text itself (mongo_search).
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Sequence
from typing import Any

OPAQUE_WORKFLOW_FIELDS = ("state", "outbox")
OPAQUE_TASK_FIELDS = ("inputData", "outputData")

COMPRESSED_FIELDS = frozenset({"state"})
"""An execution's state is the bulk of every commit (about 7 KB of JSON at the end of a 10-step
workflow), and FerretDB's SQLite backend rewrites the whole document each time. Stored as zlib
(level 1: about a quarter of the size for a few microseconds) in a BSON binary, FerretDB spends
1.8 instead of 4.8 CPU-ms per document written and read back (benchmarks/README.md, issue 16).
Documents written before hold plain JSON text, which `opaque_text` still reads."""
COMPRESSION_LEVEL = 1


def to_opaque(data: dict[str, Any], fields: Sequence[str]) -> dict[str, Any]:
    """`data` with each of `fields` it holds replaced by its stored form (in place)."""
    for name in fields:
        if name in data:
            text = json.dumps(data[name], separators=(",", ":"))
            compressed = name in COMPRESSED_FIELDS
            data[name] = zlib.compress(text.encode(), COMPRESSION_LEVEL) if compressed else text
    return data


def opaque_text(value: str | bytes) -> str:
    """The JSON text of a stored opaque field, compressed or (written before) plain."""
    return zlib.decompress(value).decode() if isinstance(value, bytes) else value


def from_opaque(data: dict[str, Any], fields: Sequence[str]) -> dict[str, Any]:
    """`data` with each of `fields` it holds parsed back from its stored form (in place)."""
    for name in fields:
        value = data.get(name)
        if isinstance(value, str | bytes):
            data[name] = json.loads(opaque_text(value))
    return data
