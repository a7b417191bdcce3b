"""Workers for the failure-matrix tests (tests/e2e/test_failure_matrix_e2e.py), each playing one
way a worker can go wrong. Run by `cairn worker tests.e2e.workers_matrix` over HTTP or Kafka.

Files named in the task input coordinate with the test: `marker` (exists once a first attempt
happened) and `ledger` (one line per execution: the worker's own record of side effects).
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

from cairn import worker
from cairn.worker import TerminalError
from shared.models.messages import TaskMessage


def _die_now() -> None:
    """SIGKILL this worker process: no result, no cleanup, no acknowledgement."""
    os.kill(os.getpid(), signal.SIGKILL)


@worker("matrix_die_first")
def die_first(task_input: dict[str, Any], task: TaskMessage) -> dict[str, Any]:
    """The first worker to take the task dies before doing anything; the next one does the work."""
    marker = Path(task_input["marker"])
    if not marker.exists():
        marker.touch()
        _die_now()
    return {"done_by": os.getpid(), "attempt": task.retry_count}


@worker("matrix_side_effect")
def side_effect(task_input: dict[str, Any], task: TaskMessage) -> dict[str, Any]:
    """Charges a card (a line in the ledger) and dies before reporting, the first time. The
    step's identity (workflow id + task reference) tells a later run that the charge was made:
    it does not charge again and reports what it saw."""
    ledger = Path(task_input["ledger"])
    step = f"{task.workflow_instance_id}/{task.reference_task_name}"
    earlier = [json.loads(line) for line in ledger.read_text().splitlines()] if ledger.exists() else []
    mine = [entry for entry in earlier if entry["step"] == step]
    charged = any(entry["charged"] for entry in mine)
    with ledger.open("a") as out:
        entry = {"step": step, "task_id": task.task_id, "attempt": task.retry_count, "charged": not charged}
        out.write(json.dumps(entry) + "\n")
    if not mine:
        _die_now()
    return {
        "charges": 1,
        "redelivery_detected": True,
        "runs": [[e["task_id"], e["attempt"]] for e in mine] + [[task.task_id, task.retry_count]],
    }


@worker("matrix_always_fail")
def always_fail(task_input: dict[str, Any], task: TaskMessage) -> dict[str, Any]:
    raise RuntimeError(f"card declined (attempt {task.retry_count})")


@worker("matrix_terminal")
def terminal(task_input: dict[str, Any]) -> dict[str, Any]:
    raise TerminalError("account closed: retrying cannot help")


@worker("matrix_slow")
def slow(task_input: dict[str, Any], task: TaskMessage) -> dict[str, Any]:
    """Takes `seconds`; says who did it, so the test can tell the late attempt from the retry."""
    if task_input.get("marker"):
        Path(task_input["marker"]).write_text(str(os.getpid()))
    time.sleep(task_input.get("seconds", 4))
    return {"done_by": os.getpid(), "task_id": task.task_id}


@worker("matrix_echo")
def echo(task_input: dict[str, Any]) -> dict[str, Any]:
    return dict(task_input)
