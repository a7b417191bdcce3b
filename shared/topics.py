"""Topic names: one place, so services, docs and tests agree. Prefix from CAIRN_TOPIC_PREFIX."""

from __future__ import annotations

from dataclasses import dataclass

from shared.models.history import ORCHESTRATIONS
from shared.models.messages import (
    DecideRequest,
    OutboxMessage,
    RaiseEvent,
    RetryWorkflow,
    StartWorkflow,
    SubWorkflowEnded,
    SubWorkflowReopened,
    TaskMessage,
    TerminateWorkflow,
    TimerRequest,
    WorkflowEvent,
)


@dataclass(frozen=True)
class Topics:
    prefix: str = "cairn."

    @property
    def workflow_start(self) -> str:
        return f"{self.prefix}workflow.start"

    @property
    def workflow_signal(self) -> str:
        return f"{self.prefix}workflow.signal"

    @property
    def workflow_command(self) -> str:
        return f"{self.prefix}workflow.command"

    @property
    def workflow_events(self) -> str:
        return f"{self.prefix}workflow.events"

    @property
    def task_result(self) -> str:
        return f"{self.prefix}task.result"

    @property
    def task_dispatch(self) -> str:
        return f"{self.prefix}task.dispatch"

    @property
    def timer_request(self) -> str:
        return f"{self.prefix}timer.request"

    @property
    def timer_fired(self) -> str:
        return f"{self.prefix}timer.fired"

    @property
    def decide_request(self) -> str:
        return f"{self.prefix}decide.request"

    @property
    def dead_letter(self) -> str:
        return f"{self.prefix}deadletter"

    def group(self, name: str) -> str:
        """A consumer group name under the same prefix, so two Cairn deployments (or test runs)
        sharing a Kafka cluster never share a group."""
        return f"{self.prefix}{name}"

    def workers(self, task_type: str) -> str:
        """The consumer group of a task type's workers, bus and HTTP alike."""
        return self.group(f"workers.{task_type}")

    def tasks(self, task_type: str) -> str:
        """The topic workers of one task type consume. An app's orchestrator turns (task type
        `orchestrations.<app>`, docs/code-workflows.md) have `<prefix>orchestrations.<app>`."""
        if task_type.startswith(ORCHESTRATIONS):
            return f"{self.prefix}{task_type}"
        return f"{self.prefix}tasks.{task_type}"

    @property
    def decider_inbound(self) -> list[str]:
        return [
            self.workflow_start,
            self.workflow_signal,
            self.workflow_command,
            self.task_result,
            self.timer_fired,
            self.decide_request,
        ]

    @property
    def fixed(self) -> list[str]:
        """Every topic whose name does not depend on a task type."""
        return [
            *self.decider_inbound,
            self.workflow_events,
            self.task_dispatch,
            self.timer_request,
            self.dead_letter,
        ]

    def for_outbox(self, message: OutboxMessage) -> str:
        match message:
            case TaskMessage():
                # Straight to the workers' topic: the scheduler only forwarded it unchanged (no
                # rate or concurrency limits are supported), one append, fetch and offset commit
                # per step for nothing. It still forwards what older deciders put on task.dispatch.
                return self.tasks(message.task_type)
            case TimerRequest():
                return self.timer_request
            case WorkflowEvent():
                return self.workflow_events
            case StartWorkflow():
                return self.workflow_start
            case TerminateWorkflow() | RetryWorkflow():
                return self.workflow_command
            case SubWorkflowEnded() | SubWorkflowReopened():
                # one topic and key (the parent's): a child's reopening and its next end arrive
                # in the order the child made them
                return self.task_result
            case DecideRequest():
                return self.decide_request
            case RaiseEvent():
                return self.workflow_signal
