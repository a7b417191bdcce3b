"""HTTP and EVENT: system tasks that do I/O, so they run in Cairn's system-task worker
(services/system_worker), which consumes their task topics like any worker: the same
dispatch, retries per TaskDef, response timeouts and heartbeats as a SIMPLE task.

Registration checks what could never run: an HTTP task needs `http_request` (or `uri` and
`method`) in its input; an EVENT task needs a `sink`: Cairn publishes to `kafka:<topic>` sinks
(Kafka on a deployment, the embedded bus in `cairn dev`) and to Conductor's internal `conductor`
queues, which event handlers consume (services/events).
"""

from __future__ import annotations

import re

from shared.core.refs import Scope
from shared.core.tasktypes.base import Engine, Problems
from shared.core.tasktypes.simple import WorkerTask
from shared.models.definitions import WorkflowTask
from shared.models.runtime import TaskState

KAFKA_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")


class HttpTask(WorkerTask):
    name = "HTTP"

    def problems(self, node: WorkflowTask, path: str) -> Problems:
        given = node.input_parameters
        request = given.get("http_request")
        if request is None and not ("uri" in given and "method" in given):
            return [
                (
                    f"{path}.inputParameters.http_request",
                    "required: {uri, method, ...} of the request to make",
                )
            ]
        if isinstance(request, dict):
            missing = [key for key in ("uri", "method") if key not in request]
            return [(f"{path}.inputParameters.http_request.{key}", "required") for key in missing]
        return []


CONDUCTOR_SINK = re.compile(r"^conductor(?::([A-Za-z0-9_.-]{1,200}))?$")
"""`conductor` or `conductor:<queue>`: Conductor's internal queue, which event handlers listen on."""


def sink_problem(sink: str) -> str | None:
    if "${" in sink:
        return None
    if sink.startswith("conductor"):
        if CONDUCTOR_SINK.match(sink):
            return None
        return (
            f"sink {sink!r}: a conductor sink is `conductor` or `conductor:<queue>`"
            " (queue: letters, digits, '.', '_', '-')"
        )
    if not sink.startswith("kafka:"):
        return f"sink {sink!r} is not supported by Cairn: use kafka:<topic>, conductor or conductor:<queue>"
    if not KAFKA_TOPIC.match(sink.removeprefix("kafka:")):
        return f"sink {sink!r}: a Kafka topic name is letters, digits, '.', '_' and '-' (at most 249)"
    return None


class EventTask(WorkerTask):
    name = "EVENT"

    def start(self, engine: Engine, node: WorkflowTask, task: TaskState, scope: Scope) -> None:
        """Conductor copies `sink` (resolved) and `asyncComplete` into the input; a `conductor`
        sink names its queue `conductor:<workflowName>:<taskReferenceName>` (`conductor:<queue>`:
        `conductor:<workflowName>:<queue>`), as Conductor's Event task does."""
        sink = engine.evaluate({"sink": node.sink or ""})["sink"]
        queue = CONDUCTOR_SINK.match(sink) if isinstance(sink, str) else None
        if queue is not None:
            sink = f"conductor:{engine.state.workflow_name}:{queue.group(1) or node.task_reference_name}"
        task.input_data = {**task.input_data, "sink": sink, "asyncComplete": node.async_complete}
        super().start(engine, node, task, scope)

    def problems(self, node: WorkflowTask, path: str) -> Problems:
        if not node.sink:
            return [(f"{path}.sink", "required: where to publish, kafka:<topic> or conductor")]
        problem = sink_problem(node.sink)
        return [(f"{path}.sink", problem)] if problem else []
