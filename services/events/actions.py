"""An event handler's actions as the messages Cairn's other services take (Conductor's
SimpleActionProcessor): a start, a task result, a terminate, a variables update.

Every message id derives from (handler, event message id, action index), so a redelivered event
acts once: a start under the same workflow id starts one execution (the create is exclusive),
and the decider takes each other command once (its inbox). `${...}` in an action is evaluated
over the event's payload with Conductor's parameter expressions (shared/core/expressions.py):
`${orderId}`, `${$.items[0].sku}`; a whole-value expression keeps its type.
"""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import dataclass
from typing import Any

from shared.core.expressions import evaluate
from shared.core.refs import node_ref
from shared.messaging import outgoing
from shared.models.events import Action, EventHandler, TaskAction
from shared.models.messages import StartWorkflow, TaskResult, TerminateWorkflow, UpdateVariables
from shared.models.runtime import TaskStatus
from shared.ports.bus import Outgoing
from shared.ports.store import Store
from shared.topics import Topics

log = logging.getLogger(__name__)
_NAMESPACE = uuid.UUID("9b2f6c1e-4a7d-4e55-8f0b-5c3d2e1a7b90")


@dataclass(frozen=True)
class Event:
    """One message of a source, as the handlers see it."""

    message_id: str
    source: str
    """The handler's `event` (`kafka:orders`), Conductor's `conductor.event.name`."""
    payload: dict[str, Any]


def expand_inline_json(value: Any) -> Any:
    """Conductor's expandInlineJSON: string values holding a JSON object or list become it."""
    if isinstance(value, dict):
        return {k: expand_inline_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [expand_inline_json(v) for v in value]
    if isinstance(value, str) and value[:1] in ("{", "["):
        try:
            return expand_inline_json(json.loads(value))
        except ValueError:
            return value
    return value


def _named(value: Any, message_id: str) -> str | None:
    """The workflow an action names; None (logged: nothing to act on) when its expression found
    nothing in the payload."""
    if value is None or value == "":
        log.warning("event action %s names no workflow: nothing to act on", message_id)
        return None
    return str(value)


class ActionRunner:
    def __init__(self, store: Store, topics: Topics) -> None:
        self.store = store
        self.topics = topics

    async def messages(
        self, handler: EventHandler, index: int, action: Action, event: Event
    ) -> list[Outgoing]:
        """What one action publishes (nothing when it names a task or workflow that is not there:
        logged, as Conductor records such an execution's error and goes on)."""
        payload = expand_inline_json(event.payload) if action.expand_inline_json else event.payload
        message_id = f"event:{handler.name}:{event.message_id}:{index}"
        marks = {"conductor.event.messageId": event.message_id, "conductor.event.name": event.source}
        match action.action:
            case "start_workflow":
                start = action.start_workflow
                assert start is not None
                workflow_id = str(uuid.uuid5(_NAMESPACE, message_id))
                correlation = evaluate(start.correlation_id, payload) if start.correlation_id else None
                message = StartWorkflow(
                    id=message_id,
                    workflow_id=workflow_id,
                    name=start.name,
                    version=start.version,
                    input={**evaluate(start.input, payload), **marks},
                    correlation_id=None if correlation is None else str(correlation),
                )
                return [outgoing(self.topics.workflow_start, message, workflow_id, {})]
            case "complete_task" | "fail_task":
                task = action.complete_task if action.action == "complete_task" else action.fail_task
                assert task is not None
                status = TaskStatus.COMPLETED if action.action == "complete_task" else TaskStatus.FAILED
                return await self._task_result(task, status, payload, message_id, marks)
            case "terminate_workflow":
                terminate = action.terminate_workflow
                assert terminate is not None
                named = _named(evaluate(terminate.workflow_id, payload), message_id)
                if named is None:
                    return []
                workflow_id = named
                reason = (
                    evaluate(terminate.termination_reason, payload) if terminate.termination_reason else None
                )
                stop = TerminateWorkflow(
                    id=message_id, workflow_id=workflow_id, reason=None if reason is None else str(reason)
                )
                return [outgoing(self.topics.workflow_command, stop, workflow_id, {})]
            case "update_workflow_variables":
                update = action.update_workflow_variables
                assert update is not None
                target = _named(evaluate(update.workflow_id, payload), message_id)
                if target is None:
                    return []
                workflow_id = target
                variables = evaluate(update.variables, payload)
                change = UpdateVariables(
                    id=message_id,
                    workflow_id=workflow_id,
                    variables=variables,
                    append_array=update.append_array,
                )
                return [outgoing(self.topics.workflow_command, change, workflow_id, {})]

    async def _task_result(
        self,
        task: TaskAction,
        status: TaskStatus,
        payload: dict[str, Any],
        message_id: str,
        marks: dict[str, str],
    ) -> list[Outgoing]:
        ids = evaluate(
            {"workflowId": task.workflow_id, "taskId": task.task_id, "taskRefName": task.task_ref_name},
            payload,
        )
        workflow_id, task_id, ref = ids["workflowId"], ids["taskId"], ids["taskRefName"]
        if task_id and not workflow_id:
            workflow_id = await self.store.find_task_workflow(str(task_id))
        if not task_id and workflow_id and ref:
            heads = (await self.store.load_heads([str(workflow_id)])).get(str(workflow_id))
            head = heads.executions.get(node_ref(str(ref))) if heads else None
            task_id = head.task_id if head is not None else None
        if not workflow_id or not task_id:
            log.warning("event action %s: no task %s", message_id, {k: v for k, v in ids.items() if v})
            return []
        reason = evaluate(task.reason_for_incompletion, payload) if task.reason_for_incompletion else None
        output = {
            **{k: v for k, v in ids.items() if v is not None},
            **evaluate(task.output, payload),
            **marks,
        }
        result = TaskResult(
            id=message_id,
            workflow_instance_id=str(workflow_id),
            task_id=str(task_id),
            status=status,
            output_data=output,
            reason_for_incompletion=None if reason is None else str(reason),
        )
        return [outgoing(self.topics.task_result, result, str(workflow_id), {})]
