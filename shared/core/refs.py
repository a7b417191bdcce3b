"""Execution references, as Conductor writes them: a task inside a DO_WHILE body runs as
`ref__N` at iteration N (N from 1); the DO_WHILE itself keeps its plain reference.

Cairn nests the suffixes for nested loops, outermost first (`inner__2__3`: iteration 2 of the
outer loop, iteration 3 of the inner one), so executions of different outer iterations never share
a reference (docs/operators.md, "Where Cairn differs").
"""

from __future__ import annotations

import re

SEPARATOR = "__"
_SUFFIX = re.compile(r"(?:__\d+)+$")

Scope = tuple[int, ...]
"""The iterations of the DO_WHILE loops around a node, outermost first; () outside any loop."""


def execution_ref(ref: str, scope: Scope) -> str:
    """The reference an execution of node `ref` carries in `scope`."""
    return ref + "".join(f"{SEPARATOR}{iteration}" for iteration in scope)


def node_ref(reference: str) -> str:
    """The definition's reference name behind an execution reference (`x__2__1` -> `x`)."""
    return _SUFFIX.sub("", reference)


def scope_of(reference: str) -> Scope:
    """The loop iterations an execution reference encodes (`x__2__1` -> (2, 1))."""
    suffix = _SUFFIX.search(reference)
    if suffix is None:
        return ()
    return tuple(int(part) for part in suffix.group(0).split(SEPARATOR) if part)
