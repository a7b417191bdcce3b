"""`cairn dev` end to end: one process on its state file, HTTP workers in another process, and a
SIGKILL of the engine in the middle of the run."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.devserver import DevServer
from tests.e2e.definitions import PIPELINE, TASK_DEFS, expected_output

pytestmark = [pytest.mark.integration, pytest.mark.e2e]


async def statuses(api: httpx.AsyncClient, ids: list[str]) -> dict[str, dict[str, Any]]:
    found = {}
    for workflow_id in ids:
        response = await api.get(f"/api/workflow/{workflow_id}")
        if response.status_code == 200:
            found[workflow_id] = response.json()
    return found


async def completed_count(api: httpx.AsyncClient, name: str) -> int:
    """One cheap request (the search endpoint) rather than one read per workflow."""
    response = await api.get("/api/workflow/search", params={"status": "COMPLETED", "workflowType": name})
    count: int = response.json()["totalHits"]
    return count


RESPONSE_TIMEOUT_S = 5
"""A task whose poll answer was written in the instant the engine died may never reach its worker,
and a result the worker gave up delivering while the engine was down is lost with it:
responseTimeoutSeconds is what recovers those, as in Conductor. (A hand-out whose answer was
never written goes out again within seconds: test_rehand_dev_e2e.py.)"""


async def test_dev_killed_mid_run_and_restarted_on_the_same_file(tmp_path: Path) -> None:
    server = DevServer(tmp_path, None, CAIRN_SWEEPER_STALE_AFTER_S="2", CAIRN_SWEEPER_STALE_INTERVAL_S="1")
    server.start()
    # Two slots per task type: the run lasts long enough for the kill to land in its middle (with 20,
    # a faster engine finished all 50 between two looks at the completed count).
    worker = server.worker(tmp_path, concurrency=2)
    task_defs = [
        {**task_def, "responseTimeoutSeconds": RESPONSE_TIMEOUT_S, "retryCount": 3, "retryDelaySeconds": 0}
        for task_def in TASK_DEFS
    ]
    try:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as api:
            assert (await api.post("/api/metadata/taskdefs", json=task_defs)).status_code == 200
            assert (await api.post("/api/metadata/workflow", json=PIPELINE)).status_code == 200
            requests = [
                {
                    "name": "e2e_pipeline",
                    "workflowId": f"dev-wf-{i}",
                    "input": {"n": i, "add": 2, "label": f"L{i}"},
                }
                for i in range(50)
            ]
            responses = await asyncio.gather(*(api.post("/api/workflow", json=r) for r in requests))
            assert all(r.status_code == 200 for r in responses), [r.text for r in responses]
            ids = [r.text for r in responses]
            worker.start()  # only now: every workflow is in flight when the engine dies
            deadline = time.monotonic() + 120
            while (killed_with := await completed_count(api, "e2e_pipeline")) < 5:
                assert time.monotonic() < deadline, server.process.log_tail()
                await asyncio.sleep(0.01)
            server.process.kill()
            assert killed_with < 50, "everything finished before the kill; the test proves nothing"

        server.start()  # same file, same port; the worker reconnects on its own
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as api:
            deadline = time.monotonic() + 180
            while True:
                found = await statuses(api, ids)
                if len(found) == 50 and all(w["status"] != "RUNNING" for w in found.values()):
                    break
                assert time.monotonic() < deadline, (
                    f"{sum(w['status'] == 'COMPLETED' for w in found.values())}/50 completed\n"
                    f"{server.process.log_tail()}\n{worker.log_tail()}"
                )
                await asyncio.sleep(0.2)
        timed_out = 0
        for i, workflow_id in enumerate(ids):
            workflow = found[workflow_id]
            assert workflow["status"] == "COMPLETED", workflow
            assert workflow["output"] == expected_output(i, workflow_id)
            last = {t["referenceTaskName"]: t["status"] for t in workflow["tasks"]}  # in seq order
            assert last == {"add": "COMPLETED", "mul": "COMPLETED", "fmt": "COMPLETED"}, workflow["tasks"]
            extra = [t for t in workflow["tasks"] if t["status"] != "COMPLETED"]
            assert all(t["status"] == "TIMED_OUT" for t in extra), extra  # hand-outs lost in the kill
            timed_out += len(extra)
        outage = f"{timed_out} executions timed out in the outage and retried"
        print(f"killed with {killed_with}/50 completed; {outage}")
    finally:
        assert worker.stop() == 0, worker.log_tail()
        assert server.process.stop() == 0, server.process.log_tail()


async def test_dev_runs_the_same_engine_on_kafka_and_mongodb(
    tmp_path: Path, kafka_bootstrap: str, mongo_url: str, unique: str
) -> None:
    """`cairn dev --kafka --mongo`: one process, real servers, HTTP workers."""
    server = DevServer(
        tmp_path,
        None,
        "--kafka",
        kafka_bootstrap,
        "--mongo",
        mongo_url,
        CAIRN_TOPIC_PREFIX=f"dev{unique}.",
        CAIRN_MONGO_DB=f"cairn_dev_{unique}",
    )
    server.start()
    worker = server.worker(tmp_path)
    worker.start()
    try:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as api:
            assert (await api.post("/api/metadata/taskdefs", json=TASK_DEFS)).status_code == 200
            assert (await api.post("/api/metadata/workflow", json=PIPELINE)).status_code == 200
            ids = []
            for i in range(5):
                request = {"name": "e2e_pipeline", "input": {"n": i, "add": 2, "label": f"L{i}"}}
                ids.append((await api.post("/api/workflow", json=request)).text)
            deadline = time.monotonic() + 120
            while True:
                found = await statuses(api, ids)
                if all(w["status"] == "COMPLETED" for w in found.values()) and len(found) == 5:
                    break
                assert time.monotonic() < deadline, f"{found}\n{server.process.log_tail()}"
                await asyncio.sleep(0.2)
        for i, workflow_id in enumerate(ids):
            assert found[workflow_id]["output"] == expected_output(i, workflow_id)
        assert not server.db.exists(), "with --kafka and --mongo no state file is written"
        assert (
            "Kafka" in server.process.log_path.read_text()
            and "MongoDB" in server.process.log_path.read_text()
        )
    finally:
        assert worker.stop() == 0, worker.log_tail()
        assert server.process.stop() == 0, server.process.log_tail()
