"""The api service on Kafka + a MongoDB-protocol server: HTTP workers and Kafka workers share the
task types of one workflow type, and every workflow completes exactly."""

from __future__ import annotations

import asyncio
import socket
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.devserver import free_port
from tests.e2e.cluster import Cluster
from tests.e2e.definitions import PIPELINE, TASK_DEFS, expected_output
from tests.e2e.test_services_e2e import start_pipeline

pytestmark = [pytest.mark.integration, pytest.mark.e2e]


@pytest.fixture
async def cluster_with_api(
    kafka_bootstrap: str, mongo_url: str, unique: str, tmp_path: Path
) -> AsyncIterator[Cluster]:
    cluster = Cluster(kafka_bootstrap, mongo_url, unique, tmp_path)
    port = free_port()
    cluster.add("api", ["run", "api", "--port", str(port)])
    cluster.add(
        "http-worker",
        ["worker", "tests.e2e.workers_e2e", "--server", f"http://127.0.0.1:{port}", "--concurrency", "20"],
    )
    await cluster.start()
    yield cluster
    codes = await cluster.stop()
    unclean = {name: code for name, code in codes.items() if code not in (0, None)}
    assert not unclean, f"processes did not stop cleanly on SIGTERM: {unclean}\n{cluster.diagnostics()}"


def worker_ids(cluster: Cluster) -> tuple[str, str]:
    host = socket.gethostname()
    kafka_worker = f"{host}-{cluster['worker'].popen.pid}"  # type: ignore[union-attr]
    http_worker = f"{host}-{cluster['http-worker'].popen.pid}"  # type: ignore[union-attr]
    return kafka_worker, http_worker


async def test_http_and_kafka_workers_complete_tasks_of_one_workflow_type(cluster_with_api: Cluster) -> None:
    """Workflows are started in waves until both transports have completed tasks (the api joins
    a task type's group only when an HTTP worker first polls it, and Kafka then rebalances), then
    every workflow must complete exactly."""
    cluster = cluster_with_api
    await cluster.register(*TASK_DEFS, PIPELINE)
    kafka_worker, http_worker = worker_ids(cluster)
    ids: list[str] = []
    by_worker: Counter[str | None] = Counter()
    deadline = time.monotonic() + 150
    while not (by_worker[kafka_worker] and by_worker[http_worker]):
        assert time.monotonic() < deadline and len(ids) < 400, (
            f"one transport did all the work: {by_worker}\n{cluster.diagnostics()}"
        )
        for _ in range(20):
            ids.append(await start_pipeline(cluster, len(ids), "mix"))
        await asyncio.sleep(2)
        done = await cluster.store.load_workflows(ids)
        by_worker = Counter(task.worker_id for d in done.values() for task in d.state.tasks.values())
    documents = await cluster.wait_for(ids, within_s=240)
    for i, workflow_id in enumerate(ids):
        state = documents[workflow_id].state
        assert state.status.value == "COMPLETED", (state, cluster.diagnostics())
        assert state.output == expected_output(i, workflow_id)
    by_worker = Counter(task.worker_id for d in documents.values() for task in d.state.tasks.values())
    assert set(by_worker) == {kafka_worker, http_worker}, by_worker
