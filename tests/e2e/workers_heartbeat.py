"""Workers for tests/e2e/test_heartbeats_e2e.py, run in their own process by `cairn worker`."""

import time
from typing import Any

from cairn import InProgress, worker
from shared.models.messages import TaskMessage


@worker("hb_e2e_long")
def long_running(task_input: dict[str, Any]) -> dict[str, Any]:
    """A plain function that blocks for three times its task's responseTimeoutSeconds: only the
    runner's automatic heartbeats keep it from being timed out."""
    time.sleep(task_input["seconds"])
    return {"slept": task_input["seconds"]}


@worker("hb_e2e_callback")
def check_later(task_input: dict[str, Any], task: TaskMessage) -> dict[str, Any] | InProgress:
    """Not ready on its first delivery: asks to be handed the task again a second later."""
    if task.poll_count == 1:
        return InProgress(1, {"first": True})
    return {"done": True, "polls": task.poll_count}
