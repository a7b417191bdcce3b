"""The client side (CLI, HTTP worker): a token fetched on first use, renewed once on a 401, and
no token at all for a server without keys."""

from __future__ import annotations

import json
import re

import httpx
import pytest

from cairn.auth import ApiKey, ApiKeyAuth, AuthenticationFailed, token_of_answer
from shared.config import CairnSettings

KEY = ApiKey("ops", "s3cret-s3cret-s3cret")


class Server:
    """Issues token-N on each POST /api/token; accepts only the newest token."""

    def __init__(self, token_status: int = 200) -> None:
        self.token_status = token_status
        self.issued = 0
        self.seen: list[tuple[str, str | None]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.seen.append((request.url.path, request.headers.get("X-Authorization")))
        if request.url.path == "/api/token":
            assert json.loads(request.content) == {"keyId": "ops", "keySecret": KEY.key_secret}
            if self.token_status != 200:
                return httpx.Response(self.token_status, json={"message": "no key 'ops' with that secret"})
            self.issued += 1
            return httpx.Response(200, json={"token": f"token-{self.issued}"})
        if self.token_status == 404:
            return httpx.Response(200, json={"open": True})
        if request.headers.get("X-Authorization") != f"token-{self.issued}":
            return httpx.Response(401, json={"error": "EXPIRED_TOKEN"})
        return httpx.Response(200, json={"ok": True})


def client(server: Server) -> httpx.Client:
    return httpx.Client(
        base_url="http://cairn", transport=httpx.MockTransport(server), auth=ApiKeyAuth("http://cairn", KEY)
    )


def test_the_first_request_fetches_a_token_and_later_ones_reuse_it() -> None:
    server = Server()
    with client(server) as http:
        assert http.get("/api/workflow/x").status_code == 200
        assert http.post("/api/tasks", json={"a": 1}).status_code == 200
    assert server.seen == [
        ("/api/token", None),
        ("/api/workflow/x", "token-1"),
        ("/api/tasks", "token-1"),
    ]


def test_a_401_renews_the_token_and_retries_once() -> None:
    server = Server()
    with client(server) as http:
        http.get("/a")
        server.issued += 1  # the server forgot token-1 (expired, or its keys changed)
        response = http.post("/b", json={"n": 1})
    assert response.status_code == 200
    assert server.seen[2:] == [("/b", "token-1"), ("/api/token", None), ("/b", "token-3")]


def test_a_server_without_keys_gets_no_token() -> None:
    server = Server(token_status=404)
    with client(server) as http:
        assert http.get("/a").status_code == 200
        assert http.get("/b").status_code == 200
    assert server.seen == [("/api/token", None), ("/a", None), ("/b", None)]


def test_a_refused_key_is_an_error_saying_which_key() -> None:
    with (
        client(Server(token_status=401)) as http,
        pytest.raises(AuthenticationFailed, match="refused key 'ops'"),
    ):
        http.get("/a")


def test_the_key_comes_from_the_settings_and_its_secret_is_not_shown() -> None:
    settings = CairnSettings.model_validate({"api_key_id": "ops", "api_key_secret": KEY.key_secret})
    key = ApiKey.from_settings(settings)
    assert key == KEY and KEY.key_secret not in repr(key)
    assert ApiKey.from_settings(CairnSettings.model_validate({})) is None


async def test_the_same_flow_drives_an_async_client() -> None:
    server = Server()
    async with httpx.AsyncClient(
        base_url="http://cairn", transport=httpx.MockTransport(server), auth=ApiKeyAuth("http://cairn", KEY)
    ) as http:
        assert (await http.get("/a")).status_code == 200
    assert server.seen == [("/api/token", None), ("/a", "token-1")]


@pytest.mark.parametrize(
    ("status", "text", "message", "expected"),
    [
        (200, '{"token": "t-1"}', "", "t-1"),
        (404, "", "", None),
        (401, '{"message": "bad secret"}', "bad secret", "refused key 'ops': bad secret"),
        (403, '{"message": "no"}', "no", "refused key 'ops': no"),
        (500, "boom", "boom", "answered 500: boom"),
        (200, '{"tok": 1}', "", "answered without a token"),
        (200, "not json", "", "answered without a token"),
    ],
)
def test_a_token_answer_is_read_by_one_function_for_both_clients(
    status: int, text: str, message: str, expected: str | None
) -> None:
    """cairn.auth.token_of_answer: the httpx flow and the worker's aiohttp session read the
    server's answer to POST /api/token through this one function."""
    if expected in (None, "t-1"):
        assert token_of_answer("http://s/api/token", "ops", status, text, message) == expected
    else:
        with pytest.raises(ValueError, match=re.escape(str(expected))):
            token_of_answer("http://s/api/token", "ops", status, text, message)
