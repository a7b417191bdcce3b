"""The decider decides on the document it owns, without a working copy (services/decider/
deciding.py): the outcome is the one a copy gives, also when a decision asks for more part-way
(it is read again), and two decisions never share one document object (the recent cache hands
each document to one taker). Real DeciderHandlers on the real store adapters and the embedded bus.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from services.decider.handler import DeciderHandler
from shared.adapters.embedded_bus import EmbeddedBus
from shared.adapters.sqlite_store import SqliteStore
from shared.core import new_workflow_state
from shared.core.decide import decide
from shared.core.engines import GraphEngine
from shared.core.validation import parse_task_def, parse_workflow_def
from shared.models.messages import StartWorkflow, TaskResult
from shared.models.runtime import TaskStatus
from shared.ports.bus import Received
from shared.ports.store import Commit, Store
from shared.topics import Topics
from tests.integration.test_decider_races import dispatches

pytestmark = pytest.mark.integration
NOW = 1_800_000_000_000
TOPICS = Topics()

PICK_THEN_DYNAMIC = {
    "name": "in_place_dynamic",
    "tasks": [
        {"name": "in_place_pick", "taskReferenceName": "pick"},
        {
            "name": "dyn",
            "taskReferenceName": "dyn",
            "type": "DYNAMIC",
            "dynamicTaskNameParam": "taskToExecute",
            "inputParameters": {"taskToExecute": "${pick.output.next}", "amount": "${pick.output.amount}"},
        },
    ],
}
TWO_BRANCHES = {
    "name": "in_place_fork",
    "tasks": [
        {
            "name": "fork",
            "taskReferenceName": "fork",
            "type": "FORK_JOIN",
            "forkTasks": [
                [
                    {"name": "in_place_a1", "taskReferenceName": "a1"},
                    {"name": "in_place_a2", "taskReferenceName": "a2"},
                ],
                [
                    {"name": "in_place_b1", "taskReferenceName": "b1"},
                    {"name": "in_place_b2", "taskReferenceName": "b2"},
                ],
            ],
        },
        {"name": "join", "taskReferenceName": "join", "type": "JOIN", "joinOn": ["a2", "b2"]},
    ],
}
TASK_NAMES = ["in_place_pick", "in_place_pay", "in_place_a1", "in_place_a2", "in_place_b1", "in_place_b2"]


async def register(store: Store) -> None:
    for name in TASK_NAMES:
        await store.put_task_def(parse_task_def({"name": name, "retryCount": 0}))
    for definition in (PICK_THEN_DYNAMIC, TWO_BRANCHES):
        await store.put_workflow_def(parse_workflow_def(definition))


def delivered(message: StartWorkflow | TaskResult, offset: int) -> Received:
    topic = TOPICS.workflow_start if isinstance(message, StartWorkflow) else TOPICS.task_result
    key = message.workflow_id if isinstance(message, StartWorkflow) else message.workflow_instance_id
    return Received(topic=topic, value=message.to_bytes(), key=key, headers={}, partition=0, offset=offset)


def result(workflow_id: str, task_id: str, output: dict[str, Any]) -> TaskResult:
    return TaskResult(
        id=f"result:{task_id}",
        workflow_instance_id=workflow_id,
        task_id=task_id,
        status=TaskStatus.COMPLETED,
        output_data=output,
    )


@pytest.fixture
def copying() -> Iterator[None]:
    """Deciders that decide on a working copy, as before: the reference outcome."""
    GraphEngine.decides_in_place = False
    try:
        yield
    finally:
        GraphEngine.decides_in_place = True


async def dynamic_outcome(store: Store, bus: EmbeddedBus) -> tuple[str, int]:
    """Start the dynamic workflow, then report `pick`: its decision completes `pick`, reaches the
    DYNAMIC task and asks for the TaskDef of the task it names (not in the snapshot)."""
    await register(store)
    decider = DeciderHandler(store, bus, TOPICS, lambda: NOW)
    start = StartWorkflow(id="start:wf-dyn", workflow_id="wf-dyn", name="in_place_dynamic", input={})
    await decider.handle_batch([delivered(start, 0)])
    document = await store.load_workflow("wf-dyn")
    assert document is not None
    pick = document.state.tasks["pick"].task_id
    await decider.handle_batch([delivered(result("wf-dyn", pick, {"next": "in_place_pay", "amount": 7}), 1)])
    await decider.aclose()
    document = await store.load_workflow("wf-dyn")
    assert document is not None
    state = document.state.model_dump(mode="json")
    return json.dumps(state, sort_keys=True), decider.deciding.reads_again


async def test_a_decision_in_place_that_asks_for_more_is_read_again(store: Store, tmp_path: Path) -> None:
    bus = EmbeddedBus(str(tmp_path / "bus.db"))
    try:
        outcome, reads_again = await dynamic_outcome(store, bus)
    finally:
        await bus.stop()
    state = json.loads(outcome)
    assert state["tasks"]["pick"]["status"] == "COMPLETED"
    assert (
        state["tasks"]["dyn"]["task_type"] == "in_place_pay"
        and state["tasks"]["dyn"]["status"] == "SCHEDULED"
    )
    sent = dispatches(tmp_path / "bus.db", TOPICS.tasks("in_place_pay"))
    assert [(m.reference_task_name, m.input_data.get("amount")) for m in sent] == [("dyn", 7)]
    assert reads_again == 1, "the decision asked for the TaskDef part-way and was made again on a fresh read"


async def outcome_on_a_new_file(directory: Path) -> tuple[str, int]:
    directory.mkdir()
    store, bus = SqliteStore(str(directory / "store.db")), EmbeddedBus(str(directory / "bus.db"))
    await store.open()
    try:
        return await dynamic_outcome(store, bus)
    finally:
        await bus.stop()
        await store.close()


async def test_in_place_and_on_a_copy_decide_the_same(tmp_path: Path, copying: None) -> None:
    """The same messages at the same times, decided on copies (the reference) and in place (read
    again part-way): the same state, to the byte."""
    reference, reads_again = await outcome_on_a_new_file(tmp_path / "copies")
    assert reads_again == 0
    GraphEngine.decides_in_place = True
    outcome, reads_again = await outcome_on_a_new_file(tmp_path / "in-place")
    assert outcome == reference
    assert reads_again == 1


class SecondCommitsFirst:
    """The real store, except that the first commit waits until a second one is done: the
    decision made first commits last."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._calls = 0
        self._second_done = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def commit_workflows(self, commits: Sequence[Commit]) -> list[bool]:
        self._calls += 1
        call = self._calls
        if call == 1:
            await self._second_done.wait()
        won = await self._store.commit_workflows(commits)
        if call == 2:
            self._second_done.set()
        return won


async def test_two_batches_of_one_workflow_never_share_its_document(store: Store, tmp_path: Path) -> None:
    """One decider, its cache holding the fork's document, two batches at once: one reports a1,
    the other b1, and the decision made first commits last. Each decision must be made on a
    document of its own (the loser of the commit race decides again on a fresh read), so both a2
    and b2 are dispatched. Were the cached document shared, the second decision would build on
    the first's uncommitted change (a2 scheduled) without its dispatch, and win: a2 would never
    be sent.

    b2 may be sent twice: the loser's fresh read can come before the winner's outbox is marked
    sent (a background write after the publish), and a decision publishes what its document's
    outbox still holds. Workers see a task at least once (docs/semantics.md, guarantee 4)."""
    bus = EmbeddedBus(str(tmp_path / "bus.db"))
    try:
        await register(store)
        decider = DeciderHandler(store, bus, TOPICS, lambda: NOW)
        start = StartWorkflow(id="start:wf-fork", workflow_id="wf-fork", name="in_place_fork", input={})
        await decider.handle_batch([delivered(start, 0)])
        assert len(decider.recent) == 1, "the started document is cached"
        document = await store.load_workflow("wf-fork")
        assert document is not None
        a1, b1 = document.state.tasks["a1"].task_id, document.state.tasks["b1"].task_id
        assert [await store.find_task_workflow(task_id) for task_id in (a1, b1)] == ["wf-fork"] * 2
        decider.store = SecondCommitsFirst(store)  # type: ignore[assignment]
        await asyncio.gather(
            decider.handle_batch([delivered(result("wf-fork", a1, {}), 1)]),
            decider.handle_batch([delivered(result("wf-fork", b1, {}), 2)]),
        )
        await decider.aclose()
    finally:
        await bus.stop()
    document = await store.load_workflow("wf-fork")
    assert document is not None
    statuses = {ref: task.status.value for ref, task in document.state.tasks.items()}
    assert statuses["a1"] == statuses["b1"] == "COMPLETED"
    assert statuses["a2"] == statuses["b2"] == "SCHEDULED"
    for ref in ("a2", "b2"):  # live executions are found by id (indexed when their decision made them)
        assert await store.find_task_workflow(document.state.tasks[ref].task_id) == "wf-fork"
    sent = sorted(m.reference_task_name for m in dispatches(tmp_path / "bus.db", TOPICS.tasks("in_place_%2")))
    assert sent.count("a2") == 1 and sent.count("b2") in (1, 2), sent


def test_decide_leaves_the_state_alone_unless_in_place() -> None:
    definition = parse_workflow_def(TWO_BRANCHES)
    start = StartWorkflow(id="s", workflow_id="wf", name="in_place_fork", input={})
    state = new_workflow_state(definition, start, NOW)
    before = state.model_dump_json()
    copied = decide(definition, state, [], NOW)
    assert copied.state is not state and state.model_dump_json() == before
    assert set(copied.state.tasks) >= {"a1", "b1"}
    in_place = decide(definition, state, [], NOW, in_place=True)
    assert in_place.state is state and set(state.tasks) >= {"a1", "b1"}
    assert in_place.state.model_dump_json() == copied.state.model_dump_json()
