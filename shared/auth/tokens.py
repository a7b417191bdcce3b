"""The tokens `POST /api/token` hands out: compact JWTs signed with HMAC-SHA256 (HS256).

A JWT because Orkes Conductor's tokens are JWTs and tools decode them; HS256 from the standard
library because the api is both the only issuer and the only verifier, so a shared secret is all
it needs (no key pairs, no dependency). Claims: `sub` the key id, `kfp` the key's fingerprint
(a rotated secret revokes its tokens), `iat` and `exp` in epoch seconds.

Replicas accept each other's tokens when they sign with the same key (`signing_key`): the
configured CAIRN_AUTH_TOKEN_SECRET, or else one derived from the keys file's content, which every
replica mounts from the same Secret.

Verification answers with Orkes's error codes, which conductor-python acts on: EXPIRED_TOKEN (a
good token past `exp`) and INVALID_TOKEN (anything else); on either it fetches a new token and
retries the request once.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from dataclasses import dataclass
from typing import Literal

from shared.auth.keys import ApiKey

MAX_TOKEN_LENGTH = 4096
_HEADER = {"alg": "HS256", "typ": "JWT"}
_DERIVATION = b"cairn api token signing key v1"


class TokenError(Exception):
    """A token the api does not accept; `code` is the `error` of the 401 answer."""

    def __init__(self, code: Literal["INVALID_TOKEN", "EXPIRED_TOKEN"], message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class Claims:
    key_id: str
    fingerprint: str
    issued_at: int
    expires_at: int


def signing_key(configured: str | None, keys_file_content: bytes) -> bytes:
    """The HMAC key tokens are signed with: from CAIRN_AUTH_TOKEN_SECRET when set, else from the
    keys file's bytes (so rewriting the file — adding, removing or rotating a key — also
    invalidates every token issued before, and clients fetch new ones)."""
    material = configured.encode() if configured is not None else keys_file_content
    return hmac.new(material, _DERIVATION, hashlib.sha256).digest()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class TokenSigner:
    def __init__(self, key: bytes, ttl_s: int) -> None:
        self._key = key
        self.ttl_s = ttl_s

    def _signature(self, signed_part: str) -> bytes:
        return hmac.new(self._key, signed_part.encode("ascii"), hashlib.sha256).digest()

    def issue(self, key: ApiKey, now_s: int) -> str:
        header = _b64(json.dumps(_HEADER, separators=(",", ":")).encode())
        claims = {"sub": key.key_id, "kfp": key.fingerprint, "iat": now_s, "exp": now_s + self.ttl_s}
        payload = _b64(json.dumps(claims, separators=(",", ":")).encode())
        signed = f"{header}.{payload}"
        return f"{signed}.{_b64(self._signature(signed))}"

    def verify(self, token: str, now_s: int) -> Claims:
        """The token's claims if this signer issued it and it has not expired; TokenError else.
        The signature is checked (in constant time) before anything in the token is believed."""
        invalid = TokenError("INVALID_TOKEN", "the token is not one this server issued; get a new one")
        if len(token) > MAX_TOKEN_LENGTH or not token.isascii() or token.count(".") != 2:
            raise invalid
        header, payload, signature = token.split(".")
        try:
            given = _unb64(signature)
        except (binascii.Error, ValueError):
            raise invalid from None
        if not hmac.compare_digest(given, self._signature(f"{header}.{payload}")):
            raise invalid
        try:
            if json.loads(_unb64(header)) != _HEADER:
                raise invalid
            claims = json.loads(_unb64(payload))
            parsed = Claims(
                key_id=str(claims["sub"]),
                fingerprint=str(claims["kfp"]),
                issued_at=int(claims["iat"]),
                expires_at=int(claims["exp"]),
            )
        except (binascii.Error, ValueError, TypeError, KeyError):
            raise invalid from None
        if now_s >= parsed.expires_at:
            raise TokenError("EXPIRED_TOKEN", "the token has expired; get a new one with POST /api/token")
        return parsed
