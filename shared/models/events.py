"""Conductor's event handlers (EventHandler JSON): when a message arrives on a source, run
actions — start a workflow, complete or fail a task, terminate a workflow, update its
variables — with `${...}` over the message's payload (services/events has the service).

Sources: `kafka:<topic>` (a user's topic; on `cairn dev`, the embedded bus topic of that name),
and Conductor's internal queues `conductor:<workflowName>:<queue>` that EVENT tasks with a
`conductor` sink publish to.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field

from shared.core.tasktypes.system import KAFKA_TOPIC
from shared.models.limits import NAME_PATTERN, NAME_RULE, DefinitionName, Text
from shared.models.runtime import CamelModel

ActionName = Literal[
    "start_workflow", "complete_task", "fail_task", "terminate_workflow", "update_workflow_variables"
]
CONDUCTOR_QUEUE = re.compile(r"^conductor:([A-Za-z0-9_.-]{1,200}):([A-Za-z0-9_.-]{1,200})$")
"""`conductor:<workflowName>:<queue>`: what an EVENT task with a `conductor` sink publishes to."""


class EventModel(CamelModel):
    """Conductor's field names; fields Conductor or Orkes add that Cairn has no use for
    (description, tags, ...) are accepted and dropped."""


class StartWorkflowAction(EventModel):
    name: DefinitionName
    version: int | None = Field(default=None, ge=1)
    correlation_id: Text | None = None
    input: dict[str, Any] = Field(default_factory=dict)
    task_to_domain: dict[str, str] | None = None


class TaskAction(EventModel):
    """complete_task and fail_task: the task by `taskId`, else by `workflowId` and `taskRefName`."""

    workflow_id: Text | None = None
    task_ref_name: Text | None = None
    task_id: Text | None = None
    output: dict[str, Any] = Field(default_factory=dict)
    reason_for_incompletion: Text | None = None


class TerminateWorkflowAction(EventModel):
    workflow_id: Text
    termination_reason: Text | None = None


class UpdateVariablesAction(EventModel):
    workflow_id: Text
    variables: dict[str, Any] = Field(default_factory=dict)
    append_array: bool = False


class Action(EventModel):
    action: ActionName
    start_workflow: StartWorkflowAction | None = None
    complete_task: TaskAction | None = None
    fail_task: TaskAction | None = None
    terminate_workflow: TerminateWorkflowAction | None = None
    update_workflow_variables: UpdateVariablesAction | None = None
    expand_inline_json: bool = False

    def body(self) -> EventModel | None:
        """The member named after the action."""
        found: EventModel | None = getattr(self, self.action)
        return found


class EventHandler(EventModel):
    name: DefinitionName
    event: Text
    condition: Text | None = None
    evaluator_type: Text | None = None
    actions: list[Action] = Field(min_length=1, max_length=100)
    active: bool = False
    """Conductor's default: a handler registered without `active: true` does nothing."""


def handler_problems(handler: EventHandler) -> list[tuple[str, str]]:
    """What Cairn cannot run in a handler that parsed: (field path, why), for a 400."""
    from shared.core.scripting import check_javascript

    problems: list[tuple[str, str]] = []
    if not NAME_PATTERN.fullmatch(handler.name):
        problems.append(("name", NAME_RULE))
    if source_topic(handler.event, "") is None:
        problems.append(
            ("event", "a source Cairn consumes: kafka:<topic> or conductor:<workflowName>:<queue>")
        )
    if handler.evaluator_type not in (None, "", "javascript", "graaljs", "value-param"):
        problems.append(("evaluatorType", "javascript (the default), graaljs or value-param"))
    elif handler.condition and handler.evaluator_type != "value-param":
        problem = check_javascript(handler.condition)
        if problem:
            problems.append(("condition", problem))
    for index, action in enumerate(handler.actions):
        if action.body() is None:
            problems.append((f"actions[{index}].{action.action}", f"required for action {action.action}"))
        task = action.complete_task or action.fail_task
        if task is not None and not task.task_id and not (task.workflow_id and task.task_ref_name):
            problems.append((f"actions[{index}].{action.action}", "taskId, or workflowId and taskRefName"))
    return problems


def source_topic(event: str, prefix: str) -> str | None:
    """The topic a source is read from: a `kafka:` source's own topic (a user's, not prefixed),
    a `conductor:` queue's `<prefix>conductor.<workflowName>.<queue>`; None when Cairn cannot
    consume the source."""
    if event.startswith("kafka:"):
        topic = event.removeprefix("kafka:")
        return topic if KAFKA_TOPIC.match(topic) and topic not in (".", "..") else None
    queue = CONDUCTOR_QUEUE.match(event)
    if queue:
        return f"{prefix}conductor.{queue.group(1)}.{queue.group(2)}"
    return None
