"""What the decider sends and refuses: outbox messages as bus messages (keyed so each reaches
the partition of the workflow it concerns), and the payload limits a message must keep."""

from __future__ import annotations

from collections.abc import Mapping

from shared.messaging import PoisonMessageError, outgoing
from shared.models.documents import WorkflowDocument
from shared.models.limits import PayloadLimits, definition_limits, describe, payload_problems
from shared.models.messages import (
    KEYED_BY_TARGET,
    DeciderInbound,
    OutboxMessage,
    RaiseEvent,
    Signal,
    StartWorkflow,
    UpdateVariables,
)
from shared.ports.bus import Outgoing
from shared.topics import Topics


def messages_of(
    topics: Topics,
    document: WorkflowDocument,
    outbox: list[OutboxMessage],
    headers: Mapping[str, str],
) -> list[Outgoing]:
    """A document's outbox as bus messages, each on its topic and under its key."""
    return [
        outgoing(topics.for_outbox(message), message, outbox_key(message, document), headers)
        for message in outbox
    ]


def refuse_past_limits(message: DeciderInbound, limits: PayloadLimits) -> None:
    """A start's input or a signal's output past the payload limits is a poison message: it is
    dead-lettered with the reason before anything of it is stored (the api refuses the same with a
    400). A worker's result past them is not refused here: it fails its task (shared/core/events)."""
    match message:
        case StartWorkflow():
            problems = payload_problems(message.input, "input", limits)
            if message.workflow_def is not None:
                problems += payload_problems(message.workflow_def, "workflowDef", definition_limits(limits))
        case Signal():
            problems = payload_problems(message.output, "output", limits)
        case RaiseEvent():
            problems = payload_problems({"input": message.input}, "event", limits)
        case UpdateVariables():
            problems = payload_problems(message.variables, "variables", limits)
        case _:
            return
    if problems:
        raise PoisonMessageError(f"{message.type} past the limits: {describe(problems)}")


def outbox_key(message: OutboxMessage, document: WorkflowDocument) -> str:
    """Outbox messages are keyed by the workflow they concern: a start, a terminate or a child's
    end by the execution it is for (so it reaches that workflow's decider partition), the rest
    by this one."""
    if isinstance(message, KEYED_BY_TARGET):
        return message.workflow_id  # type: ignore[union-attr]  # every KEYED_BY_TARGET kind has one
    return document.workflow_id
