"""Authenticating to a Cairn api (or an Orkes Conductor) with an API key, for the CLI and the HTTP
worker: an httpx auth flow that fetches a token with `POST /api/token`, sends it in
`X-Authorization`, and fetches a new one when the server answers 401 (the token expired, or the
server's keys changed), retrying that request once.

A server without keys answers `/api/token` with 404; the flow then sends requests without a
token, as conductor-python does against Conductor OSS.
"""

from __future__ import annotations

import json
from collections.abc import Generator
from dataclasses import dataclass

import httpx

from shared.config import CairnSettings

TOKEN_HEADER = "X-Authorization"


@dataclass(frozen=True)
class ApiKey:
    key_id: str
    key_secret: str

    def __repr__(self) -> str:
        return f"ApiKey({self.key_id!r}, <secret>)"

    @classmethod
    def from_settings(cls, settings: CairnSettings) -> ApiKey | None:
        """CAIRN_API_KEY_ID and CAIRN_API_KEY_SECRET, when set."""
        if settings.api_key_id is None or settings.api_key_secret is None:
            return None
        return cls(settings.api_key_id, settings.api_key_secret.get_secret_value())


class AuthenticationFailed(httpx.HTTPError):
    """The server would not give this key a token (wrong id or secret, or no token endpoint)."""


def _message(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text
    return str(body.get("message", body)) if isinstance(body, dict) else str(body)


def token_of_answer(url: str, key_id: str, status: int, text: str, message: str) -> str | None:
    """The token in the server's answer to `POST /api/token` (`text`, its body; `message`, its
    error message), or None when the server has no keys (404: requests go unsigned, as against
    Conductor OSS). Raises ValueError naming the problem when the key was refused or the answer
    holds no token. Shared by the httpx flow below and the HTTP worker's aiohttp session."""
    if status == 404:
        return None
    if status in (401, 403):
        raise ValueError(f"{url} refused key {key_id!r}: {message}")
    if status >= 400:
        raise ValueError(f"{url} answered {status}: {message}")
    try:
        token = json.loads(text).get("token")
    except (ValueError, AttributeError):
        token = None
    if not isinstance(token, str) or not token:
        raise ValueError(f"{url} answered without a token: {text[:200]}")
    return token


class ApiKeyAuth(httpx.Auth):
    """Token handling for one server and one key; share one instance across a client's requests
    so they share its token. Works with httpx.Client and httpx.AsyncClient alike (the flow does
    no I/O of its own)."""

    requires_response_body = True

    def __init__(self, server: str, key: ApiKey) -> None:
        self.token_url = server.rstrip("/") + "/api/token"
        self.key = key
        self._token: str | None = None
        self._server_is_open = False

    def _renew(self) -> Generator[httpx.Request, httpx.Response, None]:
        body = {"keyId": self.key.key_id, "keySecret": self.key.key_secret}
        response = yield httpx.Request("POST", self.token_url, json=body)
        try:
            token = token_of_answer(
                self.token_url, self.key.key_id, response.status_code, response.text, _message(response)
            )
        except ValueError as problem:
            raise AuthenticationFailed(str(problem)) from None
        self._token, self._server_is_open = token, token is None

    def _sign(self, request: httpx.Request) -> None:
        if self._token:
            request.headers[TOKEN_HEADER] = self._token
        else:
            request.headers.pop(TOKEN_HEADER, None)

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        renewed = False
        if self._token is None and not self._server_is_open:
            yield from self._renew()
            renewed = True
        self._sign(request)
        response = yield request
        if response.status_code == 401 and not renewed:
            yield from self._renew()
            self._sign(request)
            yield request
