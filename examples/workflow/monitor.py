"""An eternal monitor: check a job's health, alert when it turns unhealthy, sleep, and start over
with continue_as_new so the history never grows (Dapr's monitor.py)."""

import os
import random
import time
from dataclasses import dataclass
from datetime import timedelta

import cairn.workflow as wf

HEALTHY_INTERVAL_S = int(os.environ.get("MONITOR_HEALTHY_INTERVAL_S", "60"))
UNHEALTHY_INTERVAL_S = int(os.environ.get("MONITOR_UNHEALTHY_INTERVAL_S", "5"))
STOP_AFTER_CHECKS = int(os.environ.get("MONITOR_STOP_AFTER_CHECKS", "0"))
"""For tests: stop after this many checks instead of waiting for Enter."""
checks_made = 0


@dataclass
class JobStatus:
    job_id: str
    is_healthy: bool


wfr = wf.WorkflowRuntime()


@wfr.workflow(name="status_monitor")
def status_monitor_workflow(ctx: wf.DaprWorkflowContext, job: JobStatus):
    status = yield ctx.call_activity(check_status, input=job)
    if not ctx.is_replaying:
        print(f"Job '{job.job_id}' is {status}.", flush=True)

    if status == "healthy":
        job.is_healthy = True
        next_sleep_interval = HEALTHY_INTERVAL_S
    else:
        if job.is_healthy:
            job.is_healthy = False
            ctx.call_activity(send_alert, input=f"Job '{job.job_id}' is unhealthy!")
        next_sleep_interval = UNHEALTHY_INTERVAL_S

    yield ctx.create_timer(fire_at=timedelta(seconds=next_sleep_interval))
    ctx.continue_as_new(job)


@wfr.activity
def check_status(ctx, _) -> str:
    global checks_made
    checks_made += 1
    return random.choice(["healthy", "unhealthy"])


@wfr.activity
def send_alert(ctx, message: str):
    print(f"*** Alert: {message}", flush=True)


if __name__ == "__main__":
    wfr.start()
    wf_client = wf.DaprWorkflowClient()
    job_id = "job1"
    status = wf_client.get_workflow_state(job_id)
    if not status or status.runtime_status.name != "RUNNING":
        instance_id = wf_client.schedule_new_workflow(
            workflow=status_monitor_workflow,
            input=JobStatus(job_id=job_id, is_healthy=True),
            instance_id=job_id,
        )
        print(f"Workflow started. Instance ID: {instance_id}", flush=True)
    else:
        print(f"Workflow already running. Instance ID: {job_id}", flush=True)
    if STOP_AFTER_CHECKS:
        deadline = time.monotonic() + 60
        while checks_made < STOP_AFTER_CHECKS and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)  # the last check's report and print
    else:
        input("Press Enter to stop...\n")
    wfr.shutdown()
