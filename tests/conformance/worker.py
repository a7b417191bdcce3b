"""An HTTP polling worker for the suite's SIMPLE task types, run the same way against each server.

Every output is computed from the polled task alone (its inputData and retryCount), so both
servers see the same outputs for the same inputs. Task type names are `<prefix><kind>`; the
kinds:

- `echo`: `{echo: inputData, worker: "conformance"}`, plus `doubled: 2 * x` when `x` is a number;
- `flaky`: FAILED on the first attempt (retryCount 0), then COMPLETED with `{attempt, echo}`;
- `once`: FAILED on the first attempt, COMPLETED with `{attempt, echo}` after (its TaskDef has no
  retries, so the workflow fails: an operator's retry or rerun makes the next attempt);
- `fail`: always FAILED, with output `{failed: true}`;
- `tools`: the agent loop's tool listing, `{tools: [...]}`;
- `think`: the agent loop's model stand-in: `{action: "call" | "done", tool, turn}`, "done" from
  turn 3 on.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from tests.conformance.client import ConductorRest

KINDS = ("echo", "flaky", "once", "fail", "tools", "think")
TOOLS = ["search", "calculator", "weather"]


def outcome(kind: str, task: dict[str, Any]) -> tuple[str, dict[str, Any], str | None]:
    """(status, outputData, reasonForIncompletion) for a polled task of this kind."""
    given: dict[str, Any] = task.get("inputData") or {}
    if kind == "echo":
        output: dict[str, Any] = {"echo": given, "worker": "conformance"}
        x = given.get("x")
        if isinstance(x, int | float) and not isinstance(x, bool):
            output["doubled"] = 2 * x
        return "COMPLETED", output, None
    if kind == "flaky":
        attempt = int(task.get("retryCount") or 0)
        if attempt == 0:
            return "FAILED", {"attempt": attempt}, "flaky: the first attempt fails"
        return "COMPLETED", {"attempt": attempt, "echo": given}, None
    if kind == "once":
        attempt = int(task.get("retryCount") or 0)
        if attempt == 0 and not given.get("again"):
            return "FAILED", {"attempt": attempt}, "once: the first attempt fails"
        return "COMPLETED", {"attempt": attempt, "echo": given}, None
    if kind == "fail":
        return "FAILED", {"failed": True}, "fail: this task always fails"
    if kind == "tools":
        return "COMPLETED", {"tools": TOOLS}, None
    if kind == "think":
        turn = given.get("turn")
        turn = turn if isinstance(turn, int) else 0
        action = "done" if turn >= 3 else "call"
        return "COMPLETED", {"action": action, "tool": TOOLS[turn % len(TOOLS)], "turn": turn}, None
    raise ValueError(f"no such worker kind {kind!r}")


class PollingWorker:
    """One thread per task type, each long-polling `GET /api/tasks/poll/batch/{type}` and
    answering every task with `POST /api/tasks`."""

    def __init__(self, rest: ConductorRest, prefix: str) -> None:
        self.rest = rest
        self.prefix = prefix
        self.stopping = threading.Event()
        self.errors: list[str] = []
        self.handled = 0
        self._lock = threading.Lock()
        self.threads = [
            threading.Thread(target=self._run, args=(kind,), name=f"worker-{rest.name}-{kind}", daemon=True)
            for kind in KINDS
        ]

    def task_type(self, kind: str) -> str:
        return f"{self.prefix}{kind}"

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def stop(self) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(timeout=10)

    def _run(self, kind: str) -> None:
        task_type = self.task_type(kind)
        try:
            while not self.stopping.is_set():
                try:
                    tasks = self.rest.poll_batch(task_type, count=10, timeout_ms=200)
                except Exception as error:  # a server restart or a slow answer: note it, go on
                    self._note(f"poll {task_type}: {error}")
                    time.sleep(0.2)
                    continue
                for task in tasks:
                    status, output, reason = outcome(kind, task)
                    result = {
                        "workflowInstanceId": task["workflowInstanceId"],
                        "taskId": task["taskId"],
                        "status": status,
                        "outputData": output,
                        "reasonForIncompletion": reason,
                        "workerId": "conformance",
                    }
                    try:
                        self.rest.update_task(result)
                        with self._lock:
                            self.handled += 1
                    except Exception as error:
                        self._note(f"update {task_type} {task['taskId']}: {error}")
        finally:
            self.rest.close()

    def _note(self, error: str) -> None:
        with self._lock:
            self.errors.append(error)
