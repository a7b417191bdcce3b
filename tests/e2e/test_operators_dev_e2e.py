"""Every operator on `cairn dev`, end to end: each runnable example of examples/operators/ is
registered through the api, started, worked by `cairn worker examples.operator_workers` over
HTTP polling in its own process, and must end with exactly the output written here."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.devserver import DevServer
from tests.e2e.operator_flows import (
    LONG_LOOP,
    LONG_LOOP_ITERATIONS,
    NESTED,
    SHIP_CHILD,
    WIDE_FORK,
    WIDE_FORK_BRANCHES,
    nested_output,
    wide_fork_total,
)

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "operators"


class _Echo(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        reply = json.dumps({"received": body, "path": self.path}).encode()
        self.send_response(201)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args: Any) -> None:
        return None


@pytest.fixture(scope="module")
def echo_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/orders"
    server.shutdown()


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    logs = tmp_path_factory.mktemp("operators-dev")
    server = DevServer(logs)
    server.start()
    worker = server.worker(logs, module="tests.e2e.workers_operators")
    worker.start()
    definitions = [item for path in sorted(EXAMPLES.glob("*.json")) for item in json.loads(path.read_text())]
    response = httpx.put(f"{server.url}/api/metadata/workflow", json=definitions, timeout=30)
    assert response.status_code == 200, response.text
    try:
        yield server
    finally:
        worker.stop()
        server.process.stop()


@pytest.fixture
async def api(dev: DevServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=dev.url, timeout=30) as client:
        yield client


@dataclass
class Case:
    workflow: str
    input: dict[str, Any]
    output: dict[str, Any] | Callable[[dict[str, Any]], bool]
    status: str = "COMPLETED"
    refs: list[str] | None = None
    """The task list's reference names, in Conductor's order, when the shape matters."""
    act: Callable[[httpx.AsyncClient, str], Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


async def _approve(api: httpx.AsyncClient, workflow_id: str) -> None:
    await _wait_for_task(api, workflow_id, "approval")
    response = await api.post(
        f"/api/tasks/{workflow_id}/approval/COMPLETED", json={"approved": True, "by": "ann"}
    )
    assert response.status_code == 200, response.text


async def _wait_for_task(api: httpx.AsyncClient, workflow_id: str, ref: str) -> None:
    for _ in range(200):
        workflow = (await api.get(f"/api/workflow/{workflow_id}")).json()
        if any(t["referenceTaskName"] == ref and t["status"] == "IN_PROGRESS" for t in workflow["tasks"]):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{ref} never became IN_PROGRESS in {workflow_id}")


CASES: dict[str, Case] = {
    "switch": Case(
        "example_switch",
        {"orderId": "o1", "country": "US"},
        {"case": "US", "fr": None, "us": "usps-o1", "other": None},
        refs=["fetch", "by_country", "ship_us"],
    ),
    "switch_default": Case(
        "example_switch",
        {"orderId": "o2", "country": "JP"},
        {"case": "JP", "fr": None, "us": None, "other": "dhl-o2"},
        refs=["fetch", "by_country", "ship_other"],
    ),
    "do_while": Case(
        "example_do_while",
        {"orderId": "o3"},
        {"iterations": 2, "first": 25.0, "last": 3.75, "ticks": 3, "lastTick": "tick 3"},
        refs=["fetch", "each_item", "price__1", "price__2", "countdown", "tick__1", "tick__2", "tick__3"],
    ),
    "fork_join": Case(
        "example_fork_join",
        {},
        {
            "total": 28.75,
            "joined": {"book": {"sku": "book", "amount": 25.0}, "pen": {"sku": "pen", "amount": 3.75}},
        },
        refs=["prices", "book", "pen", "both", "total"],
    ),
    "fork_join_dynamic": Case(
        "example_fork_join_dynamic",
        {"orderId": "o4"},
        {"total": 28.75, "branches": ["_price_item_0", "_price_item_1"]},
        refs=["fetch", "fan_out", "_price_item_0", "_price_item_1", "priced", "sum"],
    ),
    "sub_workflow": Case(
        "example_sub_workflow",
        {"orderId": "o5"},
        {"trackingId": "ups-o5", "notified": True},
        refs=["fetch", "shipping"],
    ),
    "start_workflow": Case(
        "example_start_workflow", {"orderId": "o6"}, lambda out: isinstance(out.get("started"), str)
    ),
    "set_variable": Case(
        "example_set_variable",
        {"customer": "ada"},
        {"greeting": "hello ada (1)", "variables": {"attempts": 1, "customer": "ada"}},
    ),
    "terminate_refused": Case(
        "example_terminate", {"qty": 0}, {"refused": 0}, status="FAILED", refs=["valid", "refuse"]
    ),
    "terminate_passed": Case("example_terminate", {"qty": 2}, {"amount": 60.0}, refs=["valid", "price"]),
    "inline": Case("example_inline", {"total": 100, "vip": True}, {"rate": 0.2, "pay": 80}),
    "json_jq_transform": Case(
        "example_json_jq_transform", {"orderId": "o7"}, {"skus": ["book", "pen"], "units": 5}
    ),
    "noop": Case("example_noop", {}, {"after": "after COMPLETED"}),
    "human": Case(
        "example_human",
        {"orderId": "o8"},
        {"approvedBy": "ann", "trackingId": "ups-o8"},
        refs=["approval", "approved", "ship"],
        act=_approve,
    ),
    "wait": Case("example_wait", {"to": "ops"}, {"text": "waited COMPLETED"}),
    "dynamic": Case(
        "example_dynamic",
        {"task": "ship", "orderId": "o9"},
        {"ran": "ship", "output": {"trackingId": "fedex-o9", "carrier": "fedex"}},
    ),
    "exclusive_join": Case(
        "example_exclusive_join",
        {"orderId": "o10", "express": True},
        {"trackingId": "express-o10"},
        refs=["carrier", "fast", "shipped"],
    ),
    "http": Case(
        "example_http",
        {"orderId": "o11"},
        {"status": 201, "body": {"received": {"orderId": "o11"}, "path": "/orders"}},
    ),
    "event": Case("example_event", {"orderId": "o12"}, {"sink": "kafka:example.orders", "orderId": "o12"}),
    "agent_loop": Case(
        "example_agent_loop",
        {"goal": "cheap lamps"},
        {"answer": "done after 2 searches: results for cheap lamps #2", "iterations": 3},
        refs=[
            "tools",
            "agent",
            "think__1",
            "choose__1",
            "act__1",
            "think__2",
            "choose__2",
            "act__2",
            "think__3",
            "choose__3",
        ],
    ),
}


async def _run(api: httpx.AsyncClient, case: Case, echo_url: str, within_s: float = 60) -> dict[str, Any]:
    given = {**case.input, **({"url": echo_url} if case.workflow == "example_http" else {})}
    response = await api.post("/api/workflow", json={"name": case.workflow, "input": given})
    assert response.status_code == 200, response.text
    workflow_id = response.text
    if case.act is not None:
        await case.act(api, workflow_id)
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        workflow: dict[str, Any] = (await api.get(f"/api/workflow/{workflow_id}")).json()
        if workflow["status"] not in ("RUNNING", "PAUSED"):
            return workflow
        await asyncio.sleep(0.05)
    raise AssertionError(f"{case.workflow} did not finish in {within_s}s: {workflow}")


@pytest.mark.parametrize("name", list(CASES))
async def test_operator_example_runs_on_cairn_dev(name: str, api: httpx.AsyncClient, echo_url: str) -> None:
    case = CASES[name]
    workflow = await _run(api, case, echo_url)
    assert workflow["status"] == case.status, workflow["reasonForIncompletion"]
    if callable(case.output):
        assert case.output(workflow["output"]), workflow["output"]
    else:
        assert workflow["output"] == case.output
    if case.refs is not None:
        assert [t["referenceTaskName"] for t in workflow["tasks"]] == case.refs
    seqs = [t["seq"] for t in workflow["tasks"]]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)


async def _finish(api: httpx.AsyncClient, workflow_id: str, within_s: float) -> dict[str, Any]:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        workflow: dict[str, Any] = (await api.get(f"/api/workflow/{workflow_id}?includeTasks=false")).json()
        if workflow["status"] != "RUNNING":
            return workflow
        await asyncio.sleep(0.2)
    raise AssertionError(f"{workflow_id} did not finish in {within_s}s")


async def test_nested_operators_and_long_runs_on_cairn_dev(api: httpx.AsyncClient) -> None:
    """The nested workflow, a 10,000-iteration DO_WHILE and a 1,000-way dynamic fork complete
    (one after the other) with exact outputs; the loop's document stays small (only the current
    iteration is kept) and the api lists what keepLastN keeps."""
    definitions = [SHIP_CHILD, NESTED, LONG_LOOP, WIDE_FORK]
    assert (await api.put("/api/metadata/workflow", json=definitions)).status_code == 200

    async def run(body: dict[str, Any], within_s: float) -> dict[str, Any]:
        workflow_id = (await api.post("/api/workflow", json=body)).text
        workflow = await _finish(api, workflow_id, within_s)
        assert workflow["status"] == "COMPLETED", workflow["reasonForIncompletion"]
        return workflow

    nested = await run({"name": "e2e_nested", "input": {"orderId": "n1"}}, 60)
    assert nested["output"] == nested_output("n1")
    loop = await run({"name": "e2e_long_loop", "input": {}}, 300)
    assert loop["output"] == {"iterations": LONG_LOOP_ITERATIONS, "last": 2 * LONG_LOOP_ITERATIONS}
    full = (await api.get(f"/api/workflow/{loop['workflowId']}")).json()
    # keepLastN=2: the api lists the loop and the last two iterations, as Conductor does.
    assert [t["referenceTaskName"] for t in full["tasks"]] == ["count", "step__9999", "step__10000"]
    assert set(full["tasks"][0]["outputData"]) == {"iteration", "9999", "10000"}
    fork = await run({"name": "e2e_wide_fork", "input": {"branches": WIDE_FORK_BRANCHES}}, 420)
    assert fork["output"] == {"total": wide_fork_total(WIDE_FORK_BRANCHES)}
