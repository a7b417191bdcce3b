"""`${secrets.NAME}` in a system task's input: where a secret goes, never what it is.

The decider never sees a secret's value. It leaves a secret reference as written (the stored
task input shows `Bearer ${secrets.API_TOKEN}`) and records the places in the input where the
definition itself put one (`secret_paths`); the system-task worker replaces references at those
places only, from its secret store, in memory, just before the call (shared/secrets.py).

Only places the definition wrote count. A reference that reaches an input as data — a model's
answer, a workflow's input, a dynamic fork's branch made at run time — is inert text: otherwise a
prompt-injected model could ask for `${secrets.OPENAI_API_KEY}` in a tool's arguments and send it
to a server of its choosing. So that a place holds nothing but what the definition wrote, a string
with a secret reference may hold only text and secret references (no other `${...}`).

Orkes Conductor's spelling, `${workflow.secrets.NAME}`, is accepted too. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

SECRET_NAME = r"[A-Za-z_][A-Za-z0-9_.-]{0,199}"
SECRET_BODY = re.compile(rf"^\s*(?:workflow\.)?secrets\.({SECRET_NAME})\s*$")
"""The inside of `${...}` that names a secret."""
SECRET_REFERENCE = re.compile(rf"(?<!\$)\$\{{\s*(?:workflow\.)?secrets\.({SECRET_NAME})\s*\}}")
"""One secret reference in a string (not its `$${` escape)."""

SECRET_TASK_TYPES = frozenset(
    {"HTTP", "LLM_CHAT_COMPLETE", "LLM_TEXT_COMPLETE", "LIST_MCP_TOOLS", "CALL_MCP_TOOL"}
)
"""The task types whose input may carry secret references: the system-task worker runs them and
sends the input to the service it names (an EVENT task's payload would be published as is)."""

Path = list[str | int]


def is_secret_body(body: str) -> bool:
    """True when the inside of a `${...}` names a secret (the evaluator leaves it as written)."""
    return SECRET_BODY.match(body) is not None


def secret_names(text: str) -> list[str]:
    return SECRET_REFERENCE.findall(text)


def secret_paths(parameters: Mapping[str, Any]) -> list[Path]:
    """Where in an input built from `parameters` (a definition's inputParameters) the definition
    wrote a secret reference: the paths of those strings, keys and list indexes."""
    return [path for path, text in _strings(parameters, []) if SECRET_REFERENCE.search(text)]


def _strings(value: Any, path: Path) -> Iterator[tuple[Path, str]]:
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from _strings(item, [*path, str(key)])
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _strings(item, [*path, index])


def reference_problems(task_type: str, parameters: Mapping[str, Any], where: str) -> list[tuple[str, str]]:
    """What is wrong with the secret references of one node's inputParameters (at registration):
    a reference in a task type that would not resolve it, or beside another expression."""
    problems: list[tuple[str, str]] = []
    for path, text in _strings(parameters, []):
        if not SECRET_REFERENCE.search(text):
            continue
        place = where + "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in path)
        if task_type not in SECRET_TASK_TYPES:
            problems.append(
                (
                    place,
                    f"{task_type} tasks do not resolve secrets: ${{secrets.NAME}} works in the input of "
                    f"{', '.join(sorted(SECRET_TASK_TYPES))}",
                )
            )
        elif "${" in SECRET_REFERENCE.sub("", text):
            problems.append(
                (
                    place,
                    "a value with ${secrets.NAME} may hold only text and secret references: put other "
                    "expressions in a parameter of their own",
                )
            )
    return problems


def value_at(data: Any, path: Path) -> Any:
    """The value at `path` in `data`, or None when the path does not lead anywhere."""
    for part in path:
        if isinstance(part, int):
            if not isinstance(data, list) or not 0 <= part < len(data):
                return None
        elif not isinstance(data, Mapping) or part not in data:
            return None
        data = data[part]
    return data
