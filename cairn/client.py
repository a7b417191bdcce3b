"""The client: start workflows, signal WAIT tasks and terminate executions by publishing events."""

from __future__ import annotations

import uuid
from typing import Any

from shared import telemetry
from shared.messaging import outgoing
from shared.models.messages import Signal, StartWorkflow, TerminateWorkflow
from shared.models.runtime import TaskStatus
from shared.ports.bus import Bus
from shared.topics import Topics


class CairnClient:
    def __init__(self, bus: Bus, topics: Topics) -> None:
        self.bus = bus
        self.topics = topics

    async def start_workflow(
        self,
        name: str,
        input: dict[str, Any] | None = None,
        *,
        workflow_id: str | None = None,
        version: int | None = None,
        correlation_id: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> str:
        """Publish a start event and return the workflow id (generated when not given).

        The id is fixed before publishing, so a retried publish starts the workflow once."""
        workflow_id = workflow_id or str(uuid.uuid4())
        message = StartWorkflow(
            id=f"start:{workflow_id}",
            workflow_id=workflow_id,
            name=name,
            version=version,
            input=input or {},
            correlation_id=correlation_id,
        )
        await self.bus.publish(
            [outgoing(self.topics.workflow_start, message, workflow_id, telemetry.inject(headers))]
        )
        return workflow_id

    async def signal(
        self,
        workflow_id: str,
        task_ref_name: str,
        output: dict[str, Any] | None = None,
        status: TaskStatus = TaskStatus.COMPLETED,
        signal_id: str | None = None,
    ) -> None:
        message = Signal(
            id=signal_id or f"signal:{uuid.uuid4()}",
            workflow_id=workflow_id,
            task_ref_name=task_ref_name,
            status=status,
            output=output or {},
        )
        await self.bus.publish(
            [outgoing(self.topics.workflow_signal, message, workflow_id, telemetry.inject())]
        )

    async def terminate(
        self, workflow_id: str, reason: str | None = None, trigger_failure_workflow: bool = False
    ) -> None:
        message = TerminateWorkflow(
            id=f"terminate:{uuid.uuid4()}",
            workflow_id=workflow_id,
            reason=reason,
            trigger_failure_workflow=trigger_failure_workflow,
        )
        await self.bus.publish(
            [outgoing(self.topics.workflow_command, message, workflow_id, telemetry.inject())]
        )
