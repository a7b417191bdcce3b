"""One turn of an orchestrator: re-run the function from the start against its history, answer
every call the history already recorded, and collect the actions the function asks for next.

The function runs from the first event; each call it makes takes the next sequence number and
becomes a pending action. A history event that records an action (TaskScheduled, TimerCreated,
SubOrchestrationInstanceCreated) must meet the pending action of its number, of the same kind
and name — otherwise the code has drifted from the history (NonDeterminismError). An event that
ends something (TaskCompleted, TimerFired, EventRaised, ...) completes the task waiting for it and
the function goes on from its `yield`. What is still pending at the end of the new events is
what the turn asks for. Durabletask's executor is the model (docs/research/dapr-workflow.md §2);
this one is Cairn's own.
"""

from __future__ import annotations

import inspect
import traceback
from collections import deque
from collections.abc import Callable, Coroutine, Generator
from datetime import UTC, datetime, timedelta
from typing import Any

from cairn.workflow._registry import Registry
from cairn.workflow._serialization import decode, encode
from cairn.workflow._tasks import (
    CompletableTask,
    FailureDetails,
    NonDeterminismError,
    RetryableTask,
    Task,
    TaskFailedError,
    TimerTask,
    WorkflowStateError,
)
from shared.models.history import (
    CompleteOrchestration,
    CreateSubOrchestration,
    CreateTimer,
    EventRaised,
    ExecutionResumed,
    ExecutionStarted,
    ExecutionSuspended,
    ExecutionTerminated,
    HistoryEvent,
    OrchestratorAction,
    OrchestratorStarted,
    ScheduleTask,
    SubOrchestrationInstanceCompleted,
    SubOrchestrationInstanceCreated,
    SubOrchestrationInstanceFailed,
    TaskCompleted,
    TaskFailed,
    TaskScheduled,
    TimerCreated,
    TimerFired,
)
from shared.models.history import FailureDetails as FailureModel

EPOCH = datetime(1970, 1, 1)
BEFORE_ANY_TURN = datetime(1000, 1, 1)
"""`current_utc_datetime` before the first OrchestratorStarted (Dapr's value)."""

_CALLS = {
    ScheduleTask: "call_activity",
    CreateTimer: "create_timer",
    CreateSubOrchestration: "call_sub_orchestrator",
}


def to_ms(moment: datetime) -> int:
    """A naive-UTC (or aware) datetime as epoch milliseconds."""
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC).replace(tzinfo=None)
    return int((moment - EPOCH) / timedelta(milliseconds=1))


def from_ms(ms: int) -> datetime:
    return EPOCH + timedelta(milliseconds=ms)


def failure_of(error: BaseException) -> FailureModel:
    return FailureModel(
        error_type=type(error).__name__,
        message=str(error)[:10_000],
        stack_trace="".join(traceback.format_tb(error.__traceback__))[:100_000] or None,
    )


class Replay:
    """The state of one replay (a fresh one per turn; see the module docstring)."""

    def __init__(self, registry: Registry, instance_id: str) -> None:
        self.registry = registry
        self.instance_id = instance_id
        self.is_replaying = True
        self.now = BEFORE_ANY_TURN
        self._sequence = 0
        self.pending_actions: dict[int, OrchestratorAction] = {}
        self.pending_tasks: dict[int, CompletableTask] = {}
        self.waiters: dict[str, deque[CompletableTask]] = {}
        self.received: dict[str, deque[Any]] = {}
        self.suspended = False
        self.suspended_events: list[HistoryEvent] = []
        self.recorded_version: str | None = None
        self.version: str | None = None
        self.started = False
        self.history_patches: list[str] = []
        self.decided_patches: dict[str, bool] = {}
        self.encountered_patches: list[str] = []
        self.custom_status: Any = None
        self.guids = 0
        self.completion: CompleteOrchestration | None = None
        self._body: Generator[Any, Any, Any] | Coroutine[Any, Any, Any] | None = None
        self._waiting_on: Task | None = None

    # ---- what the context asks for -----------------------------------------------------------

    def next_id(self) -> int:
        self._sequence += 1
        return self._sequence

    def schedule(self, action: OrchestratorAction, task: CompletableTask) -> CompletableTask:
        self.pending_actions[action.id] = action
        self.pending_tasks[action.id] = task
        return task

    def timer(self, fire_at: datetime, on_fired: Callable[[], None] | None = None) -> TimerTask:
        action = CreateTimer(id=self.next_id(), fire_at=to_ms(fire_at))
        task = TimerTask(on_fired)
        self.schedule(action, task)
        return task

    def is_patched(self, name: str) -> bool:
        """Dapr's order: decided already in this run; taken in an earlier turn; False while
        replaying; True when live. Each True is reported (the engine's prefix check)."""
        if name in self.decided_patches:
            patched = self.decided_patches[name]
        elif name in self.history_patches:
            patched = True
        else:
            patched = not self.is_replaying
        self.decided_patches[name] = patched
        if patched:
            self.encountered_patches.append(name)
        return patched

    # ---- running the function ------------------------------------------------------------------

    def start(self, event: ExecutionStarted) -> None:
        fn, self.version = self.registry.orchestrator(event.name, self.recorded_version)
        from cairn.workflow._context import DaprWorkflowContext, call_user

        self.started = True
        result = call_user(fn, DaprWorkflowContext(self), decode(event.input))
        if inspect.isgenerator(result) or inspect.iscoroutine(result):
            self._body = result
            self._step(None, None)
        else:
            self.set_complete(result)

    def resume(self) -> None:
        """Go on while the task the function waits for is done."""
        while self.completion is None and self._waiting_on is not None and self._waiting_on.is_complete:
            task = self._waiting_on
            error = task.get_exception()
            self._step(None if error else task.get_result(), error)

    def _step(self, value: Any, error: BaseException | None) -> None:
        assert self._body is not None
        try:
            waited = self._body.throw(error) if error is not None else self._body.send(value)
        except StopIteration as stop:
            self.set_complete(stop.value)
            return
        except Exception as failure:  # the function raised: the workflow fails with it
            self.set_failed(failure)
            return
        if not isinstance(waited, Task):
            self.set_failed(TypeError("The orchestrator generator yielded a non-Task object"))
            return
        self._waiting_on = waited
        if waited.is_complete:
            self.resume()

    def set_complete(self, result: Any) -> None:
        if self.completion is None:
            self.pending_actions.clear()
            self.completion = CompleteOrchestration(
                id=self.next_id(), orchestration_status="COMPLETED", result=encode(result)
            )

    def set_failed(self, error: BaseException) -> None:
        if self.completion is None:
            self.pending_actions.clear()
            self.completion = CompleteOrchestration(
                id=self.next_id(), orchestration_status="FAILED", failure_details=failure_of(error)
            )

    def continue_as_new(self, new_input: Any, save_events: bool) -> None:
        if self.completion is not None:
            return
        self.pending_actions.clear()
        carryover: list[HistoryEvent] = []
        if save_events:
            for name, values in self.received.items():
                carryover += [EventRaised(name=name, input=encode(v) if v else None) for v in values]
        self.completion = CompleteOrchestration(
            id=self.next_id(),
            orchestration_status="CONTINUED_AS_NEW",
            result=encode(new_input),
            carryover_events=carryover,
        )

    # ---- the history ---------------------------------------------------------------------------

    def process(self, event: HistoryEvent) -> None:
        if self.suspended and not isinstance(event, ExecutionResumed | ExecutionTerminated):
            self.suspended_events.append(event)
            return
        match event:
            case OrchestratorStarted():
                self.now = from_ms(event.timestamp)
                if event.version is not None:
                    if event.version.name and not self.started and self.recorded_version is None:
                        self.recorded_version = event.version.name
                    self.history_patches.extend(event.version.patches)
            case ExecutionStarted():
                self.start(event)
            case TaskScheduled() | TimerCreated() | SubOrchestrationInstanceCreated():
                self._match_action(event)
            case TaskCompleted() | SubOrchestrationInstanceCompleted():
                task = self.pending_tasks.pop(event.task_scheduled_id, None)
                if task is not None:  # an unmatched completion is ignored, as Dapr does
                    task.complete(decode(event.result))
                    self.resume()
            case TaskFailed() | SubOrchestrationInstanceFailed():
                self._on_failed(event)
            case TimerFired():
                self._on_timer(event)
            case EventRaised():
                self._on_event(event.name.casefold(), decode(event.input))
            case ExecutionSuspended():
                self.suspended = True
            case ExecutionResumed():
                if not self.suspended:
                    raise WorkflowStateError("Don't know how to handle event of type 'executionResumed'")
                self.suspended = False
                buffered, self.suspended_events = self.suspended_events, []
                for later in buffered:
                    self.process(later)
            case ExecutionTerminated():
                pass  # the engine ends a terminated instance itself: no turn follows it
            case _:
                raise WorkflowStateError(f"Don't know how to handle event of type '{event.type}'")

    def _match_action(self, event: TaskScheduled | TimerCreated | SubOrchestrationInstanceCreated) -> None:
        history_call = {TaskScheduled: "call_activity", TimerCreated: "create_timer"}.get(
            type(event), "call_sub_orchestrator"
        )
        action = self.pending_actions.pop(event.event_id, None)
        where = f"instance {self.instance_id!r}, sequence number {event.event_id}: "
        if action is None:
            raise NonDeterminismError(
                where + f"A previous execution called {history_call} with ID={event.event_id}, but the "
                "current execution doesn't have this action with this ID. This problem occurs when either "
                "the orchestration has non-deterministic logic or if the code was changed after an "
                "instance of this orchestration already started running."
            )
        code_call = _CALLS[type(action)]
        if code_call != history_call:
            raise NonDeterminismError(
                where + "Failed to restore orchestration state due to a history mismatch: A previous "
                f"execution called {history_call} with ID={event.event_id}, but the current execution is "
                f"instead trying to call {code_call} as part of rebuilding it's history. This kind of "
                "mismatch can happen if an orchestration has non-deterministic logic or if the code was "
                "changed after an instance of this orchestration already started running."
            )
        code_name = getattr(action, "name", None)
        history_name = getattr(event, "name", None)
        if code_name != history_name:
            raise NonDeterminismError(
                where + "Failed to restore orchestration state due to a history mismatch: A previous "
                f"execution called {history_call} with name='{history_name}' and sequence number "
                f"{event.event_id}, but the current execution is instead trying to call {code_name} as "
                "part of rebuilding it's history. This kind of mismatch can happen if an orchestration "
                "has non-deterministic logic or if the code was changed after an instance of this "
                "orchestration already started running."
            )

    def _on_failed(self, event: TaskFailed | SubOrchestrationInstanceFailed) -> None:
        task = self.pending_tasks.pop(event.task_scheduled_id, None)
        if task is None:
            return
        details = event.failure_details
        if isinstance(task, RetryableTask) and details.error_type != "NonRetryableError":
            delay = task.policy.next_delay(task.attempts)
            if delay is not None:  # wait on a durable timer, then schedule it again
                task.attempts += 1
                self.timer(self.now + delay, on_fired=lambda: self._retry(task))
                return
        if isinstance(event, TaskFailed):
            message = (
                f"{self.instance_id}: Activity task #{event.task_scheduled_id} failed: {details.message}"
            )
        else:
            message = f"Sub-orchestration task #{event.task_scheduled_id} failed: {details.message}"
        task.fail(
            TaskFailedError(message, FailureDetails(details.message, details.error_type, details.stack_trace))
        )
        self.resume()

    def _retry(self, task: RetryableTask) -> None:
        action = task.action.model_copy(update={"id": self.next_id()})
        self.schedule(action, task)

    def _on_timer(self, event: TimerFired) -> None:
        task = self.pending_tasks.pop(event.timer_id, None)
        if not isinstance(task, TimerTask):
            return
        task.complete(None)
        if task.on_fired is not None:
            task.on_fired()
        else:
            self.resume()

    def _on_event(self, name: str, value: Any) -> None:
        waiting = self.waiters.get(name)
        if waiting:
            waiting.popleft().complete(value)
            self.resume()
        else:
            self.received.setdefault(name, deque()).append(value)

    def actions(self) -> list[OrchestratorAction]:
        pending: list[OrchestratorAction] = [self.pending_actions[i] for i in sorted(self.pending_actions)]
        return [self.completion] if self.completion is not None else pending
