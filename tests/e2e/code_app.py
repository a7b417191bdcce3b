"""A code-workflow app for the failure matrix (tests/e2e/test_code_failures_*): run as
`python -m tests.e2e.code_app`, it hosts `chain3` (three activities in a row, each recording its
side effect in CODE_APP_EFFECTS, one line per execution), `await_event` (waits for "go") and
`long_timer` (sleeps CODE_APP_TIMER_S on a durable timer), until SIGTERM. With
CODE_APP_NO_ACTIVITIES it hosts no activity (an activity is a task type: any app hosting it may
run it, so an app running beside a row would take that row's work).

Faults, each at most once per CODE_APP_FLAGS directory (a flag file says it happened):
- CODE_APP_KILL_IN_REPLAY=<marker>: the orchestrator SIGKILLs its own process in the first live
  turn of an instance whose id holds the marker (after its activity results arrived);
- CODE_APP_KILL_AFTER_EFFECT=<marker>: the activity SIGKILLs its process right after writing
  its side effect for such an instance, before the result is reported.
"""

from __future__ import annotations

import os
import signal
import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import cairn.workflow as wf

EFFECTS = Path(os.environ.get("CODE_APP_EFFECTS", "effects.log"))
FLAGS = Path(os.environ.get("CODE_APP_FLAGS", "."))
TIMER_S = float(os.environ.get("CODE_APP_TIMER_S", "120"))
wfr = wf.WorkflowRuntime()
_lock = threading.Lock()


def _once(fault: str, instance_id: str) -> bool:
    marker = os.environ.get(fault)
    if not marker or marker not in instance_id:
        return False
    flag = FLAGS / f"{fault}.done"
    try:
        flag.touch(exist_ok=False)
    except FileExistsError:
        return False
    return True


def side_effect(ctx: wf.WorkflowActivityContext, step: dict[str, Any]) -> int:
    with _lock, EFFECTS.open("a") as effects:
        effects.write(f"{ctx.workflow_id} {step['step']}\n")
    if _once("CODE_APP_KILL_AFTER_EFFECT", ctx.workflow_id):
        os.kill(os.getpid(), signal.SIGKILL)
    return int(step["value"]) * 10 + int(step["step"])


if not os.environ.get("CODE_APP_NO_ACTIVITIES"):  # the timer row's app runs none of the others' work
    wfr.register_activity(side_effect, name="side_effect")


@wfr.workflow(name="chain3")
def chain3(ctx: wf.DaprWorkflowContext, value: int) -> Any:
    results = []
    for step in range(1, 4):
        result = yield ctx.call_activity(side_effect, input={"step": step, "value": value})
        if not ctx.is_replaying and step == 2 and _once("CODE_APP_KILL_IN_REPLAY", ctx.instance_id):
            os.kill(os.getpid(), signal.SIGKILL)
        results.append(result)
    return results


@wfr.workflow(name="await_event")
def await_event(ctx: wf.DaprWorkflowContext, value: int) -> Any:
    got = yield ctx.wait_for_external_event("go")
    done = yield ctx.call_activity(side_effect, input={"step": 1, "value": value})
    return {"event": got, "done": done}


@wfr.workflow(name="long_timer")
def long_timer(ctx: wf.DaprWorkflowContext, value: int) -> Any:
    started = ctx.current_utc_datetime
    yield ctx.create_timer(timedelta(seconds=TIMER_S))
    return {"value": value, "waitedS": (ctx.current_utc_datetime - started).total_seconds()}


if __name__ == "__main__":
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    wfr.start()
    print("code app ready", flush=True)
    stop.wait()
    wfr.shutdown()
