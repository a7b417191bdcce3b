"""Tokens: issued and verified by the same signing key, refused with Orkes's reason otherwise."""

from __future__ import annotations

import base64
import json

import pytest

from shared.auth.keys import parse_keys
from shared.auth.tokens import TokenError, TokenSigner, signing_key

KEY = parse_keys([{"keyId": "ops", "keySecret": "s3cret-s3cret-s3cret", "role": "operator"}]).get("ops")
assert KEY is not None
NOW = 1_800_000_000
SIGNER = TokenSigner(signing_key(None, b"[the keys file]"), ttl_s=3600)


def code_of(signer: TokenSigner, token: str, now: int = NOW) -> str:
    with pytest.raises(TokenError) as caught:
        signer.verify(token, now)
    return caught.value.code


def part(data: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


def test_a_token_carries_its_key_and_lifetime() -> None:
    token = SIGNER.issue(KEY, NOW)
    claims = SIGNER.verify(token, NOW + 3599)
    assert (claims.key_id, claims.fingerprint) == ("ops", KEY.fingerprint)
    assert (claims.issued_at, claims.expires_at) == (NOW, NOW + 3600)
    header = json.loads(base64.urlsafe_b64decode(token.split(".")[0] + "=="))
    assert header == {"alg": "HS256", "typ": "JWT"}  # a JWT, as Orkes's tokens are


def test_past_its_expiry_it_is_expired() -> None:
    token = SIGNER.issue(KEY, NOW)
    assert code_of(SIGNER, token, NOW + 3600) == "EXPIRED_TOKEN"


def test_another_signing_key_does_not_accept_it() -> None:
    token = SIGNER.issue(KEY, NOW)
    other = TokenSigner(signing_key(None, b"[another keys file]"), ttl_s=3600)
    assert code_of(other, token) == "INVALID_TOKEN"
    # An expired token from elsewhere is invalid, not expired: the signature is checked first.
    assert code_of(other, token, NOW + 10_000) == "INVALID_TOKEN"


def test_the_configured_secret_wins_over_the_file() -> None:
    assert signing_key("x" * 32, b"a") == signing_key("x" * 32, b"b")
    assert signing_key(None, b"a") != signing_key(None, b"b")
    assert signing_key("x" * 32, b"a") != signing_key(None, b"a")


@pytest.mark.parametrize(
    "mangle",
    [
        lambda t: t[:-2] + ("AA" if not t.endswith("AA") else "BB"),  # signature
        lambda t: ".".join(
            [t.split(".")[0], part({"sub": "admin", "kfp": "x", "iat": 0, "exp": 2**40}), t.split(".")[2]]
        ),
        lambda t: ".".join([part({"alg": "none", "typ": "JWT"}), t.split(".")[1], ""]),
        lambda t: t + ".x",
        lambda t: "",
        lambda t: "not a token",
        lambda t: "a.b.c",
        lambda t: "é.é.é",
        lambda t: "é.é.AAAA",
        lambda t: "x" * 5000,
    ],
    ids=[
        "signature",
        "payload",
        "alg-none",
        "four-parts",
        "empty",
        "words",
        "garbage",
        "non-ascii",
        "non-ascii-head",
        "huge",
    ],
)
def test_anything_tampered_with_is_invalid(mangle: object) -> None:
    token = SIGNER.issue(KEY, NOW)
    assert code_of(SIGNER, mangle(token)) == "INVALID_TOKEN"  # type: ignore[operator]


def test_a_well_signed_token_with_bad_claims_is_invalid() -> None:
    header = part({"alg": "HS256", "typ": "JWT"})
    payload = part({"sub": "ops"})
    signed = f"{header}.{payload}"
    signature = SIGNER._signature(signed)
    token = f"{signed}.{base64.urlsafe_b64encode(signature).rstrip(b'=').decode()}"
    assert code_of(SIGNER, token) == "INVALID_TOKEN"
