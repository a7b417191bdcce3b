"""The api's guard without a server: every route has a permission, which settings start an open
api and which refuse to, and a keys file changed under a running api."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any, cast

import pytest

from services.api.app import create_app
from services.api.auth import OPEN_ROUTES, ROUTE_PERMISSIONS, ApiAuth, KeysFile, api_auth, is_loopback
from services.api.context import ApiContext
from services.api.fast_routes import api_routes
from services.runtime import StartupError
from shared.auth.roles import Permission
from shared.auth.tokens import TokenError
from shared.config import CairnSettings

SECRET = "s3cret-s3cret-s3cret"


def app_routes() -> set[tuple[str, str]]:
    app = create_app(cast(ApiContext, object()))
    routes = {(method, route.path) for route in api_routes(app.routes) for method in route.methods}
    documented = {
        (method.upper(), path) for path, operations in app.openapi()["paths"].items() for method in operations
    }
    # The guard keys on the route's own path: a prefix given at include time would not be in it.
    assert routes == documented, "include routers without a prefix (give it to their APIRouter)"
    return routes


def test_every_route_is_in_the_table_and_the_table_has_only_routes() -> None:
    """A route missing from ROUTE_PERMISSIONS would be admin-only: map it on purpose."""
    routes = app_routes()
    assert set(OPEN_ROUTES) <= routes
    unmapped = sorted(routes - set(ROUTE_PERMISSIONS) - set(OPEN_ROUTES))
    assert not unmapped, f"add these to ROUTE_PERMISSIONS (services/api/auth.py): {unmapped}"
    stale = sorted(set(ROUTE_PERMISSIONS) - routes)
    assert not stale, f"ROUTE_PERMISSIONS names routes that do not exist: {stale}"
    assert Permission.ADMINISTER not in ROUTE_PERMISSIONS.values()


def settings(**values: Any) -> CairnSettings:
    return CairnSettings.model_validate(values)


def keys_file(tmp_path: Path, keys: list[dict[str, Any]] | None = None) -> Path:
    path = tmp_path / "keys.json"
    path.write_text(json.dumps(keys or [{"keyId": "ops", "keySecret": SECRET, "role": "operator"}]))
    return path


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost"])
def test_open_on_loopback(host: str) -> None:
    assert is_loopback(host)
    assert api_auth(settings(api_host=host)) is None


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "", "10.1.2.3", "cairn.example.com"])
def test_an_open_api_on_another_address_is_refused_unless_insecure(host: str) -> None:
    with pytest.raises(StartupError) as refused:
        api_auth(settings(api_host=host))
    message = str(refused.value)
    assert "\n" not in message
    assert "CAIRN_AUTH_KEYS_FILE" in message and "--insecure" in message
    assert api_auth(settings(api_host=host, insecure=True)) is None


def test_with_keys_any_address_is_fine(tmp_path: Path) -> None:
    auth = api_auth(settings(api_host="0.0.0.0", auth_keys_file=str(keys_file(tmp_path))))
    assert auth is not None and len(auth.keys.ring) == 1


def test_a_bad_keys_file_refuses_to_start_naming_the_file_and_field(tmp_path: Path) -> None:
    path = keys_file(tmp_path, [{"keyId": "x", "keySecret": SECRET, "role": "boss"}])
    with pytest.raises(StartupError, match=r"CAIRN_AUTH_KEYS_FILE .*keys.json: \[0\]\.role: Input should be"):
        api_auth(settings(auth_keys_file=str(path)))
    with pytest.raises(StartupError, match="cannot read it"):
        api_auth(settings(auth_keys_file=str(tmp_path / "nothing.json")))


def test_the_settings_refuse_half_a_key_and_a_short_token_secret() -> None:
    with pytest.raises(ValueError, match="both CAIRN_API_KEY_ID and CAIRN_API_KEY_SECRET"):
        settings(api_key_id="ops")
    with pytest.raises(ValueError, match="at least 32 characters"):
        settings(auth_token_secret="short")
    with pytest.raises(ValueError, match="greater than or equal to 60"):
        settings(auth_token_ttl_s=5)


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def rewrite(path: Path, keys: list[dict[str, Any]]) -> None:
    path.write_text(json.dumps(keys))
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))  # a new mtime even on coarse clocks


def test_tokens_expire_and_a_changed_file_applies_at_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = keys_file(tmp_path)
    clock = Clock()
    auth = ApiAuth(KeysFile(path, None, ttl_s=60), clock)
    assert auth.issue("ops", "wrong-wrong-wrong-wrong") is None
    token = auth.issue("ops", SECRET)
    assert token is not None and auth.caller(token).key_id == "ops"
    clock.now += 60
    with pytest.raises(TokenError) as expired:
        auth.caller(token)
    assert expired.value.code == "EXPIRED_TOKEN"

    token = auth.issue("ops", SECRET)
    assert token is not None
    rewrite(path, [{"keyId": "ops", "keySecret": SECRET, "role": "reader"}])
    # The signing key is derived from the file: every token issued before the change is invalid.
    with pytest.raises(TokenError) as changed:
        auth.caller(token)
    assert changed.value.code == "INVALID_TOKEN"
    token = auth.issue("ops", SECRET)
    assert token is not None and auth.caller(token).role.value == "reader"

    with caplog.at_level(logging.ERROR):
        rewrite(path, [{"keyId": "ops"}])
        assert auth.caller(token).role.value == "reader"  # the broken file is not used
    assert "cannot be used" in caplog.text


def test_with_a_configured_secret_a_removed_key_or_rotated_secret_revokes_its_tokens(tmp_path: Path) -> None:
    path = keys_file(
        tmp_path,
        [
            {"keyId": "ops", "keySecret": SECRET, "role": "operator"},
            {"keyId": "other", "keySecret": SECRET, "role": "reader"},
        ],
    )
    auth = ApiAuth(KeysFile(path, "t" * 32, ttl_s=60), Clock())
    ops, other = auth.issue("ops", SECRET), auth.issue("other", SECRET)
    assert ops is not None and other is not None
    rewrite(
        path,
        [
            {"keyId": "ops", "keySecret": SECRET + "-rotated", "role": "operator"},
            {"keyId": "other", "keySecret": SECRET, "role": "reader"},
        ],
    )
    assert auth.caller(other).key_id == "other"  # same signing key: the untouched key's token lives
    with pytest.raises(TokenError, match="removed or its secret changed"):
        auth.caller(ops)
    rewrite(path, [{"keyId": "ops", "keySecret": SECRET + "-rotated", "role": "operator"}])
    with pytest.raises(TokenError, match="removed or its secret changed"):
        auth.caller(other)
