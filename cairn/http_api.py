"""The HTTP worker's connection to a Cairn api (or a Conductor server): one aiohttp session,
the API-key token, and the one retry a refused connection deserves.

Why aiohttp and not httpx (which the CLI keeps): a worker's throughput is its poll and update
requests. On this project's 2-core machine an httpx AsyncClient managed about 380 poll + update
pairs per second against a server that answered 5,800 to an aiohttp client
(../shared/BENCHMARKS.md); in `cairn dev`'s W1 the worker process, not the engine, was the limit
(benchmarks/README.md, issue 16). aiohttp parses HTTP in C and does not go through anyio.

Token handling is the CLI's (cairn/auth.py): `POST /api/token` with the key, the token in
`X-Authorization`, a new token and one retry when the server answers 401, and no token at all when
the server has no token endpoint (404, Conductor OSS). Concurrent requests share one renewal.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

import aiohttp
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from cairn.auth import TOKEN_HEADER, ApiKey, token_of_answer

CONNECT_TIMEOUT_S = 10.0
CONNECT_ATTEMPTS = 4
"""A refused or failed connection is tried again three times (httpx's `retries=3` did the same):
no request reached the server, so nothing is done twice."""


class ApiUnreachable(Exception):
    """The request did not get an answer: the connection failed, broke, or timed out."""


class TokenRefused(Exception):
    """The server would not give this key a token (wrong id or secret): not worth a retry."""


@dataclass(frozen=True)
class ApiResponse:
    status_code: int
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")

    def json(self) -> Any:
        """The body as JSON (ValueError when it is not)."""
        return json.loads(self.body)

    def message(self) -> str:
        """The server's error message: Cairn's and Conductor's `message` field, else the text."""
        try:
            body = self.json()
        except ValueError:
            return self.text
        return str(body.get("message", body)) if isinstance(body, dict) else str(body)

    def raise_for_status(self) -> None:
        if self.status_code >= 400:
            raise ApiUnreachable(f"the api answered {self.status_code}: {self.message()}")


class ApiSession:
    """Requests to one server with one key, sharing a connection pool of `connections`."""

    def __init__(self, server: str, api_key: ApiKey | None = None, *, connections: int = 100) -> None:
        self.server = server.rstrip("/")
        self.api_key = api_key
        self._connections = connections
        self._session: aiohttp.ClientSession | None = None
        self._token: str | None = None
        self._server_is_open = False
        self._renewals = 0
        """How many times the token was fetched: a request that saw a refusal renews only if no
        other request renewed since it was signed."""
        self._renewing = asyncio.Lock()

    async def __aenter__(self) -> ApiSession:
        connector = aiohttp.TCPConnector(limit=self._connections, limit_per_host=self._connections)
        self._session = aiohttp.ClientSession(self.server, connector=connector, raise_for_status=False)
        return self

    async def __aexit__(self, *_: object) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    async def request(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        params: dict[str, Any] | None = None,
        timeout_s: float = 10.0,
    ) -> ApiResponse:
        """One request, signed with the key's token (renewed once on a 401). Raises
        ApiUnreachable when no answer came."""
        renewed = False
        if self.api_key is not None and self._token is None and not self._server_is_open:
            await self._renew(self._renewals)
            renewed = True
        signed_after = self._renewals
        response = await self._send(method, path, json_body, params, timeout_s)
        if response.status_code == 401 and self.api_key is not None and not renewed:
            await self._renew(signed_after)
            response = await self._send(method, path, json_body, params, timeout_s)
        return response

    async def _send(
        self, method: str, path: str, json_body: Any, params: dict[str, Any] | None, timeout_s: float
    ) -> ApiResponse:
        session = self._session
        if session is None:
            raise RuntimeError("ApiSession is not open: use `async with`")
        headers = {TOKEN_HEADER: self._token} if self._token else None
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT_S, sock_read=timeout_s)
        retrying = AsyncRetrying(
            retry=retry_if_exception_type(aiohttp.ClientConnectorError),
            wait=wait_exponential(multiplier=0.5, max=4),
            stop=stop_after_attempt(CONNECT_ATTEMPTS),
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    async with session.request(
                        method, path, json=json_body, params=params, headers=headers, timeout=timeout
                    ) as answer:
                        return ApiResponse(answer.status, await answer.read())
        except (aiohttp.ClientError, TimeoutError) as error:
            raise ApiUnreachable(f"{method} {self.server}{path}: {error!r}") from error
        raise AssertionError("unreachable: the retry loop returns or raises")

    async def _renew(self, seen: int) -> None:
        """Fetch a token, once for all the requests that were signed after renewal `seen`."""
        async with self._renewing:
            if self._renewals != seen:
                return  # another request renewed it meanwhile
            self._renewals += 1
            assert self.api_key is not None
            body = {"keyId": self.api_key.key_id, "keySecret": self.api_key.key_secret}
            response = await self._send("POST", "/api/token", body, None, CONNECT_TIMEOUT_S)
            url = f"{self.server}/api/token"
            try:
                token = token_of_answer(
                    url, self.api_key.key_id, response.status_code, response.text, response.message()
                )
            except ValueError as problem:
                raise TokenRefused(str(problem)) from None
            self._token, self._server_is_open = token, token is None
