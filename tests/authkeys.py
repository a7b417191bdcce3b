"""Keys for tests that run the api with authentication on: one key per role, plus a worker key
limited to one task type, and the token signing secret so a test can make an expired token."""

from __future__ import annotations

import json
from pathlib import Path

from shared.auth.keys import ApiKey, parse_keys
from shared.auth.tokens import TokenSigner, signing_key

LIMITED_TYPE = "auth_limited_type"
TOKEN_SECRET = "cairn-tests-token-signing-secret-0123456789"


def secret_of(key_id: str) -> str:
    return f"{key_id}-secret-for-tests-0123456789"


KEYS = [
    {"keyId": "admin", "keySecret": secret_of("admin"), "role": "admin"},
    {"keyId": "operator", "keySecret": secret_of("operator"), "role": "operator"},
    {"keyId": "worker", "keySecret": secret_of("worker"), "role": "worker"},
    {
        "keyId": "limited-worker",
        "keySecret": secret_of("limited-worker"),
        "role": "worker",
        "taskTypes": [LIMITED_TYPE],
    },
    {"keyId": "reader", "keySecret": secret_of("reader"), "role": "reader"},
]
ROLE_KEYS = {"admin": "admin", "operator": "operator", "worker": "worker", "reader": "reader"}
"""A key id per role name."""


def write_keys(directory: Path) -> Path:
    path = directory / "api-keys.json"
    path.write_text(json.dumps(KEYS, indent=2))
    path.chmod(0o600)
    return path


def auth_settings(directory: Path) -> dict[str, str]:
    """The environment of a `cairn dev` with these keys."""
    return {"CAIRN_AUTH_KEYS_FILE": str(write_keys(directory)), "CAIRN_AUTH_TOKEN_SECRET": TOKEN_SECRET}


def expired_token(key_id: str, now_s: int) -> str:
    """A token the server would have issued for `key_id` an hour and a minute ago."""
    key: ApiKey | None = parse_keys(KEYS).get(key_id)
    assert key is not None
    signer = TokenSigner(signing_key(TOKEN_SECRET, b""), ttl_s=3600)
    return signer.issue(key, now_s - 3660)
