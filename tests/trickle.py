"""A trickle of normal workflows that runs beside a hostile test and must come out exact.

The workflows are server-side only (INLINE then JSON_JQ_TRANSFORM), so no worker is involved and
their end-to-end time is the engine's."""

from __future__ import annotations

import asyncio
import time

import httpx

TRICKLE = {
    "name": "hostile_trickle",
    "tasks": [
        {
            "name": "square",
            "taskReferenceName": "square",
            "type": "INLINE",
            "inputParameters": {
                "n": "${workflow.input.n}",
                "evaluatorType": "javascript",
                "expression": "$.n * $.n",
            },
        },
        {
            "name": "label",
            "taskReferenceName": "label",
            "type": "JSON_JQ_TRANSFORM",
            "inputParameters": {"v": "${square.output.result}", "queryExpression": '"n2=\\(.v)"'},
        },
    ],
    "outputParameters": {"square": "${square.output.result}", "label": "${label.output.result}"},
}


class Trickle:
    """Starts one TRICKLE workflow every `gap_s` until stopped, then waits for all of them."""

    def __init__(self, api: httpx.AsyncClient, gap_s: float = 0.1) -> None:
        self.api = api
        self.gap_s = gap_s
        self.started: dict[str, tuple[int, float]] = {}
        """workflow id -> (its n, seconds its start took to answer)"""
        self.stop = asyncio.Event()

    async def run(self) -> None:
        n = 0
        while not self.stop.is_set():
            n += 1
            began = time.monotonic()
            response = await self.api.post(
                "/api/workflow", json={"name": "hostile_trickle", "input": {"n": n}}
            )
            assert response.status_code == 200, response.text
            self.started[response.text] = (n, time.monotonic() - began)
            await asyncio.sleep(self.gap_s)

    async def finish(self, within_s: float = 60) -> list[float]:
        """Every workflow's seconds from its start request to the answer. A TRICKLE workflow ends
        in its first decision and the api answers a start once the execution is readable, so
        that is its end-to-end time (each one's COMPLETED state and exact output are checked
        here; when it was seen would only measure when this checking began)."""
        self.stop.set()
        took: list[float] = []
        deadline = time.monotonic() + within_s
        pending = dict(self.started)
        while pending:
            for workflow_id, (n, answered_s) in list(pending.items()):
                body = (
                    await self.api.get(f"/api/workflow/{workflow_id}", params={"includeTasks": False})
                ).json()
                if body["status"] in ("COMPLETED", "FAILED", "TERMINATED"):
                    assert body["status"] == "COMPLETED", body
                    assert body["output"] == {"square": n * n, "label": f"n2={n * n}"}, body
                    took.append(answered_s)
                    del pending[workflow_id]
            assert time.monotonic() < deadline, f"{len(pending)} trickle workflows never completed"
            await asyncio.sleep(0.05)
        return took
