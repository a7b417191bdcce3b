"""What the code-workflow failure matrix shares (tests/e2e/test_code_failures_*): the app under
test as a process (tests/e2e/code_app.py), its side-effect log, and starting and awaiting
instances over the api."""

from __future__ import annotations

import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any, Protocol

import httpx

from tests.e2e.cluster import Process


class Server(Protocol):
    url: str
    env: dict[str, str]


FAST = {
    "CAIRN_CODE_TURN_TIMEOUT_S": "2",
    "CAIRN_SWEEPER_STALE_AFTER_S": "2",
    "CAIRN_SWEEPER_STALE_INTERVAL_S": "1",
}
SIDE_EFFECT_DEF = {
    "name": "side_effect",
    "responseTimeoutSeconds": 2,
    "retryCount": 3,
    "retryDelaySeconds": 0,
}
TIMER_S = 120


EFFECTS = Path(f"/tmp/cairn-code-effects-{uuid.uuid4().hex}.log")
"""One side-effect log for every app of a run: an activity is a task type, and any runtime
that has it may run it (the timer row's app, too), as any worker of a task type may."""


class CodeApp:
    """`python -m tests.e2e.code_app` as a process, on an app of its own."""

    def __init__(self, server: Server, directory: Path, app: str, **faults: str) -> None:
        self.effects = EFFECTS
        env = {
            **server.env,
            "CAIRN_SERVER": server.url,
            "CAIRN_APP": app,
            "CODE_APP_EFFECTS": str(self.effects),
            "CODE_APP_FLAGS": str(directory),
            "CODE_APP_TIMER_S": str(TIMER_S),
            **faults,
        }
        name = f"code-app-{app}-{uuid.uuid4().hex[:4]}"
        self.process = Process(name, [sys.executable, "-m", "tests.e2e.code_app"], env, directory)

    def start(self) -> CodeApp:
        self.process.start()
        deadline = time.monotonic() + 30
        while "code app ready" not in self.process.log_tail():
            assert self.process.alive() and time.monotonic() < deadline, self.process.log_tail()
            time.sleep(0.05)
        return self

    def counted(self, workflow_id: str) -> Counter[tuple[str, int]]:
        """How often each step of `workflow_id` had its side effect, in every app."""
        lines = self.effects.read_text().splitlines() if self.effects.exists() else []
        found = [line.split() for line in lines]
        return Counter((wid, int(step)) for wid, step in found if wid == workflow_id)


def start(api: httpx.Client, app: str, name: str, workflow_id: str, value: Any) -> None:
    body = {"name": name, "workflowId": workflow_id, "input": {"input": value}, "kind": "code", "app": app}
    response = api.post("/api/workflow", json=body)
    assert response.status_code == 200, response.text


def wait_done(api: httpx.Client, workflow_id: str, seconds: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + seconds
    while True:
        try:
            found = api.get(f"/api/workflow/{workflow_id}")
            if found.status_code == 200 and found.json()["status"] not in ("RUNNING", "PAUSED", "STALLED"):
                return dict(found.json())
        except httpx.HTTPError:
            pass  # the server is restarting
        assert time.monotonic() < deadline, f"{workflow_id} did not finish in {seconds}s"
        time.sleep(0.1)
