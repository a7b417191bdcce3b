"""A bound on request bodies, enforced while they arrive: a client cannot make the api buffer
more than CAIRN_API_MAX_REQUEST_BYTES, whether it announces the size (Content-Length) or not
(chunked). Past it the answer is 413 in Conductor's error body, before anything is parsed."""

from __future__ import annotations

import json

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from services.api.conductor import error_json


class BodyTooLargeError(HTTPException):
    """Raised from `receive` while a route reads its body: FastAPI passes HTTPExceptions on to
    the error handlers (any other exception there would become "error parsing the body")."""

    def __init__(self, max_bytes: int) -> None:
        super().__init__(413, _too_large(max_bytes))


def _too_large(max_bytes: int) -> str:
    return f"request body larger than {max_bytes} bytes (CAIRN_API_MAX_REQUEST_BYTES)"


class BodyLimit:
    """Pure ASGI middleware (a BaseHTTPMiddleware would copy every body once more)."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        announced = dict(scope.get("headers") or []).get(b"content-length")
        if announced is not None and announced.isdigit() and int(announced) > self.max_bytes:
            await self._refuse(send)
            return
        seen = 0
        started = False

        async def counting_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise BodyTooLargeError(self.max_bytes)
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counting_receive, tracking_send)
        except BodyTooLargeError:
            if not started:
                await self._refuse(send)

    async def _refuse(self, send: Send) -> None:
        body = json.dumps(error_json(413, _too_large(self.max_bytes))).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
