"""Deterministic ids, so that a decision computed twice produces the same writes."""

import uuid

_NAMESPACE = uuid.UUID("6f1c2a52-3c8e-4d8e-9a53-0c2c6f7a1b10")


def task_id(workflow_id: str, epoch: int, execution_ref: str, retry_count: int) -> str:
    """A task execution's id: one per (workflow, execution epoch, execution reference — which
    carries the loop iterations —, attempt). Restart and rerun bump the epoch, so a new run's
    executions never collide with the old run's records."""
    return str(uuid.uuid5(_NAMESPACE, f"{workflow_id}/{epoch}/{execution_ref}/{retry_count}"))


def child_workflow_id(parent_task_id: str) -> str:
    """The execution a SUB_WORKFLOW task starts: fixed by the task execution, so a redelivered
    decision starts it once, and a retry of the task (a new execution) starts a new child."""
    return str(uuid.uuid5(_NAMESPACE, f"child/{parent_task_id}"))


def started_workflow_id(task_id_: str) -> str:
    """The execution a START_WORKFLOW task starts (fire and forget), idempotent in the same way."""
    return str(uuid.uuid5(_NAMESPACE, f"started/{task_id_}"))


def timer_id(task_or_workflow_id: str, purpose: str) -> str:
    return f"{task_or_workflow_id}:{purpose}"


def dispatch_message_id(task_id_: str, dispatch_count: int) -> str:
    return f"dispatch:{task_id_}:{dispatch_count}"


def failure_workflow_id(failed_workflow_id: str, epoch: int = 0) -> str:
    """The failureWorkflow execution of a failed run of a workflow: fixed, so a redelivered
    decision starts it once; a run after a restart, rerun or retry (a new epoch) that fails
    again starts its own."""
    run = f":{epoch}" if epoch else ""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"cairn:failure-workflow:{failed_workflow_id}{run}"))
