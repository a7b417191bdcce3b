"""Search and listing over HTTP on `cairn dev`: Conductor's query language, sort, paging and an
exact totalHits, through conductor-python's own calls too; the correlated lookups; the task
definitions' list; a 400 naming the token Cairn cannot read."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import httpx
import pytest
from conductor.client.orkes.orkes_workflow_client import OrkesWorkflowClient

from tests.devserver import DevServer
from tests.integration.test_conductor_client import client_configuration

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def http(dev_server: DevServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=dev_server.url, timeout=30) as client:
        yield client


@pytest.fixture(scope="module")
def world(http: httpx.Client) -> dict[str, object]:
    """Two workflow types: `quick` completes at once (a SET_VARIABLE), `held` waits; six of each,
    correlated by parity."""
    tag = uuid.uuid4().hex[:8]
    quick, held = f"search_quick_{tag}", f"search_held_{tag}"
    for name, task in (
        (
            quick,
            {"name": "set", "taskReferenceName": "set", "type": "SET_VARIABLE", "inputParameters": {"v": 1}},
        ),
        (held, {"name": "w", "taskReferenceName": "w", "type": "WAIT"}),
    ):
        http.post(
            "/api/metadata/workflow", json={"name": name, "version": 1, "tasks": [task]}
        ).raise_for_status()
    before = int(time.time() * 1000) - 1
    started: dict[str, list[str]] = {quick: [], held: []}
    for n in range(6):
        for name in (quick, held):
            answer = http.post(
                f"/api/workflow/{name}", params={"correlationId": f"{tag}-{n % 2}"}, json={"n": n, "tag": tag}
            )
            started[name].append(answer.text)
    deadline = time.monotonic() + 30
    query = {"query": f"workflowType = {quick} AND status = COMPLETED"}
    while http.get("/api/workflow/search", params=query).json()["totalHits"] < 6:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    return {"tag": tag, "quick": quick, "held": held, "started": started, "before": before}


def hits(http: httpx.Client, **params: object) -> tuple[int, list[str]]:
    answer = http.get("/api/workflow/search", params=params)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    return body["totalHits"], [summary["workflowId"] for summary in body["results"]]


def test_query_forms_and_exact_total(http: httpx.Client, world: dict[str, object]) -> None:
    quick, held = world["quick"], world["held"]
    assert hits(http, query=f"workflowType IN ({quick},{held}) AND status IN (RUNNING)")[0] == 6
    assert hits(http, query=f"workflowType IN ({quick},{held}) AND startTime > {world['before']}")[0] == 12
    total, page = hits(http, query=f"workflowType IN ({quick},{held})", size=5, start=10)
    assert total == 12 and len(page) == 2
    correlated = hits(http, query=f'correlationId = "{world["tag"]}-1" AND workflowType = "{held}"')
    assert correlated[0] == 3
    one = world["started"][held][0]  # type: ignore[index]
    assert hits(http, query=f"workflowId = '{one}'") == (1, [one])
    assert hits(http, freeText=f"{world['tag']}", query=f"workflowType = {quick}")[0] == 6


def test_sort_orders_the_results(http: httpx.Client, world: dict[str, object]) -> None:
    started = world["started"][world["held"]]  # type: ignore[index]
    _, oldest_first = hits(http, query=f"workflowType = {world['held']}", sort="startTime:ASC")
    _, newest_first = hits(http, query=f"workflowType = {world['held']}", sort="startTime:DESC")
    assert oldest_first == started and newest_first == list(reversed(started))


def test_unreadable_queries_are_400_naming_the_token(http: httpx.Client) -> None:
    for query, named in (
        ("colour = red", "unknown field 'colour'"),
        ("status = RUNNING AND", "ends too early"),
        ("status ~ RUNNING", "unexpected '~'"),
        ("status = SLEEPING", "'SLEEPING' is not a workflow status"),
    ):
        answer = http.get("/api/workflow/search", params={"query": query})
        assert answer.status_code == 400 and named in answer.json()["message"], (query, answer.text)
    answer = http.get("/api/workflow/search", params={"sort": "colour:DESC"})
    assert answer.status_code == 400 and "unknown field 'colour'" in answer.json()["message"]
    assert http.get("/api/workflow/search", params={"size": 5001}).status_code == 400


def test_conductor_pythons_search_and_correlated_calls(
    dev_server: DevServer, world: dict[str, object]
) -> None:
    client = OrkesWorkflowClient(client_configuration(dev_server.url))
    found = client.search(query=f"workflowType = {world['quick']} AND status = COMPLETED", size=3)
    assert len(found.results) == 3  # Orkes's ScrollableSearchResult: results, no totalHits
    assert {r.workflow_type for r in found.results} == {world["quick"]}
    tag = world["tag"]
    by_correlation = client.get_by_correlation_ids(world["held"], [f"{tag}-0", f"{tag}-1"])  # type: ignore[arg-type]
    assert sorted(len(v) for v in by_correlation.values()) == [3, 3]


def test_correlated_lookup_running_only_unless_closed_included(
    http: httpx.Client, world: dict[str, object]
) -> None:
    tag, quick, held = world["tag"], world["quick"], world["held"]
    running = http.get(f"/api/workflow/{held}/correlated/{tag}-0").json()
    assert len(running) == 3 and {w["status"] for w in running} == {"RUNNING"} and running[0]["tasks"] == []
    assert http.get(f"/api/workflow/{quick}/correlated/{tag}-0").json() == []
    closed = http.get(
        f"/api/workflow/{quick}/correlated/{tag}-0", params={"includeClosed": "true", "includeTasks": "true"}
    ).json()
    assert len(closed) == 3 and [t["referenceTaskName"] for t in closed[0]["tasks"]] == ["set"]


def test_task_definitions_are_listed(http: httpx.Client) -> None:
    name = f"listed_{uuid.uuid4().hex[:8]}"
    http.post("/api/metadata/taskdefs", json=[{"name": name, "retryCount": 2}]).raise_for_status()
    listed = http.get("/api/metadata/taskdefs")
    assert listed.status_code == 200
    assert {"name": name, "retryCount": 2}.items() <= next(
        d for d in listed.json() if d["name"] == name
    ).items()


def test_task_search(http: httpx.Client, world: dict[str, object]) -> None:
    quick = world["quick"]
    found = http.get(
        "/api/tasks/search", params={"query": f"workflowType = {quick} AND taskType = SET_VARIABLE"}
    )
    assert found.status_code == 200, found.text
    body = found.json()
    assert body["totalHits"] == 6 and {r["status"] for r in body["results"]} == {"COMPLETED"}
    assert body["results"][0]["startTime"].endswith("Z") and isinstance(body["results"][0]["output"], str)
    refused = http.get("/api/tasks/search", params={"query": "status = SLEEPING"})
    assert refused.status_code == 400 and "'SLEEPING' is not a task status" in refused.json()["message"]
