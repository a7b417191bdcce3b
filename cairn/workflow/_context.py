"""DaprWorkflowContext and WorkflowActivityContext: what an orchestrator and an activity get.

The orchestrator's context turns each call into a pending action of the replay in progress
(cairn/workflow/_replay.py) and returns the task that completes when the history says so. It must
be deterministic: `current_utc_datetime` is the turn's recorded time, not the wall clock.
"""

from __future__ import annotations

import inspect
import json
import logging
import typing
import uuid
import warnings
from collections import deque
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from cairn.workflow._serialization import encode
from cairn.workflow._tasks import CompletableTask, RetryableTask, Task
from cairn.workflow.retry_policy import RetryPolicy
from shared.models.history import CreateSubOrchestration, ScheduleTask

if TYPE_CHECKING:
    from cairn.workflow._replay import Replay

log = logging.getLogger("cairn.workflow")
GUID_NAMESPACE = uuid.UUID("9e952958-5e33-4daf-827f-2fa12937b875")


class _ReplaySafe(logging.LoggerAdapter[logging.Logger]):
    def __init__(self, logger: logging.Logger, replay: Any) -> None:
        super().__init__(logger, {})
        self._replay = replay

    def isEnabledFor(self, level: int) -> bool:
        return not self._replay.is_replaying and super().isEnabledFor(level)


def name_of(target: Any) -> str:
    """A workflow or activity given by function (its registered name) or by name."""
    if isinstance(target, str):
        return target
    return getattr(target, "_dapr_alternate_name", None) or target.__name__


def call_user(fn: Any, ctx: Any, value: Any) -> Any:
    """Dapr's calling convention: `fn(ctx, input)` when the function takes two parameters (the
    input coerced to a pydantic model when the parameter is annotated with one), else `fn(ctx)`."""
    parameters = list(inspect.signature(fn).parameters.values())
    if len(parameters) < 2:
        return fn(ctx)
    model = _model_type(fn, parameters[1].name)
    if model is not None and isinstance(value, dict):
        value = model.model_validate(value)
    elif model is not None and hasattr(value, "__dict__") and not isinstance(value, model):
        value = model.model_validate(vars(value))
    return fn(ctx, value)


def _model_type(fn: Any, parameter: str) -> Any:
    try:
        annotation = typing.get_type_hints(fn).get(parameter)
    except Exception:  # unresolvable annotations: take the input as it is
        return None
    candidates = typing.get_args(annotation) or (annotation,)
    for candidate in candidates:
        if hasattr(candidate, "model_validate") and hasattr(candidate, "model_dump"):
            return candidate
    return None


class DaprWorkflowContext:
    """What an orchestrator function receives (Dapr's DaprWorkflowContext)."""

    def __init__(self, replay: Replay) -> None:
        self._replay = replay

    @property
    def instance_id(self) -> str:
        return self._replay.instance_id

    @property
    def current_utc_datetime(self) -> datetime:
        """The turn's time, as recorded in the history (naive UTC): the same on every replay."""
        return self._replay.now

    @property
    def is_replaying(self) -> bool:
        return self._replay.is_replaying

    def new_guid(self) -> str:
        """A UUID the same on every replay: derived from the instance, the turn's time and how
        many this run has asked for (durabletask's deterministic UUIDv5)."""
        replay = self._replay
        replay.guids += 1
        name = f"{replay.instance_id}_{replay.now.isoformat()}_{replay.guids}"
        return str(uuid.uuid5(GUID_NAMESPACE, name))

    uuid4 = new_guid

    @property
    def logger(self) -> logging.LoggerAdapter[logging.Logger]:
        """A logger that says nothing while the function replays (Cairn): each line once."""
        return _ReplaySafe(log, self._replay)

    def set_custom_status(self, custom_status: str) -> None:
        if not isinstance(custom_status, str):
            warnings.warn("set_custom_status takes a string", DeprecationWarning, stacklevel=2)
            custom_status = json.dumps(encode(custom_status))
        self._replay.custom_status = custom_status

    def create_timer(self, fire_at: datetime | timedelta) -> Task:
        if isinstance(fire_at, timedelta):
            moment = self._replay.now + fire_at
        elif fire_at.tzinfo is not None:
            moment = fire_at.astimezone(UTC).replace(tzinfo=None)
        else:
            moment = fire_at
        return self._replay.timer(moment)

    def call_activity(
        self,
        activity: Any,
        *,
        input: Any = None,
        retry_policy: RetryPolicy | None = None,
        app_id: str | None = None,
    ) -> Task:
        """Run an activity (by function or name). `app_id` is accepted for Dapr's sake: an
        activity runs wherever its workers are (its topic is its name)."""
        replay = self._replay
        action = ScheduleTask(id=replay.next_id(), name=name_of(activity), input=encode(input))
        return replay.schedule(action, self._task_for(action, retry_policy))

    def call_child_workflow(
        self,
        workflow: Any,
        *,
        input: Any = None,
        instance_id: str | None = None,
        retry_policy: RetryPolicy | None = None,
        app_id: str | None = None,
    ) -> Task:
        replay = self._replay
        action_id = replay.next_id()
        action = CreateSubOrchestration(
            id=action_id,
            name=name_of(workflow),
            instance_id=instance_id or f"{replay.instance_id}:{action_id:04x}",
            input=encode(input),
            app=app_id,
        )
        return replay.schedule(action, self._task_for(action, retry_policy))

    def _task_for(self, action: Any, retry_policy: RetryPolicy | None) -> CompletableTask:
        if retry_policy is None:
            return CompletableTask()
        return RetryableTask(action, retry_policy, self._replay.now)

    def wait_for_external_event(self, name: str, *, timeout: datetime | timedelta | None = None) -> Task:
        """The next event of this name (names are case-insensitive; an event raised before the
        wait was kept for it). With `timeout`, the task fails with TimeoutError when a durable
        timer fires first."""
        replay = self._replay
        key = name.casefold()
        task = CompletableTask()
        buffered = replay.received.get(key)
        if buffered:
            task.complete(buffered.popleft())
            return task
        waiters = replay.waiters.setdefault(key, deque())
        waiters.append(task)
        if timeout is None:
            return task
        if isinstance(timeout, timedelta) and timeout <= timedelta(0):
            waiters.remove(task)
            task.fail(
                TimeoutError(f"Wait for external event '{name}' canceled immediately due to zero timeout")
            )
            return task

        def timed_out() -> None:
            if not task.is_complete:
                waiters.remove(task)
                task.fail(TimeoutError(f"Timed out after {timeout!r} waiting for external event {name!r}"))
            replay.resume()

        moment = replay.now + timeout if isinstance(timeout, timedelta) else timeout
        replay.timer(moment, on_fired=timed_out)
        return task

    def continue_as_new(self, new_input: Any, *, save_events: bool = False) -> None:
        """Start this instance over with `new_input` and an empty history once this turn ends;
        with `save_events`, events received but not yet waited for come along."""
        self._replay.continue_as_new(new_input, save_events)

    def is_patched(self, patch_name: str) -> bool:
        """True where the instance runs the patched code: a new instance, or one that took the
        patch before; False for an instance replaying history made before the patch."""
        return self._replay.is_patched(patch_name)


class WorkflowActivityContext:
    """What an activity receives: the workflow instance and the activity's sequence number."""

    def __init__(self, workflow_id: str, task_id: int, task_execution_id: str) -> None:
        self._workflow_id, self._task_id, self._execution_id = workflow_id, task_id, task_execution_id

    @property
    def workflow_id(self) -> str:
        return self._workflow_id

    @property
    def task_id(self) -> int:
        return self._task_id

    @property
    def task_execution_id(self) -> str:
        """The Cairn task execution's id: the same for every delivery of one attempt."""
        return self._execution_id
