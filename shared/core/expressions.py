"""Conductor parameter expressions: `${workflow.input.x}`, `${ref.output.a.b[0]}`, `$${` escapes.

Semantics follow Conductor's ParametersUtils (docs/research/conductor-operators.md §2):
- a string that is exactly one `${path}` is replaced by the value itself, keeping its type;
- `${path}` inside a longer string is interpolated as text the way Java's `Objects.toString`
  writes it: null as `null`, booleans `true`/`false`, maps `{a=1, b=x}`, lists `[1, 2]`;
- `${...}` may nest: `${workflow.input.${workflow.input.key}}` resolves the inner expression
  first, as text, then reads the outer path;
- a path that resolves to nothing gives null; `${}` gives the empty string;
- `$${` is an escape for a literal `${`;
- `${secrets.NAME}` (and `${workflow.secrets.NAME}`) is left as written: only the system-task
  worker resolves secrets (shared/core/secret_refs.py);
- maps and lists are evaluated recursively; keys are never interpolated.
The path is evaluated as JSONPath over {"workflow": {...}, "<ref>": {...}} like Conductor does.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jsonpath

from shared.core.secret_refs import is_secret_body

_NUMERIC_MEMBER = re.compile(r"\.(\d+)(?=[.\[]|$)")


def resolve_path(path: str, context: Mapping[str, Any]) -> Any:
    """Evaluate one `${...}` body. Missing paths and unparsable paths give None, as in Conductor.

    `.2` is a member name, as Jayway JsonPath (Conductor's) reads it: `${loop.output.2.body}` is
    iteration 2 of a DO_WHILE's output."""
    plan = _plan(path)
    if isinstance(plan, tuple):  # plain member names: read them, no JSONPath machinery
        value: Any = context
        for name in plan:
            if not isinstance(value, Mapping) or name not in value:
                return None
            value = value[name]
        return value
    if plan is None:
        return None
    try:
        matches = plan.path.findall(context)
    except Exception:  # a path that cannot be followed behaves like a missing one in Conductor
        return None
    if not matches:
        return None
    if len(matches) == 1 and not plan.multi:
        return matches[0]
    return list(matches)


@dataclass(frozen=True)
class _Compiled:
    path: jsonpath.JSONPath | jsonpath.CompoundJSONPath
    multi: bool
    """whether it can match many values (then its value is always a list)"""


_MEMBER_NAMES = re.compile(r"\$(?:\.[A-Za-z_][A-Za-z0-9_]*)+")


@functools.lru_cache(maxsize=4096)
def _plan(path: str) -> tuple[str, ...] | _Compiled | None:
    """How to read `path`, worked out once per distinct path (a definition's paths repeat on every
    task of every execution; parsing one as JSONPath cost ~25 us): the member names of a path
    made of plain names only, else its compiled JSONPath and whether it can match many values,
    or None when it does not parse."""
    expression = _NUMERIC_MEMBER.sub(lambda m: f"['{m.group(1)}']", path.strip())
    if not expression.startswith("$"):
        expression = "$." + expression
    if _MEMBER_NAMES.fullmatch(expression):
        return tuple(expression[2:].split("."))
    try:
        return _Compiled(jsonpath.compile(expression), _is_multi(expression))
    except Exception:  # a malformed path behaves like a missing one in Conductor
        return None


def _is_multi(expression: str) -> bool:
    return "*" in expression or ".." in expression or "?" in expression or ":" in expression


def java_text(value: Any) -> str:
    """What Java's Objects.toString prints for a JSON value (Conductor's interpolation)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, float):
        return _java_double(value)
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{key}={java_text(item)}" for key, item in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(java_text(item) for item in value) + "]"
    return str(value)


def _java_double(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == int(value) and abs(value) < 1e7:
        return f"{int(value)}.0"
    text = repr(value)
    if "e" in text:
        mantissa, exponent = text.split("e")
        mantissa = mantissa if "." in mantissa else mantissa + ".0"
        return f"{mantissa}E{int(exponent)}"
    return text


def _find_tokens(text: str) -> list[tuple[int, int]]:
    """(start, end) of every top-level `${...}` (braces balanced), skipping `$${` escapes."""
    tokens: list[tuple[int, int]] = []
    index = 0
    while True:
        start = text.find("${", index)
        if start < 0:
            return tokens
        if start > 0 and text[start - 1] == "$":
            index = start + 2
            continue
        depth = 0
        end = -1
        for position in range(start + 1, len(text)):
            char = text[position]
            if char == "{":
                depth += 1
            elif char == "}":
                depth -= 1
                if depth == 0:
                    end = position
                    break
        if end < 0:
            return tokens  # an unclosed `${` is plain text
        tokens.append((start, end + 1))
        index = end + 1


def _resolve_token(body: str, context: Mapping[str, Any]) -> Any:
    if not body.strip():
        return ""
    if is_secret_body(body):  # resolved by the system-task worker only (shared/core/secret_refs.py)
        return "${" + body + "}"
    if "${" in body:
        body = _interpolate(body, context)
    return resolve_path(body, context)


def _interpolate(text: str, context: Mapping[str, Any]) -> str:
    pieces: list[str] = []
    last = 0
    for start, end in _find_tokens(text):
        pieces.append(text[last:start])
        pieces.append(java_text(_resolve_token(text[start + 2 : end - 1], context)))
        last = end
    pieces.append(text[last:])
    return "".join(pieces).replace("$${", "${")


def evaluate_string(text: str, context: Mapping[str, Any]) -> Any:
    if "${" not in text:
        return text
    tokens = _find_tokens(text)
    if len(tokens) == 1 and tokens[0] == (0, len(text)):
        return _resolve_token(text[2:-1], context)
    return _interpolate(text, context)


def evaluate(value: Any, context: Mapping[str, Any]) -> Any:
    """Evaluate every expression inside `value` (a parameter map, list or scalar)."""
    if isinstance(value, str):
        return evaluate_string(value, context)
    if isinstance(value, Mapping):
        return {key: evaluate(item, context) for key, item in value.items()}
    if isinstance(value, list):
        return [evaluate(item, context) for item in value]
    return value


def evaluate_parameters(parameters: Mapping[str, Any], context: Mapping[str, Any]) -> dict[str, Any]:
    return {key: evaluate(item, context) for key, item in parameters.items()}
