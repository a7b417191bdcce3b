"""SQLite fencing across processes: another OS process opens the same file and races this one.

Each process runs 4 writers, each with its own SqliteStore (its own connection and thread), so
the 8 writers really contend for SQLite's file lock rather than queueing on one adapter's
thread. Every writer drives the same workflows up the same versions, reading the current
version and committing the next one; writers that read the same version race for it, and a
stale read must lose. So every version must have exactly one winner across both processes.

Run as a module (`python -m tests.contract.test_sqlite_cross_process PATH NAME`) it is the other
process: it opens its adapters, prints `ready`, waits for a line on stdin, races, and prints its
wins as JSON.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections import Counter
from pathlib import Path

from shared.adapters.sqlite_store import SqliteStore
from shared.models.documents import WorkflowDocument
from shared.models.runtime import WorkflowState
from shared.ports.store import commit_one

WORKFLOWS = 10
VERSIONS = 20
WRITERS_PER_PROCESS = 4
REPO_ROOT = Path(__file__).resolve().parents[2]


def _document(workflow_id: str, version: int, writer: str) -> WorkflowDocument:
    state = WorkflowState(workflow_id=workflow_id, workflow_name="race", workflow_version=1)
    state.correlation_id = writer
    return WorkflowDocument(workflow_id=workflow_id, version=version, state=state, updated_at=version)


async def _writer(store: SqliteStore, writer: str) -> list[tuple[str, int]]:
    """Drive every workflow to its last version as a decider would: read the current version v,
    commit v+1 expecting v, and on losing read again. Returns the versions this writer won."""
    wins = []
    for w in range(WORKFLOWS):
        workflow_id = f"wf-{w}"
        while (current := await store.load_workflow(workflow_id)) is not None:
            if current.version > VERSIONS:
                break
            version = current.version + 1
            if await commit_one(store, _document(workflow_id, version, writer), current.version):
                wins.append((workflow_id, version))
    return wins


async def _open_stores(path: str) -> list[SqliteStore]:
    stores = [SqliteStore(path) for _ in range(WRITERS_PER_PROCESS)]
    for store in stores:
        await store.open()
    return stores


async def _race(stores: list[SqliteStore], name: str) -> dict[str, list[list[object]]]:
    """Run one writer per adapter; its wins by writer name (JSON-ready), then close them."""
    try:
        results = await asyncio.gather(*(_writer(store, f"{name}-{i}") for i, store in enumerate(stores)))
    finally:
        for store in stores:
            await store.close()
    return {f"{name}-{i}": [list(win) for win in wins] for i, wins in enumerate(results)}


async def _child(path: str, name: str) -> None:
    """The other process: open, say `ready`, wait for the go line on stdin, race, print wins."""
    stores = await _open_stores(path)
    print("ready", flush=True)
    await asyncio.to_thread(sys.stdin.readline)
    print(json.dumps(await _race(stores, name)), flush=True)


async def test_commits_from_two_processes_have_one_winner_per_version(
    sqlite_store: SqliteStore, sqlite_path: str
) -> None:
    for w in range(WORKFLOWS):
        assert await commit_one(sqlite_store, _document(f"wf-{w}", 1, "setup"), 0)
    ours = await _open_stores(sqlite_path)
    other = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.contract.test_sqlite_cross_process", sqlite_path, "child",
        cwd=REPO_ROOT, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert other.stdout is not None and other.stdin is not None
        assert (await asyncio.wait_for(other.stdout.readline(), 60)).strip() == b"ready"
        other.stdin.write(b"go\n")
        await other.stdin.drain()
        mine = await _race(ours, "parent")
        output, _ = await asyncio.wait_for(other.communicate(), 120)
    finally:
        if other.returncode is None:
            other.kill()
            await other.wait()
    assert other.returncode == 0
    theirs = json.loads(output.decode().strip().splitlines()[-1])
    wins = {writer: [tuple(win) for win in found] for writer, found in {**mine, **theirs}.items()}
    assert len(wins) == 2 * WRITERS_PER_PROCESS
    counted = Counter(win for found in wins.values() for win in found)
    expected = {(f"wf-{w}", v) for w in range(WORKFLOWS) for v in range(2, VERSIONS + 2)}
    assert set(counted) == expected
    assert [win for win, count in counted.items() if count > 1] == []
    assert any(wins[f"child-{i}"] for i in range(WRITERS_PER_PROCESS)), "the other process never won"
    assert any(wins[f"parent-{i}"] for i in range(WRITERS_PER_PROCESS)), "this process never won"
    # Each final document is the last version's winner's.
    final = await sqlite_store.load_workflows([f"wf-{w}" for w in range(WORKFLOWS)])
    assert len(final) == WORKFLOWS
    for workflow_id, document in final.items():
        assert document.version == VERSIONS + 1
        [winner] = [w for w, found in wins.items() if (workflow_id, VERSIONS + 1) in found]
        assert document.state.correlation_id == winner


if __name__ == "__main__":
    asyncio.run(_child(sys.argv[1], sys.argv[2]))
