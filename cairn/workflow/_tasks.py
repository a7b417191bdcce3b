"""The tasks an orchestrator yields (or awaits): an activity, a child, a timer, an external event,
and when_all / when_any over them. A task completes while the history is replayed or when a new
event arrives; the orchestrator goes on from the yield that waits for it.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from typing import Any


class FailureDetails:
    """Why something failed: the error type's name, its message, and its stack trace."""

    def __init__(self, message: str, error_type: str, stack_trace: str | None = None) -> None:
        self._message, self._error_type, self._stack_trace = message, error_type, stack_trace

    @property
    def message(self) -> str:
        return self._message

    @property
    def error_type(self) -> str:
        return self._error_type

    @property
    def stack_trace(self) -> str | None:
        return self._stack_trace

    def __repr__(self) -> str:
        return f"FailureDetails(error_type={self._error_type!r}, message={self._message!r})"


class TaskFailedError(Exception):
    """An activity or a child workflow failed; `details` says how."""

    def __init__(self, message: str, details: FailureDetails) -> None:
        super().__init__(message)
        self._details = details

    @property
    def details(self) -> FailureDetails:
        return self._details


class NonDeterminismError(Exception):
    """The code asked for something other than what the history recorded at that point."""


class WorkflowStateError(Exception):
    """The history holds an event the orchestrator cannot take where it is."""


class Task:
    """Something the orchestrator waits for. `yield task` (or `await task`) gives its result,
    or raises its failure."""

    def __init__(self) -> None:
        self._complete = False
        self._result: Any = None
        self._exception: BaseException | None = None
        self._parents: list[CompositeTask] = []

    @property
    def is_complete(self) -> bool:
        return self._complete

    @property
    def is_failed(self) -> bool:
        return self._exception is not None

    def get_result(self) -> Any:
        if self._exception is not None:
            raise self._exception
        return self._result

    def get_exception(self) -> BaseException | None:
        return self._exception

    def __await__(self) -> Generator[Task, Any, Any]:
        """`await task` in an `async def` orchestrator (a Cairn extension to Dapr's generators)."""
        return (yield self)

    def _finish(self) -> None:
        self._complete = True
        for parent in list(self._parents):
            parent.on_child_done(self)


class CompletableTask(Task):
    def complete(self, result: Any) -> None:
        if self._complete:
            return
        self._result = result
        self._finish()

    def fail(self, error: BaseException) -> None:
        if self._complete:
            return
        self._exception = error
        self._finish()


class RetryableTask(CompletableTask):
    """An activity or child called with a RetryPolicy: on failure the orchestrator waits out the
    policy's delay on a durable timer and schedules it again (each a new action)."""

    def __init__(self, action: Any, policy: Any, started_at: Any) -> None:
        super().__init__()
        self.action = action
        """The ScheduleTask or CreateSubOrchestration each attempt repeats (under a new id)."""
        self.policy = policy
        self.started_at = started_at
        self.attempts = 1


class TimerTask(CompletableTask):
    def __init__(self, on_fired: Callable[[], None] | None = None) -> None:
        super().__init__()
        self.on_fired = on_fired


class CompositeTask(Task):
    def __init__(self, tasks: Sequence[Task]) -> None:
        super().__init__()
        if len({id(task) for task in tasks}) != len(tasks):
            raise ValueError("the same task appears twice")
        self.children = list(tasks)
        for task in self.children:
            task._parents.append(self)
        self.done = 0
        for task in self.children:
            if task.is_complete:
                self.on_child_done(task)
        if not self.children:
            self._on_empty()

    def on_child_done(self, task: Task) -> None:
        raise NotImplementedError

    def _on_empty(self) -> None:
        self._result = []
        self._finish()


class WhenAllTask(CompositeTask):
    """Every task's result, in the order given; fails with the first failure (Dapr 1.18)."""

    def on_child_done(self, task: Task) -> None:
        if self._complete:
            return
        self.done += 1
        if task.is_failed:
            self._exception = task.get_exception()
            self._finish()
        elif self.done == len(self.children):
            self._result = [child.get_result() for child in self.children]
            self._finish()


class WhenAnyTask(CompositeTask):
    """The first task to finish (itself, succeeded or failed); the others go on."""

    def on_child_done(self, task: Task) -> None:
        if self._complete:
            return
        self._result = task
        self._finish()


def when_all(tasks: Sequence[Task]) -> WhenAllTask:
    return WhenAllTask(tasks)


def when_any(tasks: Sequence[Task]) -> WhenAnyTask:
    return WhenAnyTask(tasks)
