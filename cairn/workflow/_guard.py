"""Strict mode (CAIRN_WORKFLOW_STRICT): catch an orchestrator reading the wall clock or random
numbers itself, instead of `ctx.current_utc_datetime` and `ctx.new_guid()`.

Such a read makes replays differ from the run they replay. While an orchestrator's turn runs, a
profile hook on that thread (and only that one: activities and the runtime go on unwatched)
notes every call to a clock or a random source made from user code; the turn then stalls with a
description naming the call and where it was made. Calls made by the libraries the runtime uses
(logging's timestamps, pydantic, Cairn itself) do not count; a `random.Random(seed)` of the
orchestrator's own is deterministic and allowed.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

CLOCK_FUNCTIONS = {
    ("time", "time"),
    ("time", "time_ns"),
    ("time", "monotonic"),
    ("time", "monotonic_ns"),
    ("time", "perf_counter"),
    ("time", "perf_counter_ns"),
    ("posix", "urandom"),
    ("nt", "urandom"),
}
"""(module, name) of the C functions that read a clock or the system's randomness (uuid4 and
SystemRandom end in urandom)."""
CLOCK_METHODS = {"datetime.now", "datetime.utcnow", "datetime.today", "date.today"}
SHARED_RANDOM = {"Random.random", "Random.getrandbits"}
"""The random module's functions (random, choice, randint, shuffle, ...) all end in one of these
on the module's shared, unseeded generator."""

RUNTIME_MODULES = (
    "cairn.",
    "shared.",
    "pydantic",
    "logging",
    "json",
    "typing",
    "inspect",
    "threading",
    "hypothesis",
    "_pytest",
)
PASS_THROUGH = ("random", "uuid", "datetime")
"""Modules that read the clock or randomness for whoever called them: look at their caller."""


def forbidden(arg: Any) -> str | None:
    """The name of the read `arg` (a C function about to be called) is, or None."""
    name = getattr(arg, "__qualname__", "")
    module = getattr(arg, "__module__", None)
    if (module, name) in CLOCK_FUNCTIONS:
        return f"{module}.{name}"
    if name in CLOCK_METHODS:
        return f"datetime.{name}"
    if name in SHARED_RANDOM and getattr(arg, "__self__", None) is random._inst:
        return f"random.{name.split('.')[-1]}"
    return None


def _user_frame(frame: FrameType | None) -> FrameType | None:
    """The user code that made the call, or None when the runtime or a library made it."""
    while frame is not None:
        module = str(frame.f_globals.get("__name__", ""))
        if module.startswith(RUNTIME_MODULES):
            return None
        if not module.startswith(PASS_THROUGH):
            return frame
        frame = frame.f_back
    return None


@contextmanager
def watching(violations: list[str]) -> Iterator[None]:
    """Note in `violations` each forbidden read user code makes on this thread meanwhile."""

    def hook(frame: FrameType, event: str, arg: Any) -> None:
        if event != "c_call":
            return
        read = forbidden(arg)
        if read is None:
            return
        user = _user_frame(frame)
        if user is not None:
            violations.append(f"{read}() at {user.f_code.co_filename}:{user.f_lineno}")

    previous = sys.getprofile()
    sys.setprofile(hook)
    try:
        yield
    finally:
        sys.setprofile(previous)
