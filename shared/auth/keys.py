"""The keys file (`CAIRN_AUTH_KEYS_FILE`) and checking a key id and secret against it.

The file is a JSON list; each entry is one key:

    [{"keyId": "ci", "keySecretSha256": "<64 hex digits>", "role": "operator"},
     {"keyId": "billing-workers", "keySecret": "<at least 16 characters>", "role": "worker",
      "taskTypes": ["charge_card", "send_receipt"]}]

`keySecretSha256` (the SHA-256 of the secret, hex) keeps the secret itself out of the file;
`keySecret` is accepted for convenience. Secrets are random strings (`cairn keys add` makes one),
not passwords, so one SHA-256 is the right cost: there is nothing to slow down a guess against.
Every comparison is constant-time (hmac.compare_digest), also for unknown key ids.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from shared.auth.roles import Role
from shared.models.definitions import TASK_NAME_PATTERN

MIN_SECRET_LENGTH = 16
SHA256_HEX = re.compile(r"^[0-9a-fA-F]{64}$")
# Compared against when a key id is unknown, so that answer takes as long as a wrong secret.
_NO_KEY = hashlib.sha256(b"cairn: no such key").digest()


class KeysFileError(ValueError):
    """A keys file Cairn cannot use, with one (where, what) pair per problem."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        self.problems = problems
        super().__init__("; ".join(f"{where}: {what}" for where, what in problems))


def secret_digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()


def new_secret() -> str:
    """A fresh random key secret (256 bits, URL-safe)."""
    return secrets.token_urlsafe(32)


@dataclass(frozen=True)
class ApiKey:
    """One key of the keys file, as the api checks it."""

    key_id: str
    role: Role
    secret_sha256: bytes
    task_types: frozenset[str] | None = None
    """For a worker: the only task types it may poll and report; None: every type."""

    @property
    def fingerprint(self) -> str:
        """Names this key's current secret in the tokens issued for it, so a token dies with the
        secret it was issued for (rotating a secret revokes its tokens)."""
        return hashlib.sha256(b"cairn key fingerprint:" + self.secret_sha256).hexdigest()[:16]

    def may_work_on(self, task_type: str) -> bool:
        return self.task_types is None or task_type in self.task_types


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=False)

    key_id: str = Field(alias="keyId", min_length=1, max_length=200)
    key_secret: str | None = Field(None, alias="keySecret", min_length=MIN_SECRET_LENGTH)
    key_secret_sha256: str | None = Field(None, alias="keySecretSha256", pattern=SHA256_HEX.pattern)
    role: Role
    task_types: list[str] | None = Field(None, alias="taskTypes", min_length=1)

    @model_validator(mode="after")
    def _one_secret_and_types_for_workers(self) -> Self:
        if (self.key_secret is None) == (self.key_secret_sha256 is None):
            raise ValueError("give exactly one of keySecret and keySecretSha256")
        if self.task_types is not None:
            if self.role is not Role.WORKER:
                raise ValueError(f"taskTypes limits a worker key; role {self.role.value} has no tasks")
            bad = [name for name in self.task_types if not re.match(TASK_NAME_PATTERN, name)]
            if bad:
                raise ValueError(f"taskTypes: not task type names: {bad}")
        return self

    def key(self) -> ApiKey:
        digest = (
            secret_digest(self.key_secret)
            if self.key_secret is not None
            else bytes.fromhex(self.key_secret_sha256 or "")
        )
        types = frozenset(self.task_types) if self.task_types is not None else None
        return ApiKey(self.key_id, self.role, digest, types)


_ENTRIES = TypeAdapter(list[_Entry])


def _where(location: tuple[int | str, ...]) -> str:
    text = ""
    for part in location:
        text += f"[{part}]" if isinstance(part, int) else f".{part}"
    return text or "(root)"


class KeyRing:
    """The keys of one keys file, by id."""

    def __init__(self, keys: list[ApiKey]) -> None:
        self.keys = {key.key_id: key for key in keys}

    def __len__(self) -> int:
        return len(self.keys)

    def get(self, key_id: str) -> ApiKey | None:
        return self.keys.get(key_id)

    def authenticate(self, key_id: str, secret: str) -> ApiKey | None:
        """The key when `secret` is its secret; None otherwise. An unknown id costs the same
        digest and comparison as a wrong secret, so timing tells nothing about which ids exist."""
        key = self.keys.get(key_id)
        given = secret_digest(secret)
        matches = hmac.compare_digest(given, key.secret_sha256 if key else _NO_KEY)
        return key if key is not None and matches else None


def parse_keys(data: Any) -> KeyRing:
    """A keys file's parsed JSON as a KeyRing, or KeysFileError naming each bad entry's field."""
    try:
        entries = _ENTRIES.validate_python(data)
    except ValidationError as error:
        problems = [
            (_where(tuple(item["loc"])), str(item["msg"]).removeprefix("Value error, "))
            for item in error.errors()
        ]
        raise KeysFileError(problems) from None
    if not entries:
        raise KeysFileError([("(root)", "no keys: the api would refuse every request")])
    seen: set[str] = set()
    problems = []
    for index, entry in enumerate(entries):
        if entry.key_id in seen:
            problems.append((f"[{index}].keyId", f"{entry.key_id!r} is given twice"))
        seen.add(entry.key_id)
    if problems:
        raise KeysFileError(problems)
    return KeyRing([entry.key() for entry in entries])


def parse_keys_text(text: str | bytes) -> KeyRing:
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise KeysFileError([("(root)", f"not JSON: {error}")]) from None
    return parse_keys(data)


def read_keys_file(path: Path) -> tuple[KeyRing, bytes]:
    """The file's keys and its raw content (from which token signing keys may be derived)."""
    try:
        content = path.read_bytes()
    except OSError as error:
        raise KeysFileError([("(file)", f"cannot read it: {error.strerror or error}")]) from None
    return parse_keys_text(content), content
