"""Workers used by the end-to-end tests, run in their own process by `cairn worker`."""

import asyncio
from pathlib import Path
from typing import Any

from cairn import worker
from shared.models.messages import TaskMessage


@worker("e2e_add")
async def add(task_input: dict[str, Any]) -> dict[str, Any]:
    await asyncio.sleep(0.02)
    return {"n": task_input["n"] + task_input["add"]}


@worker("e2e_mul")
def mul(task_input: dict[str, Any]) -> dict[str, Any]:
    return {"n": task_input["n"] * task_input["by"]}


@worker("e2e_fmt")
async def fmt(task_input: dict[str, Any]) -> dict[str, Any]:
    await asyncio.sleep(0.02)
    return {"text": f"{task_input['label']}={task_input['n']}"}


@worker("e2e_flaky")
def flaky(task_input: dict[str, Any], task: TaskMessage) -> dict[str, Any]:
    """Fails its first attempt, succeeds on the retry: exercises retry timers."""
    if task.retry_count == 0:
        raise RuntimeError("first attempt always fails")
    return {"n": task_input["n"] + 1, "attempt": task.retry_count}


@worker("e2e_slow")
async def slow(task_input: dict[str, Any]) -> dict[str, Any]:
    """Long enough to be in flight when the worker process is asked to stop; touches `marker`
    when it starts so the test knows it is in flight."""
    if task_input.get("marker"):
        Path(task_input["marker"]).touch()
    await asyncio.sleep(task_input.get("seconds", 3))
    return {"slept": task_input.get("seconds", 3)}
