"""Conductor parameter expressions: `${workflow.input.x}`, `${ref.output.a.b[0]}`, `$${` escapes.

Semantics follow Conductor's ParametersUtils:
- a string that is exactly one `${path}` is replaced by the value itself, keeping its type;
- `${path}` inside a longer string is interpolated as text (null becomes the empty string; numbers,
  booleans, objects and lists are written as JSON — Conductor writes Java's toString there);
- a path that resolves to nothing gives null;
- `$${` is an escape for a literal `${`;
- maps and lists are evaluated recursively.
The path is evaluated as JSONPath over {"workflow": {...}, "<ref>": {...}} like Conductor does.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import jsonpath

_TOKEN = re.compile(r"(?<!\$)\$\{([^}]*)\}")
_WHOLE = re.compile(r"^\$\{([^}]*)\}$")


def resolve_path(path: str, context: Mapping[str, Any]) -> Any:
    """Evaluate one `${...}` body. Missing paths and unparsable paths give None, as in Conductor."""
    expression = path.strip()
    if not expression.startswith("$"):
        expression = "$." + expression
    try:
        matches = jsonpath.findall(expression, context)
    except Exception:  # a malformed path behaves like a missing one in Conductor
        return None
    if not matches:
        return None
    if len(matches) == 1 and not _is_multi(expression):
        return matches[0]
    return list(matches)


def _is_multi(expression: str) -> bool:
    return "*" in expression or ".." in expression or "?" in expression or ":" in expression


def _to_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"))


def evaluate_string(text: str, context: Mapping[str, Any]) -> Any:
    whole = _WHOLE.match(text)
    if whole:
        return resolve_path(whole.group(1), context)
    if "${" not in text:
        return text
    interpolated = _TOKEN.sub(lambda m: _to_text(resolve_path(m.group(1), context)), text)
    return interpolated.replace("$${", "${")


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
