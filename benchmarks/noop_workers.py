"""The benchmark's worker: a no-op SIMPLE task, so the figures measure the engine alone."""

from typing import Any

from cairn import worker


@worker("bench_noop")
def noop(task_input: dict[str, Any]) -> dict[str, Any]:
    return {"i": task_input.get("i")}
