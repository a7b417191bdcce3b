"""Drive an orchestrator through the pure code engine, without I/O: the SDK's replay answers each
turn, activities run inline, timers fire when asked, external events are raised in between. The
same loop a runtime and the decider make over a bus, folded into one thread for unit tests."""

from __future__ import annotations

from typing import Any

from cairn.workflow._context import WorkflowActivityContext, call_user
from cairn.workflow._executor import execute_turn
from cairn.workflow._registry import Registry
from cairn.workflow._replay import failure_of
from cairn.workflow._serialization import decode, encode
from shared.core.tasktypes.wait import TIMER_WAIT
from shared.models.messages import RaiseEvent, TimerFired
from shared.models.runtime import TaskStatus
from tests.unit.code_harness import CodeHarness


class Driver:
    def __init__(
        self,
        registry: Registry,
        name: str,
        input_: Any = None,
        wf_id: str = "code-1",
        *,
        strict: bool = False,
    ) -> None:
        self.registry = registry
        self.strict = strict
        self.h = CodeHarness(name=name, input_=encode(input_), wf_id=wf_id)
        self.activity_calls: list[tuple[str, Any]] = []
        self.responses: list[dict[str, Any]] = []

    def run(self, *, fire_timers: bool = True, max_steps: int = 200) -> None:
        """Until the workflow ends or waits for the outside world."""
        for _ in range(max_steps):
            if self.h.state.status.is_terminal:
                return
            turn = self.h.state.tasks.get("orchestrator")
            if turn is not None and not turn.status.is_terminal:
                response = execute_turn(self.registry, self.h.turn(), strict=self.strict)
                self.responses.append(response)
                self.h.send(self.h.result(turn, TaskStatus.COMPLETED, response))
                continue
            activity = next(
                (t for t in self.h.state.tasks.values() if t.kind == "SIMPLE" and not t.status.is_terminal),
                None,
            )
            if activity is not None:
                self._run_activity(activity)
                continue
            timers = sorted(
                (t for t in self.h.state.timers.values() if t.purpose == TIMER_WAIT), key=lambda t: t.fire_at
            )
            if fire_timers and timers:
                timer = timers[0]
                self.h.now = max(self.h.now, timer.fire_at)
                self.h.send(
                    TimerFired(
                        id=self.h.next_id(), workflow_id=self.h.state.workflow_id, timer_id=timer.timer_id
                    )
                )
                continue
            return
        raise AssertionError("the workflow did not settle")

    def _run_activity(self, task: Any) -> None:
        fn = self.registry.activities[task.task_def_name]
        value = decode(task.input_data.get("input"))
        self.activity_calls.append((task.task_def_name, value))
        ctx = WorkflowActivityContext(
            self.h.state.workflow_id, int(task.reference_task_name.rsplit("_", 1)[1]), task.task_id
        )
        try:
            result = call_user(fn, ctx, value)
        except Exception as error:
            failure = failure_of(error)
            self.h.send(
                self.h.result(task, TaskStatus.FAILED, {"errorType": failure.error_type}).model_copy(
                    update={"reason_for_incompletion": failure.message}
                )
            )
            return
        self.h.send(self.h.result(task, TaskStatus.COMPLETED, {"result": encode(result)}))

    def raise_event(self, name: str, value: Any = None) -> None:
        self.h.send(
            RaiseEvent(
                id=self.h.next_id(), workflow_id=self.h.state.workflow_id, name=name, input=encode(value)
            )
        )

    @property
    def result(self) -> Any:
        return decode(self.h.state.output.get("result"))
