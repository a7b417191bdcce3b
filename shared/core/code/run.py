"""CodeRun: the working copy of one decision of a code workflow.

A code workflow has no task tree: its executions are made at run time by the orchestrator's
actions — an activity is a SIMPLE execution its workers run, a timer a WAIT execution with a
durable timer, a child a SUB_WORKFLOW execution, and each turn of the orchestrator itself an
ORCHESTRATOR execution handed to the app's runtime. So the graph engine's bookkeeping serves it
unchanged (ids, dispatch, results, heartbeats, response timeouts, timers, the outbox, the end of
the workflow); what differs is that no node is looked up in a plan — each execution's node is
made from the execution itself — and that a failure is the orchestrator's to handle, not a
reason to fail the workflow.
"""

from __future__ import annotations

from typing import Any

from shared.core.run import DecisionRun, TaskDefsNeededError
from shared.models.definitions import TaskDef, WorkflowDef, WorkflowTask
from shared.models.history import ORCHESTRATOR, TURN_REF
from shared.models.runtime import TaskState, TaskStatus

LOST_ACTIVITY_RETRIES = 3
"""How often an activity whose worker went silent (TIMED_OUT on its response timeout) is handed
out again before the orchestrator is told it failed, unless its TaskDef says otherwise. An
activity that raised is the orchestrator's at once: its RetryPolicy decides (Dapr's semantics)."""

ACTIVITY_TASK_DEF = TaskDef(name="activity", retry_count=LOST_ACTIVITY_RETRIES, retry_delay_seconds=0)
"""An activity's policy when no TaskDef of its name is registered (one that is, is honoured:
responseTimeoutSeconds, timeoutSeconds, its retries of a lost activity, rate limits)."""


def code_definition(name: str, app: str) -> WorkflowDef:
    """The snapshot a code execution embeds: its name and its app. The code is the runtime's;
    there is nothing else to snapshot."""
    return WorkflowDef(
        name=name,
        description="code workflow (cairn.workflow), replayed by its app's runtime",
        owner_app=app,
        tasks=[WorkflowTask(name=name, task_reference_name=TURN_REF, type=ORCHESTRATOR)],
    )


HistoryAppend = tuple[int, int, list[dict[str, Any]]]
"""(generation, index of the first event, events): one chunk a decision appends."""


def is_code_definition(definition: WorkflowDef) -> bool:
    """A registered code workflow (what `code_definition` makes), not a JSON one."""
    return len(definition.tasks) == 1 and definition.tasks[0].type == ORCHESTRATOR


class CodeRun(DecisionRun):
    """DecisionRun whose executions carry their own nodes (see the module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.appends: list[HistoryAppend] = []
        """History chunks this decision appends (written with its commit)."""
        self.woken = False
        """Something new happened (an event, a runtime's call): a STALLED execution tries again."""

    def node_of(self, task: TaskState) -> WorkflowTask:
        ref = task.reference_task_name
        if task.kind == "SIMPLE":
            return WorkflowTask(
                name=task.task_def_name,
                task_reference_name=ref,
                task_definition=self.activity_def(task.task_def_name),
            )
        if task.kind == ORCHESTRATOR:
            turn_def = TaskDef(
                name=task.task_def_name, retry_count=0, response_timeout_seconds=self.limits.turn_timeout_s
            )
            return WorkflowTask(
                name=task.task_def_name, task_reference_name=ref, type=ORCHESTRATOR, task_definition=turn_def
            )
        return WorkflowTask(name=task.task_def_name, task_reference_name=ref, type=task.kind)

    def activity_def(self, name: str) -> TaskDef:
        """The TaskDef of an activity's name as the instance took it when it first ran it
        (registered ones are asked for, like a DYNAMIC task's), else ACTIVITY_TASK_DEF."""
        code = self.state.code
        assert code is not None
        if name not in code.task_defs:
            code.task_defs[name] = self.task_def(name)
        registered = code.task_defs[name]
        return registered if registered is not None else ACTIVITY_TASK_DEF.model_copy(update={"name": name})

    def need_task_defs(self, names: set[str]) -> None:
        """Ask for every TaskDef a turn's activities will need at once (one store round)."""
        code = self.state.code
        assert code is not None
        missing = {name for name in names if name not in code.task_defs and name not in self.task_defs}
        if missing:
            raise TaskDefsNeededError(missing)

    def parent_of(self, ref: str) -> str | None:
        return None

    def fail(self, task: TaskState, status: TaskStatus, reason: str, *, may_retry: bool = True) -> None:
        """A lost activity is handed out again (a next attempt, as its TaskDef allows); a lost turn
        is taken back (its events go out in a new turn); any other failure ends the execution
        and is reported to the orchestrator in the next turn."""
        if task.kind == ORCHESTRATOR:
            from shared.core.code.turns import take_back

            self.finish(task, status, reason)
            self.repairs.append(f"turn {task.task_id} lost ({reason}): its events go out again")
            take_back(self, task)
            self.woken = True
            return
        if task.kind == "SIMPLE" and status is TaskStatus.TIMED_OUT and may_retry:
            task_def = self.task_def_of(task)
            if task.retry_count < task_def.retry_count:
                self.finish(task, status, reason)
                task.retried = True
                self.retry(self.node_of(task), task, task_def)
                return
        self.finish(task, status, reason)
