"""Authentication and authorisation of the api, in Orkes Conductor's scheme so Conductor's clients
work unchanged: `POST /api/token` with `{keyId, keySecret}` answers `{"token": ...}`, and every
other request carries that token in `X-Authorization`.

One dependency guards the whole app (`authorise`, given to FastAPI itself), so a route added later
cannot be left open by forgetting it; which permission a route needs comes from ROUTE_PERMISSIONS
below, and a route missing there needs the admin role. GET /health stays open (probes carry no
key), and so does POST /api/token. docs/deploy.md#security has the same table for people.

Without a keys file the api runs open, which `api_auth` allows only on a loopback address or when
the operator says `--insecure` (CAIRN_INSECURE).
"""

from __future__ import annotations

import ipaddress
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Depends, Request, Security
from fastapi.security import APIKeyHeader
from pydantic import Field

from services.api.context import ApiError
from services.runtime import StartupError
from shared.auth.keys import ApiKey, KeyRing, KeysFileError, read_keys_file
from shared.auth.roles import Permission, allows, roles_allowed
from shared.auth.tokens import TokenError, TokenSigner, signing_key
from shared.config import CairnSettings
from shared.models.runtime import CamelModel

log = logging.getLogger(__name__)

TOKEN_HEADER = "X-Authorization"
OPEN_ROUTES = frozenset({("GET", "/health"), ("POST", "/api/token")})

P = Permission
ROUTE_PERMISSIONS: dict[tuple[str, str], Permission] = {
    # metadata
    ("GET", "/api/metadata/taskdefs"): P.READ,
    ("GET", "/api/metadata/taskdefs/{name}"): P.READ,
    ("GET", "/api/metadata/workflow"): P.READ,
    ("GET", "/api/metadata/workflow/{name}"): P.READ,
    ("POST", "/api/metadata/taskdefs"): P.DEFINE,
    ("PUT", "/api/metadata/taskdefs"): P.DEFINE,
    ("DELETE", "/api/metadata/taskdefs/{name}"): P.DEFINE,
    ("POST", "/api/metadata/workflow"): P.DEFINE,
    ("PUT", "/api/metadata/workflow"): P.DEFINE,
    ("DELETE", "/api/metadata/workflow/{name}/{version}"): P.DEFINE,
    # workflow executions
    ("POST", "/api/workflow"): P.START,
    ("POST", "/api/workflow/{name}"): P.START,
    ("POST", "/api/workflow/execute/{name}/{version}"): P.START,
    ("GET", "/api/workflow/{workflow_id}"): P.READ,
    ("GET", "/api/workflow/running/{name}"): P.READ,
    ("GET", "/api/workflow/search"): P.READ,
    ("GET", "/api/workflow/{name}/correlated/{correlation_id}"): P.READ,
    ("POST", "/api/workflow/{name}/correlated"): P.READ,
    ("DELETE", "/api/workflow/{workflow_id}"): P.TERMINATE,
    ("DELETE", "/api/workflow/{workflow_id}/remove"): P.REMOVE,
    ("PUT", "/api/workflow/{workflow_id}/pause"): P.OPERATE,
    ("PUT", "/api/workflow/{workflow_id}/resume"): P.OPERATE,
    ("POST", "/api/workflow/{workflow_id}/restart"): P.OPERATE,
    ("POST", "/api/workflow/{workflow_id}/rerun"): P.OPERATE,
    ("POST", "/api/workflow/{workflow_id}/retry"): P.OPERATE,
    ("PUT", "/api/workflow/{workflow_id}/skiptask/{task_reference_name}"): P.OPERATE,
    ("POST", "/api/workflow/{workflow_id}/events/{name}"): P.SIGNAL,
    ("GET", "/api/workflow/{workflow_id}/history"): P.READ,
    ("POST", "/api/workflow/code/{app}/runtimes"): P.WORK,
    ("PUT", "/api/workflow/bulk/pause"): P.OPERATE,
    ("PUT", "/api/workflow/bulk/resume"): P.OPERATE,
    ("POST", "/api/workflow/bulk/restart"): P.OPERATE,
    ("POST", "/api/workflow/bulk/retry"): P.OPERATE,
    ("POST", "/api/workflow/bulk/terminate"): P.TERMINATE,
    # tasks
    ("GET", "/api/tasks/poll/{task_type}"): P.WORK,
    ("GET", "/api/tasks/poll/batch/{task_type}"): P.WORK,
    ("POST", "/api/tasks"): P.WORK,
    ("POST", "/api/tasks/update-v2"): P.WORK,
    ("POST", "/api/tasks/{workflow_id}/{task_ref_name}/{status}"): P.SIGNAL,
    ("GET", "/api/tasks/{task_id}"): P.READ,
    ("GET", "/api/tasks/search"): P.READ,
    # event handlers
    ("POST", "/api/event"): P.DEFINE,
    ("PUT", "/api/event"): P.DEFINE,
    ("GET", "/api/event"): P.READ,
    ("GET", "/api/event/{event}"): P.READ,
    ("DELETE", "/api/event/{name}"): P.DEFINE,
    # dead letters: the original messages, payloads included, and resending them
    ("GET", "/api/deadletters"): P.DEAD_LETTERS,
    ("GET", "/api/deadletters/{letter_id}"): P.DEAD_LETTERS,
    ("POST", "/api/deadletters/{letter_id}/replay"): P.DEAD_LETTERS,
}


def permission_for(method: str, path: str) -> Permission:
    """What a route needs; a route nobody mapped is admin-only, never open. `path` is the
    route's own template (`scope["route"].path`), so routers carry their prefix themselves
    (`APIRouter(prefix=...)`) and are included without one (tests/unit/test_auth_guard.py)."""
    return ROUTE_PERMISSIONS.get((method, path), Permission.ADMINISTER)


class KeysFile:
    """The keys file and the token signer derived from it, re-read when the file changes (a
    Kubernetes Secret updated in place, a key added or revoked), so keys change without a
    restart. A change that does not parse is logged and the keys in use are kept."""

    def __init__(self, path: Path, token_secret: str | None, ttl_s: int) -> None:
        self.path = path
        self._token_secret = token_secret
        self._ttl_s = ttl_s
        self._seen = self._stat()
        self.ring, self.signer = self._load()

    def _stat(self) -> tuple[int, int, int] | None:
        try:
            stat = os.stat(self.path)
        except OSError:
            return None
        return stat.st_ino, stat.st_mtime_ns, stat.st_size

    def _load(self) -> tuple[KeyRing, TokenSigner]:
        ring, content = read_keys_file(self.path)
        return ring, TokenSigner(signing_key(self._token_secret, content), self._ttl_s)

    def current(self) -> tuple[KeyRing, TokenSigner]:
        """The keys and signer in force: one stat() per call to notice a changed file."""
        seen = self._stat()
        if seen != self._seen and seen is not None:
            self._seen = seen
            try:
                self.ring, self.signer = self._load()
                log.info("api keys reloaded from %s: %d keys", self.path, len(self.ring))
            except KeysFileError as error:
                log.error(
                    "api keys file %s changed but cannot be used (%s); keeping the old keys", self.path, error
                )
        return self.ring, self.signer


class ApiAuth:
    """The api's keys, the tokens it issues for them, and who a token belongs to."""

    def __init__(self, keys: KeysFile, clock: Callable[[], float] = time.time) -> None:
        self.keys = keys
        self._clock = clock

    def issue(self, key_id: str, secret: str) -> str | None:
        """A token for the key, or None when the id and secret are not a key's."""
        ring, signer = self.keys.current()
        key = ring.authenticate(key_id, secret)
        return signer.issue(key, int(self._clock())) if key is not None else None

    def caller(self, token: str) -> ApiKey:
        """The key a token was issued for, if that key still exists with the same secret."""
        ring, signer = self.keys.current()
        claims = signer.verify(token, int(self._clock()))
        key = ring.get(claims.key_id)
        if key is None or key.fingerprint != claims.fingerprint:
            raise TokenError("INVALID_TOKEN", f"key {claims.key_id!r} was removed or its secret changed")
        return key


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to any interface


def api_auth(settings: CairnSettings, clock: Callable[[], float] = time.time) -> ApiAuth | None:
    """The api's authentication from settings; None: open. Refuses (StartupError) a keys file it
    cannot use, and an open api on an address other machines can reach unless CAIRN_INSECURE."""
    if settings.auth_keys_file:
        path = Path(settings.auth_keys_file)
        secret = settings.auth_token_secret.get_secret_value() if settings.auth_token_secret else None
        try:
            return ApiAuth(KeysFile(path, secret, settings.auth_token_ttl_s), clock)
        except KeysFileError as error:
            raise StartupError(f"CAIRN_AUTH_KEYS_FILE {path}: {error}") from None
    if is_loopback(settings.api_host) or settings.insecure:
        return None
    raise StartupError(
        f"the api would listen on {settings.api_host}:{settings.api_port} without API keys, open to anyone "
        "who reaches it: set CAIRN_AUTH_KEYS_FILE (docs/deploy.md#security), listen on 127.0.0.1, or pass "
        "--insecure (CAIRN_INSECURE=true) to run it open anyway"
    )


def describe(auth: ApiAuth | None, settings: CairnSettings) -> str:
    """One line for logs and `cairn dev`'s banner: is anyone let in without a key?"""
    if auth is not None:
        return f"on: {len(auth.keys.ring)} keys from {auth.keys.path}"
    if is_loopback(settings.api_host):
        return f"off: no CAIRN_AUTH_KEYS_FILE, so {settings.api_host} only"
    return f"OFF on {settings.api_host} (--insecure): anyone who reaches it may do anything"


_token_header = APIKeyHeader(
    name=TOKEN_HEADER,
    auto_error=False,
    description="A token from POST /api/token (when the server has keys).",
)


def _unauthorised(error: TokenError) -> ApiError:
    return ApiError(401, error.message, error=error.code)


def _authenticate(auth: ApiAuth, token: str | None) -> ApiKey:
    if not token:
        raise ApiError(
            401,
            f"no token: get one with POST /api/token {{keyId, keySecret}} and send it in {TOKEN_HEADER}",
            error="INVALID_TOKEN",
        )
    try:
        return auth.caller(token)
    except TokenError as error:
        raise _unauthorised(error) from None


def _bearer(request: Request) -> str | None:
    """`Authorization: Bearer <token>` as well, for curl and generic HTTP tools."""
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    return value.strip() if scheme.lower() == "bearer" else None


async def authorise(request: Request, token: Annotated[str | None, Security(_token_header)]) -> None:
    """Every route's guard: 401 without a valid token, 403 when the key's role lacks the route's
    permission (or a worker key polls or reports a task type it is not for). The key is kept on
    `request.state.caller` for routes that check more (`caller`)."""
    auth: ApiAuth | None = request.app.state.cairn.auth
    if auth is None:
        return
    path = getattr(request.scope.get("route"), "path", request.url.path)
    if (request.method, path) in OPEN_ROUTES:
        return
    key = _authenticate(auth, token or _bearer(request))
    permission = permission_for(request.method, path)
    if not allows(key.role, permission):
        who = ", ".join(role.value for role in roles_allowed(permission))
        raise ApiError(
            403,
            f"key {key.key_id!r} (role {key.role.value}) may not {request.method} {path}: "
            f"it needs permission {permission.value} (role {who})",
        )
    task_type = request.path_params.get("task_type")
    if permission is Permission.WORK and task_type is not None:
        ensure_may_work_on(key, task_type)
    request.state.caller = key


async def caller(request: Request) -> ApiKey | None:
    """The key of the request (None when the api runs open)."""
    key: ApiKey | None = getattr(request.state, "caller", None)
    return key


Caller = Annotated[ApiKey | None, Depends(caller)]


def ensure_may_work_on(key: ApiKey | None, task_type: str) -> None:
    if key is not None and not key.may_work_on(task_type):
        allowed = ", ".join(sorted(key.task_types or ()))
        raise ApiError(403, f"key {key.key_id!r} works only on task types {allowed}, not {task_type!r}")


class TokenRequest(CamelModel):
    key_id: str = Field(min_length=1, max_length=200)
    key_secret: str = Field(min_length=1, max_length=1000)


token_router = APIRouter(tags=["token"])


@token_router.post("/api/token")
async def token(request: Request, body: TokenRequest) -> dict[str, str]:
    """Orkes's token endpoint: a token for a key id and secret, valid CAIRN_AUTH_TOKEN_TTL_S. 404
    when the api runs without keys, which Conductor's clients take to mean "no auth here"."""
    auth: ApiAuth | None = request.app.state.cairn.auth
    if auth is None:
        raise ApiError(404, "this api runs without keys (no CAIRN_AUTH_KEYS_FILE): no token is needed")
    issued = auth.issue(body.key_id, body.key_secret)
    if issued is None:
        # No `error` code here: conductor-python renews its token on INVALID_TOKEN, and a renewal
        # that answered INVALID_TOKEN would ask again, and again.
        raise ApiError(401, f"no key {body.key_id!r} with that secret")
    return {"token": issued}
