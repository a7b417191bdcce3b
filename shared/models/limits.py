"""What Cairn accepts from its users: payload size, depth and keys; ids and names; numbers and times.

Every edge (the api, Kafka start and signal events, worker results, the decision core for what
scripts and expressions build) checks against these before anything is stored or published, so
one user's input can never wedge a service, a partition or a commit. Why each bound:

- depth: a workflow document nests a payload a few levels down, and pydantic's JSON reader stops
  at about 200 levels; a start nested 200 deep was stored, then could not be read (500s forever).
- bytes: a payload travels in one Kafka message (1 MiB by default on brokers and producers) and
  sits in the workflow document; the default leaves room for the envelope.
- numbers: a deadline has to fit a 64-bit integer of milliseconds in both stores and be a date
  (years up to 9999); floats must be finite (NaN and 1e400 have no JSON form and became null).
- ids: they are path segments of Conductor's REST API and keys of Kafka messages; `a/b`, `..` or
  a newline would be unreachable by id.

Pure: no I/O, so the core and every service share it.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, Field

MAX_TIME_MS = 253_402_300_799_999
"""9999-12-31T23:59:59.999Z: the last instant every store, Python's datetime and Conductor's
clients can represent. No deadline is armed past it."""

JAVA_INT_MAX = 2**31 - 1
"""The bound of every count and seconds field Conductor types as a Java int: a definition that
loads in Conductor loads here, and seconds * 1000 added to any date before 2090 stays a date."""

WORKFLOW_ID_PATTERN = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._:@-]{0,199}")
"""Letters, digits and `. _ : @ -`, not starting with `.`, at most 200: a UUID, `order-123`,
`tenant:order.7`; never a path (`a/b`, `..`) or a control character."""

NAME_PATTERN = re.compile(r"[A-Za-z0-9_<>{}#-][A-Za-z0-9 ._<>{}#-]{0,199}")
"""Definition names: Conductor's ValidNameConstraint (letters, digits, `_ - < > { } #`, spaces),
plus `.` (task names become topic names and often have dots), at most 200, not starting with a
space or a dot. Tabs and newlines, which Conductor's `\\s` lets through, are refused."""

MAX_TEXT_LENGTH = 1000
"""Free text an operator sends (a correlation id, a reason): any printable characters."""

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


@dataclass(frozen=True)
class PayloadLimits:
    """Bounds on one payload (a workflow's input, a task's input or output, a signal's output,
    variables). Configured by CAIRN_MAX_PAYLOAD_BYTES / _DEPTH / _KEYS."""

    max_bytes: int = 512 * 1024
    max_depth: int = 32
    max_keys: int = 10_000


DEFAULT_PAYLOAD_LIMITS = PayloadLimits()


def definition_limits(payload: PayloadLimits) -> PayloadLimits:
    """Bounds on a whole definition: as large as a payload (an inline one travels in a start
    event), twice as deep (operators nest lists in objects in lists) and five times the keys (a
    thousand tasks of a few fields each)."""
    return PayloadLimits(payload.max_bytes, payload.max_depth * 2, payload.max_keys * 5)


class LimitError(ValueError):
    """Input past a limit: `problems` holds (field path, message) pairs, as definition errors do."""

    def __init__(self, problems: Sequence[tuple[str, str]]) -> None:
        self.problems = list(problems)
        super().__init__(describe(self.problems))


def payload_problems(
    value: Any, where: str, limits: PayloadLimits = DEFAULT_PAYLOAD_LIMITS
) -> list[tuple[str, str]]:
    """What is wrong with one JSON payload, with the path of the first offending member.

    Walks without recursion (a hostile payload may be nested far deeper than Python's stack) and
    measures the size only once the shape is known to be safe to serialise."""
    keys = 0
    stack: list[tuple[Any, str, int]] = [(value, where, 0)]
    while stack:
        item, path, depth = stack.pop()
        if isinstance(item, dict | list) and depth >= limits.max_depth:
            return [(path, f"nested more than {limits.max_depth} levels deep (CAIRN_MAX_PAYLOAD_DEPTH)")]
        if isinstance(item, dict):
            keys += len(item)
            if keys > limits.max_keys:
                return [(where, f"more than {limits.max_keys} keys in all (CAIRN_MAX_PAYLOAD_KEYS)")]
            for key, member in item.items():
                if not isinstance(key, str):
                    return [(path, f"key {key!r} is not a string")]
                stack.append((member, f"{path}.{key}", depth + 1))
        elif isinstance(item, list):
            stack.extend((member, f"{path}[{index}]", depth + 1) for index, member in enumerate(item))
        elif isinstance(item, float) and not math.isfinite(item):
            return [(path, f"{item} is not a JSON number (NaN and infinities are refused)")]
        elif item is not None and not isinstance(item, str | int | float):
            return [(path, f"a {type(item).__name__} is not JSON")]
    size = payload_bytes(value)
    if size > limits.max_bytes:
        allowed = f"more than the {limits.max_bytes} allowed (CAIRN_MAX_PAYLOAD_BYTES)"
        return [(where, f"{size} bytes as JSON, {allowed}")]
    return []


def describe(problems: Sequence[tuple[str, str]]) -> str:
    """Problems as one line for a reason or a log: `input.a: nested more than ...`."""
    return "; ".join(f"{path}: {message}" for path, message in problems)


def payload_bytes(value: Any) -> int:
    """The size of a payload as Cairn stores and sends it: compact JSON in UTF-8."""
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


def check_payload(value: Any, where: str, limits: PayloadLimits = DEFAULT_PAYLOAD_LIMITS) -> None:
    """Raise LimitError if `value` is past `limits`."""
    problems = payload_problems(value, where, limits)
    if problems:
        raise LimitError(problems)


def _matching(pattern: re.Pattern[str], what: str, rule: str) -> AfterValidator:
    def check(value: str) -> str:
        if not pattern.fullmatch(value):
            raise ValueError(f"{_shown(value)} is not a valid {what}: {rule}")
        return value

    return AfterValidator(check)


def _printable(value: str | None) -> str | None:
    if value is None:
        return value
    if len(value) > MAX_TEXT_LENGTH:
        raise ValueError(f"longer than {MAX_TEXT_LENGTH} characters")
    if _CONTROL.search(value):
        raise ValueError(f"{_shown(value)} contains a control character")
    return value


def _shown(value: str) -> str:
    """A value quoted in an error, cut short (an error must not echo 5,000 characters back)."""
    return repr(value if len(value) <= 60 else value[:57] + "...")


WORKFLOW_ID_RULE = "1-200 letters, digits or . _ : @ -, not starting with '.'"
NAME_RULE = "1-200 letters, digits, spaces or . _ - < > { } #, not starting with a space or '.'"

WorkflowId = Annotated[
    str,
    _matching(WORKFLOW_ID_PATTERN, "workflow id", WORKFLOW_ID_RULE),
    Field(json_schema_extra={"pattern": f"^{WORKFLOW_ID_PATTERN.pattern}$"}),
]
"""A workflow id a user may choose (and that Cairn's own ids satisfy)."""

DefinitionName = Annotated[
    str,
    _matching(NAME_PATTERN, "name", NAME_RULE),
    Field(json_schema_extra={"pattern": f"^{NAME_PATTERN.pattern}$"}),
]
"""A workflow or task definition's name."""

Text = Annotated[str, AfterValidator(_printable)]
"""Free text from a user: bounded, no control characters (newlines and tabs allowed)."""

_REFERENCE = re.compile(r"[^\x00-\x1f\x7f/]{1,200}")
Reference = Annotated[
    str,
    _matching(_REFERENCE, "reference", "1-200 characters, no '/' or control character"),
    Field(json_schema_extra={"pattern": f"^{_REFERENCE.pattern}$"}),
]
"""A task reference name (a path segment of skiptask and signal URLs), or a task id."""


def _cut(value: Any) -> Any:
    if isinstance(value, str) and len(value) > MAX_TEXT_LENGTH:
        return value[:MAX_TEXT_LENGTH]
    return value


truncated = BeforeValidator(_cut)
"""A reason for incompletion or termination: kept to its first 1,000 characters, as Conductor
keeps 500 of a worker's (a stack trace is no reason to refuse a result)."""
