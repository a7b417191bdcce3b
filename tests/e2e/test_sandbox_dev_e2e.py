"""The JavaScript sandbox inside a running `cairn dev`: a script that never ends and one that
allocates without bound each fail their own task within the limits, nothing outside the script
is reachable from it, and the decider keeps deciding other workflows meanwhile."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from tests.devserver import DevServer

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

LIMIT_S = 2.0


def _inline(name: str, expression: str) -> dict[str, Any]:
    return {
        "name": name,
        "tasks": [
            {
                "name": "script",
                "taskReferenceName": "script",
                "type": "INLINE",
                "inputParameters": {"expression": expression, "n": "${workflow.input.n}"},
            }
        ],
        "outputParameters": {"result": "${script.output.result}"},
    }


DEFINITIONS = [
    _inline("sbx_spin", "while (true) {}"),
    _inline("sbx_bomb", "(function () { var a = []; while (true) a.push(new Array(1e6).fill(1)); })()"),
    _inline("sbx_require", "require('fs').readFileSync('/etc/passwd')"),
    _inline(
        "sbx_reach",
        "[typeof process, typeof fetch, typeof XMLHttpRequest, typeof Deno, typeof std, typeof os]",
    ),
    _inline("sbx_quick", "$.n * 2"),
]


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    server = DevServer(
        tmp_path_factory.mktemp("sandbox-dev"),
        None,
        CAIRN_SCRIPT_TIMEOUT_MS=str(int(LIMIT_S * 1000)),
        CAIRN_DECIDER_CONSUMERS="2",  # the other consumer keeps deciding while one runs the spin
    )
    server.start()
    try:
        yield server
    finally:
        server.process.stop()


@pytest.fixture
async def api(dev: DevServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=dev.url, timeout=30) as client:
        assert (await client.put("/api/metadata/workflow", json=DEFINITIONS)).status_code == 200
        yield client


async def _finished(api: httpx.AsyncClient, workflow_id: str, within_s: float = 30) -> dict[str, Any]:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        workflow: dict[str, Any] = (await api.get(f"/api/workflow/{workflow_id}")).json()
        if workflow["status"] != "RUNNING":
            return workflow
        await asyncio.sleep(0.05)
    raise AssertionError(f"{workflow_id} still running after {within_s}s")


async def test_runaway_scripts_fail_their_own_task_and_others_go_on(api: httpx.AsyncClient) -> None:
    began = time.monotonic()
    runaway = asyncio.create_task(api.post("/api/workflow", json={"name": "sbx_spin"}))
    await asyncio.sleep(0.3)  # the spin is inside the decider now

    async def quick(n: int) -> tuple[str, float]:
        sent = time.monotonic()
        response = await api.post("/api/workflow", json={"name": "sbx_quick", "input": {"n": n}})
        return response.text, time.monotonic() - sent

    quick_runs = await asyncio.gather(*(quick(n) for n in range(24)))
    spin = await _finished(api, (await runaway).text)
    spun_for = time.monotonic() - began
    assert spin["status"] == "FAILED"
    [task] = spin["tasks"]
    assert task["status"] == "FAILED" and "interrupted" in task["reasonForIncompletion"], task
    assert spun_for < LIMIT_S + 3, f"the runaway script took {spun_for:.1f}s to fail (limit {LIMIT_S}s)"
    # The spin held only its own consumer's partitions: starts that landed there waited for it,
    # and the decider's other consumer committed (and, INLINE being server-side, finished) the
    # starts on its partitions meanwhile. The share of each depends on how the partitions were
    # split between the two consumers (2/2, or 3/1 after a rebalance), not on this machine's
    # speed; with 24 starts over 4 partitions, both kinds are there whatever the split.
    elapsed = sorted(seconds for _, seconds in quick_runs)
    served_meanwhile = [seconds for seconds in elapsed if seconds < LIMIT_S / 2]
    held_by_the_spin = [seconds for seconds in elapsed if seconds >= LIMIT_S / 2]
    assert served_meanwhile and held_by_the_spin, elapsed
    for n, (workflow_id, _) in enumerate(quick_runs):
        done = await _finished(api, workflow_id)
        assert done["status"] == "COMPLETED" and done["output"] == {"result": 2 * n}


async def test_an_allocation_bomb_fails_its_task_and_the_engine_lives(api: httpx.AsyncClient) -> None:
    bomb = await _finished(api, (await api.post("/api/workflow", json={"name": "sbx_bomb"})).text)
    [task] = bomb["tasks"]
    assert bomb["status"] == "FAILED" and task["status"] == "FAILED_WITH_TERMINAL_ERROR"
    assert "out of memory" in task["reasonForIncompletion"], task["reasonForIncompletion"]
    after = await _finished(
        api, (await api.post("/api/workflow", json={"name": "sbx_quick", "input": {"n": 4}})).text
    )
    assert after["output"] == {"result": 8}


async def test_nothing_outside_the_script_is_reachable(api: httpx.AsyncClient) -> None:
    required = await _finished(api, (await api.post("/api/workflow", json={"name": "sbx_require"})).text)
    [task] = required["tasks"]
    assert task["status"] == "FAILED_WITH_TERMINAL_ERROR"
    assert "require is not defined" in task["reasonForIncompletion"]
    reach = await _finished(api, (await api.post("/api/workflow", json={"name": "sbx_reach"})).text)
    assert reach["output"] == {"result": ["undefined"] * 6}
