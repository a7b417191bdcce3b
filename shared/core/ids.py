"""Deterministic ids, so that a decision computed twice produces the same writes."""

import uuid

_NAMESPACE = uuid.UUID("6f1c2a52-3c8e-4d8e-9a53-0c2c6f7a1b10")


def task_id(workflow_id: str, ref_name: str, iteration: int, retry_count: int) -> str:
    """A task execution's id: one per (workflow, reference, loop iteration, attempt)."""
    return str(uuid.uuid5(_NAMESPACE, f"{workflow_id}/{ref_name}/{iteration}/{retry_count}"))


def timer_id(task_or_workflow_id: str, purpose: str) -> str:
    return f"{task_or_workflow_id}:{purpose}"


def dispatch_message_id(task_id_: str, dispatch_count: int) -> str:
    return f"dispatch:{task_id_}:{dispatch_count}"


def failure_workflow_id(failed_workflow_id: str) -> str:
    """The failureWorkflow execution of a failed workflow: fixed, so a redelivered decision
    starts it once."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"cairn:failure-workflow:{failed_workflow_id}"))
