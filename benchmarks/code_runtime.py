"""The code-workflow side of benchmarks/code_w1_w2.py: W1/W2's shapes as orchestrators (k no-op
activities in sequence), hosted by one WorkflowRuntime process until SIGTERM."""

from __future__ import annotations

import signal
import threading
from typing import Any

import cairn.workflow as wf

STEPS = (1, 3, 10)
wfr = wf.WorkflowRuntime(maximum_concurrent_activity_work_items=20)


@wfr.activity(name="bench_noop_activity")
def noop(ctx: wf.WorkflowActivityContext, value: Any) -> Any:
    return value


def steps(k: int) -> Any:
    def orchestrator(ctx: wf.DaprWorkflowContext, i: int) -> Any:
        for step in range(k):
            yield ctx.call_activity(noop, input=step)
        return i

    return orchestrator


for k in STEPS:
    wfr.register_workflow(steps(k), name=f"code_k{k}")

if __name__ == "__main__":
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    wfr.start()
    print("code runtime ready", flush=True)
    stop.wait()
    wfr.shutdown()
