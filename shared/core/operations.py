"""Lifecycle operations on one execution: pause, resume, skip, restart, rerun, retry — and a
child's reopening told to its parent (docs/operations.md has what each does, for operators).

Each is a command the decider applies in one decision, fenced like any other event. An operation
that does not apply to the state (resume a RUNNING workflow, retry a COMPLETED one) changes
nothing but the record of it in `WorkflowState.operations`, which the api waits for to answer the
operator (409 with the reason). Restart, rerun and retry make a finished execution run again in a
new epoch (task ids derive from it, so the new run never meets the old one's records); a command
naming the epoch it was meant for is refused in any other, so a redelivered one acts once.
"""

from __future__ import annotations

from typing import assert_never

from shared.core.refs import execution_ref, node_ref, scope_of
from shared.core.run import DecisionRun, HistoryNeededError, LatestDefinitionNeededError
from shared.models.limits import describe, payload_problems
from shared.models.messages import (
    LifecycleCommand,
    PauseWorkflow,
    RerunWorkflow,
    RestartWorkflow,
    ResumeWorkflow,
    RetryWorkflow,
    SkipTask,
    SubWorkflowReopened,
    UpdateVariables,
)
from shared.models.runtime import (
    OPERATIONS_KEPT,
    OperationRecord,
    PendingSkip,
    TaskState,
    TaskStatus,
    WorkflowStatus,
)

Operation = LifecycleCommand | SubWorkflowReopened
"""The operator's commands (messages.LifecycleCommand) and a child's word that it runs again."""

RUN_AGAIN = frozenset(
    {TaskStatus.FAILED, TaskStatus.FAILED_WITH_TERMINAL_ERROR, TaskStatus.TIMED_OUT, TaskStatus.CANCELED}
)
"""What a retry runs again: every current execution that ended so (Conductor's retry)."""
REOPENED_IN_PLACE = frozenset({"DO_WHILE", "JOIN", "EXCLUSIVE_JOIN"})
"""Operators a retry or rerun takes up where they were instead of starting them afresh: a loop
keeps its iterations, a JOIN waits again for its branches."""
UNSKIPPABLE = frozenset({"FORK_JOIN", "FORK_JOIN_DYNAMIC"})


def apply_operation(run: DecisionRun, command: Operation) -> None:
    match command:
        case PauseWorkflow():
            _pause(run, command)
        case ResumeWorkflow():
            _resume(run, command)
        case SkipTask():
            _skip(run, command)
        case RestartWorkflow():
            _restart(run, command)
        case RerunWorkflow():
            _rerun(run, command)
        case RetryWorkflow():
            _retry(run, command)
        case UpdateVariables():
            _update_variables(run, command)
        case SubWorkflowReopened():
            _child_reopened(run, command)
        case _:
            assert_never(command)


def record_operation(
    run: DecisionRun, command: Operation, *, refusal: str | None = None, note: str | None = None
) -> None:
    """Remember the command and its outcome (the api answers the operator from it)."""
    record = OperationRecord(
        id=command.id, operation=command.type, at=run.now, applied=refusal is None, reason=refusal or note
    )
    run.state.operations = [*run.state.operations, record][-OPERATIONS_KEPT:]
    run.dirty = True
    if refusal is not None:
        run.reject(f"{command.type}_refused", f"{command.type} of {run.state.workflow_id} refused: {refusal}")


# ---- pause, resume, skip ---------------------------------------------------------------------


def _pause(run: DecisionRun, command: PauseWorkflow) -> None:
    status = run.state.status
    if status is WorkflowStatus.PAUSED:
        record_operation(run, command, note="already PAUSED")  # Conductor: no error, nothing changes
    elif status.is_terminal:
        record_operation(
            run, command, refusal=f"the workflow has ended ({status}); only a RUNNING one can be paused"
        )
    else:
        run.state.status = WorkflowStatus.PAUSED
        run.state.update_time = run.now
        record_operation(run, command)


def _resume(run: DecisionRun, command: ResumeWorkflow) -> None:
    status = run.state.status
    if status is not WorkflowStatus.PAUSED:
        record_operation(run, command, refusal=f"the workflow is {status}, not PAUSED")
        return
    run.state.status = WorkflowStatus.RUNNING
    run.state.update_time = run.now
    run.state.last_retried_time = run.now  # Conductor: the workflow's timeout counts from here
    run.release_held()
    record_operation(run, command)


def _skip(run: DecisionRun, command: SkipTask) -> None:
    state = run.state
    name = command.task_reference_name
    ref = node_ref(name)
    if state.status is not WorkflowStatus.RUNNING:
        record_operation(
            run,
            command,
            refusal=f"the workflow is {state.status}; only a RUNNING workflow's tasks are skipped",
        )
        return
    place = run.plan.place(ref)
    dynamic = state.dynamic_nodes.get(ref)
    if place is None and dynamic is None:
        record_operation(run, command, refusal=f"the workflow has no task {name!r}")
        return
    node = place.node if place is not None else dynamic.node  # type: ignore[union-attr]
    if node.type in UNSKIPPABLE:
        record_operation(
            run,
            command,
            refusal=f"{name!r} is a {node.type}: its JOIN would wait for branches that never run; "
            "skip the branches' tasks",
        )
        return
    task = state.tasks.get(ref)
    names_it = task is not None and name in (ref, task.reference_task_name)
    if task is not None and names_it and not task.status.is_terminal:
        was = task.status
        task.input_data = {**task.input_data, **command.task_input}
        task.output_data = dict(command.task_output)
        run.finish(task, TaskStatus.SKIPPED)
        run.type_of(task).on_cancel(run, node, task)  # a running child workflow is stopped
        record_operation(run, command, note=f"{task.reference_task_name} was {was}")
        return
    in_loop = place is not None and bool(place.loops)
    if task is not None and (name == task.reference_task_name or not in_loop):
        record_operation(run, command, refusal=f"task {name!r} has already ended ({task.status})")
        return
    # under the iteration's own name when one is given (`body__3`), else the next run of the node
    state.pending_skips[name] = PendingSkip(task_input=command.task_input, task_output=command.task_output)
    record_operation(run, command, note=f"{name} is skipped when it is reached")


def _update_variables(run: DecisionRun, command: UpdateVariables) -> None:
    state = run.state
    if state.status.is_terminal:
        record_operation(
            run, command, refusal=f"the workflow has ended ({state.status}); its variables are final"
        )
        return
    merged = dict(state.variables)
    for name, value in command.variables.items():
        if command.append_array and isinstance(merged.get(name), list):
            merged[name] = [*merged[name], *(value if isinstance(value, list) else [value])]
        else:
            merged[name] = value
    problems = payload_problems(merged, "variables", run.limits.payload)
    if problems:
        record_operation(
            run, command, refusal=f"the variables would be past the limits: {describe(problems)}"
        )
        return
    state.variables = merged
    record_operation(run, command, note=", ".join(sorted(command.variables)))


# ---- running a finished execution again ------------------------------------------------------


def _refusal_to_run_again(run: DecisionRun, epoch: int | None, verb: str) -> str | None:
    state = run.state
    if not state.status.is_terminal:
        return f"the workflow is {state.status}; only a finished workflow can be {verb}"
    if epoch is not None and epoch != state.epoch:
        return (
            f"the command was meant for run {epoch} of the workflow, which is at run {state.epoch} "
            f"(it was {verb} already)"
        )
    return None


def _run_again(run: DecisionRun) -> None:
    """The workflow leaves its end: RUNNING in a new epoch, its ending forgotten."""
    state = run.state
    state.epoch += 1
    state.status = WorkflowStatus.RUNNING
    state.reason_for_incompletion = None
    state.end_time = 0
    state.update_time = run.now
    state.output = {}
    state.failure_workflow_id = None
    state.timeout_alerted = False
    state.awaiting_continuation = False
    state.held = []
    state.pending_skips = {}
    run.dirty = True


def _supersede(run: DecisionRun, first: int, last: int) -> None:
    """Executions numbered first..last belong to an earlier run from now on."""
    if first > last:
        return
    merged: list[tuple[int, int]] = []
    for low, high in sorted([*run.state.superseded, (first, last)]):
        if merged and low <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], high))
        else:
            merged.append((low, high))
    run.state.superseded = merged


def _tell_parent(run: DecisionRun) -> None:
    """A child that runs again makes its parent's SUB_WORKFLOW task wait for it again."""
    state = run.state
    if state.parent_workflow_id and state.parent_workflow_task_id:
        run.publish(
            SubWorkflowReopened(
                id=f"reopened:{state.workflow_id}:{state.epoch}",
                workflow_id=state.parent_workflow_id,
                task_id=state.parent_workflow_task_id,
                sub_workflow_id=state.workflow_id,
            )
        )


def _restart(run: DecisionRun, command: RestartWorkflow) -> None:
    refusal = _refusal_to_run_again(run, command.epoch, "restarted")
    if refusal is not None:
        record_operation(run, command, refusal=refusal)
        return
    if command.use_latest_definitions:
        if run.latest is None:
            raise LatestDefinitionNeededError
        snapshot, problem = run.latest
        if snapshot is None:
            record_operation(run, command, refusal=f"the latest definition cannot run: {problem}")
            return
        run.switch_snapshot(snapshot)
    _start_over(run)
    record_operation(run, command, note=f"run {run.state.epoch}")
    _tell_parent(run)


def _start_over(run: DecisionRun) -> None:
    """Everything before is an earlier run; the walk starts the first task again."""
    state = run.state
    _run_again(run)
    _supersede(run, 1, state.next_seq - 1)
    state.tasks = {}
    state.dynamic_nodes = {}
    # Conductor keeps the variables a restart finds (new defaults of the latest definition join them)
    state.variables = {**run.snapshot.variables, **state.variables}
    state.workflow_name = run.snapshot.name
    state.workflow_version = run.snapshot.version
    state.create_time = state.start_time = run.now
    state.last_retried_time = 0
    state.usage = None  # a new run, a new budget (a retry or a rerun goes on spending the old one)
    run.forget_index()


def _retry(run: DecisionRun, command: RetryWorkflow) -> None:
    state = run.state
    refusal = _refusal_to_run_again(run, command.epoch, "retried")
    if refusal is None and state.status is WorkflowStatus.COMPLETED:
        refusal = "the workflow COMPLETED: there is nothing to retry"
    failed = sorted((t for t in state.tasks.values() if t.status in RUN_AGAIN), key=lambda t: t.seq)
    if refusal is None and not failed:
        refusal = "the workflow has no failed, timed-out or cancelled task to retry"
    unknown = [t.reference_task_name for t in failed if not _has_node(run, t)]
    if refusal is None and unknown:
        refusal = f"tasks {unknown} are no longer in the workflow's definition"
    if refusal is not None:
        record_operation(run, command, refusal=refusal)
        return
    _run_again(run)
    state.last_retried_time = run.now
    for task in failed:
        if task.kind in REOPENED_IN_PLACE:
            _reopen(run, task)
    for task in failed:
        if task.kind in REOPENED_IN_PLACE:
            continue
        if command.resume_subworkflow_tasks and task.kind == "SUB_WORKFLOW" and task.sub_workflow_id:
            _reopen(run, task)  # waits for the same child, which is retried in its turn
            task.output_data = {"subWorkflowId": task.sub_workflow_id}
            run.publish(
                RetryWorkflow(
                    id=f"retry:{task.sub_workflow_id}:for:{state.workflow_id}:{state.epoch}",
                    workflow_id=task.sub_workflow_id,
                    resume_subworkflow_tasks=True,
                )
            )
            continue
        _next_attempt(run, task)
    record_operation(run, command, note=f"run {state.epoch}: {[t.reference_task_name for t in failed]}")
    _tell_parent(run)


def _has_node(run: DecisionRun, task: TaskState) -> bool:
    try:
        run.node_of(task)
    except KeyError:
        return False
    return True


def _next_attempt(run: DecisionRun, failed: TaskState) -> None:
    """The failed execution's next attempt, started now (an operator's retry waits no delay)."""
    node = run.node_of(failed)
    failed.retried = True
    run.touch(failed)
    scope = scope_of(failed.reference_task_name)
    task = run.create(node, scope, retry_of=failed)
    task.kind, task.task_type, task.task_def_name = failed.kind, failed.task_type, failed.task_def_name
    run.type_of(task).start(run, node, task, scope)


def _reopen(run: DecisionRun, task: TaskState) -> None:
    """An operator (or a SUB_WORKFLOW waiting for its child again) goes on where it was."""
    task.status = TaskStatus.IN_PROGRESS
    task.reason_for_incompletion = None
    task.end_time = 0
    task.update_time = run.now
    run.touch(task)


def _rerun(run: DecisionRun, command: RerunWorkflow) -> None:
    state = run.state
    refusal = _refusal_to_run_again(run, command.epoch, "rerun")
    if refusal is not None:
        record_operation(run, command, refusal=refusal)
        return
    if command.re_run_from_task_id is None:  # from the very start, with the new input
        _start_over(run)
        _take_rerun_input(run, command)
        record_operation(run, command, note=f"run {state.epoch} from the start")
        _tell_parent(run)
        return
    if run.history is None:
        raise HistoryNeededError
    executions = _executions(run)
    target = executions.get(command.re_run_from_task_id)
    if target is None:
        record_operation(
            run,
            command,
            refusal=f"this run of the workflow has no task execution {command.re_run_from_task_id!r}",
        )
        return
    if not _has_node(run, target):
        record_operation(
            run, command, refusal=f"task {target.reference_task_name!r} is no longer in the definition"
        )
        return
    _run_again(run)
    state.last_retried_time = run.now
    _take_rerun_input(run, command)
    _rewind(run, executions, target)
    node = run.node_of(target)
    scope = scope_of(target.reference_task_name)
    task = run.create(node, scope)
    task.kind, task.task_type, task.task_def_name = target.kind, target.task_type, target.task_def_name
    if command.task_input is not None:
        task.input_data = dict(command.task_input)
    run.type_of(task).start(run, node, task, scope)
    record_operation(run, command, note=f"run {state.epoch} from {target.reference_task_name}")
    _tell_parent(run)


def _take_rerun_input(run: DecisionRun, command: RerunWorkflow) -> None:
    if command.workflow_input is not None:
        run.state.input = dict(command.workflow_input)
    if command.correlation_id is not None:
        run.state.correlation_id = command.correlation_id


def _executions(run: DecisionRun) -> dict[str, TaskState]:
    """This run's executions by id: its task records, with the document's current ones over them."""
    state = run.state
    found = {t.task_id: t for t in run.history or () if not state.is_superseded(t.seq)}
    found.update({t.task_id: t for t in state.tasks.values()})
    return found


def _rewind(
    run: DecisionRun, executions: dict[str, TaskState], target: TaskState, *, keep: bool = False
) -> None:
    """Back to the moment `target` was created: what came after it, and what the end cancelled,
    belongs to the earlier run; the loops around it go back to its iteration and the JOINs
    after the forks around it wait again. With `keep`, `target` itself stays (reopened)."""
    state = run.state
    kept: dict[str, TaskState] = {}
    kept_seqs: set[int] = set()
    around = _operators_around(run, target)
    for execution in sorted(executions.values(), key=lambda t: t.seq):
        earlier = execution.seq < target.seq or _in_a_parallel_branch(run, execution, target)
        # what the end cancelled runs again — but a loop or JOIN around the task is taken up
        # where it was (reopened below), not started afresh
        wanted = execution.status is not TaskStatus.CANCELED or execution.reference_task_name in around
        if earlier and wanted:
            kept[node_ref(execution.reference_task_name)] = execution
            kept_seqs.add(execution.seq)
    if keep:
        kept[node_ref(target.reference_task_name)] = target
        kept_seqs.add(target.seq)
    for execution in executions.values():  # ended by the end (cancelled), or after the target
        if execution.seq not in kept_seqs:
            _supersede(run, execution.seq, execution.seq)
    state.tasks = kept
    while True:  # the branches of a dynamic fork that runs again are made again
        orphans = [r for r, d in state.dynamic_nodes.items() if d.parent not in kept]
        if not orphans:
            break
        for orphan in orphans:
            state.dynamic_nodes.pop(orphan)
    run.forget_index()
    ref = node_ref(target.reference_task_name)
    scope = scope_of(target.reference_task_name)
    place = run.plan.place(ref)
    loops = place.loops if place is not None else ()
    parent = run.parent_of(ref)
    while parent is not None:
        owner = state.tasks.get(parent)
        if owner is not None and owner.kind == "DO_WHILE" and parent in loops:
            iteration = scope[loops.index(parent)]
            owner.iteration = iteration
            owner.output_data = {
                k: v for k, v in owner.output_data.items() if not (k.isdigit() and int(k) >= iteration)
            }
            owner.output_data["iteration"] = iteration
            _reopen(run, owner)
        elif owner is not None and owner.kind in ("FORK_JOIN", "FORK_JOIN_DYNAMIC", "FORK"):
            join_node = run.next_sibling(parent)
            join = state.tasks.get(join_node.task_reference_name) if join_node is not None else None
            if join is not None and join.kind in REOPENED_IN_PLACE:
                join.output_data = {}
                _reopen(run, join)
        parent = run.parent_of(parent)


def _operators_around(run: DecisionRun, target: TaskState) -> set[str]:
    """Execution references of the loops around `target` (in its iterations) and of the JOINs
    after the forks around it: the operators a rerun from `target` reopens."""
    found: set[str] = set()
    ref = node_ref(target.reference_task_name)
    scope = scope_of(target.reference_task_name)
    place = run.plan.place(ref)
    while place is not None and place.parent is not None:
        owner = run.plan.place(place.parent)
        if owner is None:
            break
        depth = len(owner.loops)
        if owner.node.type == "DO_WHILE":
            found.add(execution_ref(place.parent, scope[:depth]))
        elif owner.node.type in ("FORK_JOIN", "FORK_JOIN_DYNAMIC"):
            join = run.next_sibling(place.parent)
            if join is not None:
                found.add(execution_ref(join.task_reference_name, scope[:depth]))
        place = owner
    return found


def _fork_branches(run: DecisionRun, ref: str) -> dict[str, str]:
    """The FORK_JOINs around node `ref`, each with the branch (`forkTasks[i]`) it is in."""
    found: dict[str, str] = {}
    place = run.plan.place(ref)
    while place is not None and place.parent is not None:
        owner = run.plan.place(place.parent)
        if owner is not None and owner.node.type == "FORK_JOIN":
            found[place.parent] = place.list_key
        place = owner
    return found


def _in_a_parallel_branch(run: DecisionRun, execution: TaskState, target: TaskState) -> bool:
    """Whether `execution` ran in another branch of a fork around `target` (in the same loop
    iteration): what it did does not depend on `target`, so a rerun keeps it whenever it ran."""
    theirs = _fork_branches(run, node_ref(execution.reference_task_name))
    ours = _fork_branches(run, node_ref(target.reference_task_name))
    for fork, branch in ours.items():
        if fork in theirs and theirs[fork] != branch:
            place = run.plan.place(fork)
            depth = len(place.loops) if place is not None else 0
            return (
                scope_of(execution.reference_task_name)[:depth]
                == scope_of(target.reference_task_name)[:depth]
            )
    return False


def _child_reopened(run: DecisionRun, event: SubWorkflowReopened) -> None:
    """A finished child runs again: its SUB_WORKFLOW task waits for it again, and this workflow,
    if it ended, runs again from that task (what came after it belongs to the earlier run)."""
    state = run.state
    task = run.live_task(event.task_id)
    if task is None or task.sub_workflow_id != event.sub_workflow_id:
        run.reject(
            "reopened_unknown_task",
            f"child {event.sub_workflow_id} reopened: no task {event.task_id} runs it",
        )
        return
    if not task.status.is_terminal:
        return  # already waiting for it (a retry with resumeSubworkflowTasks reopened it first)
    if not state.status.is_terminal:
        run.reject(
            "reopened_parent_went_on",
            f"child {event.sub_workflow_id} reopened, but {state.workflow_id} went on past its task",
        )
        return
    if run.history is None:
        raise HistoryNeededError
    executions = _executions(run)
    _run_again(run)
    state.last_retried_time = run.now
    _rewind(run, executions, task, keep=True)
    task.output_data = {"subWorkflowId": event.sub_workflow_id}
    _reopen(run, task)
    _tell_parent(run)
