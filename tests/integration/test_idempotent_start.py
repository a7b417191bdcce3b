"""Idempotent starts over HTTP (Orkes's idempotencyKey and idempotencyStrategy) on `cairn dev`:
the three strategies, Orkes's headers, and starts of one key racing from many threads."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.devserver import DevServer

pytestmark = pytest.mark.integration
RACERS = 10


@pytest.fixture(scope="module")
def http(dev_server: DevServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=dev_server.url, timeout=30) as client:
        yield client


@pytest.fixture(scope="module")
def waiting(http: httpx.Client) -> str:
    """A workflow that waits for a signal, so it stays RUNNING until told."""
    name = f"keyed_{uuid.uuid4().hex[:8]}"
    definition = {
        "name": name,
        "version": 1,
        "tasks": [{"name": "w", "taskReferenceName": "w", "type": "WAIT"}],
    }
    http.post("/api/metadata/workflow", json=definition).raise_for_status()
    return name


def start(http: httpx.Client, name: str, key: str, strategy: str | None = None) -> httpx.Response:
    body = {"name": name, "input": {}, "idempotencyKey": key}
    if strategy is not None:
        body["idempotencyStrategy"] = strategy
    return http.post("/api/workflow", json=body)


def finish(http: httpx.Client, workflow_id: str) -> None:
    """Complete the WAIT task once the decider has scheduled it (it decides asynchronously)."""
    for _ in range(300):
        if http.get(f"/api/workflow/{workflow_id}").json().get("tasks"):
            break
        time.sleep(0.02)
    http.post(f"/api/tasks/{workflow_id}/w/COMPLETED", json={}).raise_for_status()
    for _ in range(300):
        if http.get(f"/api/workflow/{workflow_id}").json()["status"] == "COMPLETED":
            return
        time.sleep(0.02)
    pytest.fail(f"{workflow_id} did not complete")


def test_a_key_is_scoped_to_the_workflow_name(http: httpx.Client, waiting: str) -> None:
    other = f"{waiting}_other"
    definition = {
        "name": other,
        "version": 1,
        "tasks": [{"name": "w", "taskReferenceName": "w", "type": "WAIT"}],
    }
    http.post("/api/metadata/workflow", json=definition).raise_for_status()
    key = uuid.uuid4().hex
    assert start(http, waiting, key).status_code == 200
    assert start(http, other, key).status_code == 200


def test_fail_refuses_a_held_key_running_or_finished(http: httpx.Client, waiting: str) -> None:
    key = uuid.uuid4().hex
    first = start(http, waiting, key)  # FAIL is the default, as in conductor-python
    assert first.status_code == 200
    again = start(http, waiting, key, "FAIL")
    assert again.status_code == 409 and f"idempotency key {key} already exists" in again.json()["message"]
    finish(http, first.text)
    assert start(http, waiting, key, "FAIL").status_code == 409
    assert http.get(f"/api/workflow/{first.text}").json()["idempotencyKey"] == key


def test_return_existing_answers_the_holder(http: httpx.Client, waiting: str) -> None:
    key = uuid.uuid4().hex
    first = start(http, waiting, key, "RETURN_EXISTING").text
    assert start(http, waiting, key, "RETURN_EXISTING").text == first
    finish(http, first)
    assert start(http, waiting, key, "RETURN_EXISTING").text == first


def test_fail_on_running_starts_again_once_the_holder_ended(http: httpx.Client, waiting: str) -> None:
    key = uuid.uuid4().hex
    first = start(http, waiting, key, "FAIL_ON_RUNNING").text
    assert start(http, waiting, key, "FAIL_ON_RUNNING").status_code == 409
    finish(http, first)
    second = start(http, waiting, key, "FAIL_ON_RUNNING")
    assert second.status_code == 200 and second.text != first
    assert start(http, waiting, key, "FAIL_ON_RUNNING").status_code == 409
    assert start(http, waiting, key, "RETURN_EXISTING").text == second.text  # the newest holder


def test_orkes_headers_on_start_by_name(http: httpx.Client, waiting: str) -> None:
    key = uuid.uuid4().hex
    headers = {"X-Idempotency-key": key, "X-on-conflict": "RETURN_EXISTING"}
    first = http.post(f"/api/workflow/{waiting}", json={}, headers=headers).text
    assert http.post(f"/api/workflow/{waiting}", json={}, headers=headers).text == first
    refused = http.post(f"/api/workflow/{waiting}", json={}, headers={"X-Idempotency-key": key})
    assert refused.status_code == 409


@pytest.mark.parametrize("strategy", ["FAIL", "RETURN_EXISTING", "FAIL_ON_RUNNING"])
def test_concurrent_starts_of_one_key_start_one_execution(
    dev_server: DevServer, waiting: str, strategy: str
) -> None:
    key = uuid.uuid4().hex

    def racer(_: int) -> httpx.Response:
        with httpx.Client(base_url=dev_server.url, timeout=30) as client:
            return start(client, waiting, key, strategy)

    with ThreadPoolExecutor(RACERS) as pool:
        answers = list(pool.map(racer, range(RACERS)))
    statuses = Counter(a.status_code for a in answers)
    ids = {a.text for a in answers if a.status_code == 200}
    assert len(ids) == 1, answers
    if strategy == "RETURN_EXISTING":
        assert statuses == {200: RACERS}
    else:
        assert statuses == {200: 1, 409: RACERS - 1}, [a.text for a in answers]
    with httpx.Client(base_url=dev_server.url, timeout=30) as client:
        running = client.get(f"/api/workflow/running/{waiting}").json()
        holders = [w for w in running if client.get(f"/api/workflow/{w}").json()["idempotencyKey"] == key]
    assert holders == list(ids)
