"""The benchmark's worker: a no-op SIMPLE task, so the figures measure the engine alone (async:
a plain function would run in the worker's thread pool and add its hop to every task)."""

from typing import Any

from cairn import worker


@worker("bench_noop")
async def noop(task_input: dict[str, Any]) -> dict[str, Any]:
    return {"i": task_input.get("i")}
