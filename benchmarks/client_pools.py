"""The load generator's HTTP client: several small httpx connection pools instead of one big one.

httpcore's pool checks every connection it holds (is it idle, expired, readable) on each request
and response, so one pool of 200 connections costs work quadratic in the connections in flight.
At concurrency 100 that made the load generator, not the engine under test, the bottleneck:
about 6-8 CPU-ms per call, seen for Restate's ingress and for Cairn's `POST /api/workflow` alike
(py-spy: a third of the load generator in `getpeername`). Spreading the same connections over
`POOLS` clients keeps each scan short; every engine's harness uses this, so their figures compare.
"""

from __future__ import annotations

import httpx

POOLS = 10
CONNECTIONS = 200
"""enough for every workflow in flight (concurrency up to 200): no connection churn"""


class ClientPools:
    """`POOLS` httpx clients to one base URL; a call is sent on the pool its index picks."""

    def __init__(self, base_url: str, timeout_s: float) -> None:
        # Idle connections are dropped before a server's keep-alive timeout (uvicorn: 5 s)
        # closes them under us.
        limits = httpx.Limits(
            max_connections=CONNECTIONS // POOLS,
            max_keepalive_connections=CONNECTIONS // POOLS,
            keepalive_expiry=3,
        )
        self.clients = [
            httpx.AsyncClient(base_url=base_url, limits=limits, timeout=timeout_s) for _ in range(POOLS)
        ]

    def pick(self, index: int) -> httpx.AsyncClient:
        """The pool of call `index` (the workflow's number: calls spread evenly)."""
        return self.clients[index % POOLS]

    async def aclose(self) -> None:
        for client in self.clients:
            await client.aclose()
