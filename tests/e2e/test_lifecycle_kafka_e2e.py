"""The lifecycle operations of tests/integration/test_lifecycle_api.py, the same test bodies, on
the Kafka + MongoDB deployment: the four services and the api as processes, the test playing
the worker over HTTP. On MongoDB a finished execution lives in `workflows_finished`; a restart,
rerun or retry brings it back to `workflows` (shared/adapters/mongo_commits.py)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from conductor.client.orkes.orkes_workflow_client import OrkesWorkflowClient

from tests.devserver import free_port
from tests.e2e.cluster import Cluster
from tests.integration.test_conductor_client import client_configuration
from tests.integration.test_lifecycle_api import (  # noqa: F401  (collected here, on Kafka)
    test_bulk_operations_answer_conductors_bulk_response,
    test_operations_that_do_not_apply_answer_409_with_conductors_body,
    test_pause_keeps_the_running_tasks_result_and_schedules_nothing_until_resume,
    test_rerun_from_a_fork_branch_and_from_a_loop_iteration_keeps_the_earlier_outputs,
    test_rerun_from_a_task_keeps_the_tasks_before_it,
    test_rerun_from_a_task_of_a_sub_workflow_reruns_the_child_and_the_parent,
    test_restart_with_latest_definitions_after_the_definition_was_fixed,
    test_retry_of_a_failed_sub_workflow_task,
    test_retry_runs_the_failed_task_again_and_the_workflow_completes,
    test_skip_a_waiting_task_with_an_output,
    test_terminate_with_trigger_failure_workflow_starts_it,
)

pytestmark = [pytest.mark.integration, pytest.mark.e2e]


async def _create_topics(cluster: Cluster) -> None:
    try:
        await cluster.bus.ensure_topics(cluster.topics.fixed)
    finally:
        await cluster.bus.stop()


@pytest.fixture(scope="module")
def kafka_api(
    kafka_bootstrap: str, mongo_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """The services and the api on Kafka + MongoDB, shared by this module's tests (each test
    registers its own definitions and task types)."""
    cluster = Cluster(kafka_bootstrap, mongo_url, uuid.uuid4().hex[:10], Path(tmp_path_factory.mktemp("ops")))
    del cluster.processes["worker"]  # the tests play the worker
    port = free_port()
    cluster.add("api", ["run", "api", "--port", str(port)])
    asyncio.run(_create_topics(cluster))
    for process in cluster.processes.values():
        process.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, cluster.diagnostics()
        time.sleep(0.2)
    yield url
    codes = {name: process.stop() for name, process in cluster.processes.items()}
    assert all(code in (0, None) for code in codes.values()), (codes, cluster.diagnostics())


@pytest.fixture(scope="module")
def http(kafka_api: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=kafka_api, timeout=30) as client:
        yield client


@pytest.fixture(scope="module")
def workflows(kafka_api: str) -> OrkesWorkflowClient:
    return OrkesWorkflowClient(client_configuration(kafka_api))
