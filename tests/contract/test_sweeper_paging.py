"""Issue 12 point 4: the sweeper reaches a newly stuck workflow whatever the number of healthy
idle ones. Before, its scan took the oldest RUNNING workflows up to its limit, and a WAIT for a
person never refreshes its update time: past `limit` of those, a workflow whose dispatch was lost
was never repaired (this test failed on the old scan: it never requested `stuck`)."""

from __future__ import annotations

import json
from collections.abc import Sequence

from services.sweeper.handler import Sweeper
from shared.models.documents import WorkflowDocument
from shared.models.runtime import TaskState, TaskStatus, WorkflowState
from shared.ports.bus import Outgoing
from shared.ports.store import Store, commit_one
from shared.topics import Topics

NOW = 1_800_000_000_000
HOUR = 3_600_000


class Requests:
    def __init__(self) -> None:
        self.workflow_ids: list[str] = []

    async def publish(self, messages: Sequence[Outgoing]) -> None:
        self.workflow_ids.extend(json.loads(m.value)["workflowId"] for m in messages)


def execution(workflow_id: str, kind: str, status: TaskStatus, at: int) -> WorkflowDocument:
    task = TaskState(
        task_id=f"{workflow_id}-t",
        task_type="approve" if kind == "WAIT" else "work",
        kind=kind,
        task_def_name="approve" if kind == "WAIT" else "work",
        reference_task_name="t",
        workflow_instance_id=workflow_id,
        workflow_type="w",
        status=status,
        update_time=at,
        scheduled_time=at,
    )
    state = WorkflowState(
        workflow_id=workflow_id, workflow_name="w", workflow_version=1, tasks={"t": task}, update_time=at
    )
    return WorkflowDocument(workflow_id=workflow_id, version=1, state=state, updated_at=at)


async def test_a_stuck_workflow_is_swept_behind_any_number_of_healthy_idle_ones(store: Store) -> None:
    for n in range(30):  # people who have not answered for a day: healthy, idle, oldest
        assert await commit_one(
            store, execution(f"idle-{n:02}", "WAIT", TaskStatus.IN_PROGRESS, NOW - 24 * HOUR), 0
        )
    # dispatched an hour ago and never picked up: its dispatch was lost
    assert await commit_one(store, execution("stuck", "SIMPLE", TaskStatus.SCHEDULED, NOW - HOUR), 0)
    requests = Requests()
    sweeper = Sweeper(store, requests, Topics(), lambda: NOW, 30_000, 300_000, 0, limit=10)  # type: ignore[arg-type]
    for _ in range(3):
        await sweeper.sweep_once()
    assert "stuck" in requests.workflow_ids
    assert not [w for w in requests.workflow_ids if w.startswith("idle")], "healthy idle workflows were swept"


async def test_the_scan_pages_so_every_overdue_workflow_is_reached(store: Store) -> None:
    for n in range(25):
        assert await commit_one(
            store, execution(f"lost-{n:02}", "SIMPLE", TaskStatus.SCHEDULED, NOW - HOUR + n), 0
        )
    requests = Requests()
    sweeper = Sweeper(store, requests, Topics(), lambda: NOW, 30_000, 300_000, 0, limit=10)  # type: ignore[arg-type]
    for _ in range(3):
        await sweeper.sweep_once()
    assert sorted(set(requests.workflow_ids)) == [f"lost-{n:02}" for n in range(25)]
