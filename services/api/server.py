"""Serving the api inside a service's event loop, stopped by the service's stop event."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Generator

import uvicorn
from fastapi import FastAPI

from services.runtime import StartupError


class _EmbeddedServer(uvicorn.Server):
    """uvicorn without its own signal handling: the service runtime owns SIGTERM/SIGINT and
    stops every component (api, decider, …) in order."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


def _listen(host: str, port: int) -> socket.socket:
    """A TCP listener created with proto=IPPROTO_TCP: asyncio sets TCP_NODELAY on accepted
    connections only when the listener says so, and without it every response (uvicorn writes
    headers and body separately) waits ~40 ms for the client's delayed ACK."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((host, port))
        listener.listen(2048)
    except OSError:
        listener.close()
        raise
    return listener


async def serve(
    app: FastAPI, host: str, port: int, stop: asyncio.Event, listening: asyncio.Event | None = None
) -> None:
    """Serve until `stop` is set, then finish open requests (bounded) and return.

    The socket is bound here, not by uvicorn, so a port in use is a clear StartupError rather
    than uvicorn's `sys.exit` inside the event loop."""
    try:
        listener = _listen(host, port)
    except OSError as error:
        raise StartupError(
            f"cannot listen on {host}:{port}: {error.strerror or error}; choose another with --port"
        ) from None
    config = uvicorn.Config(app, log_level="warning", lifespan="off", timeout_graceful_shutdown=5)
    server = _EmbeddedServer(config)
    serving = asyncio.create_task(server.serve(sockets=[listener]))
    stopping = asyncio.create_task(stop.wait())
    # uvicorn exposes start-up only as a flag
    while not server.started and not serving.done() and not stop.is_set():  # noqa: ASYNC110
        await asyncio.sleep(0.01)
    if server.started and listening is not None:
        listening.set()
    await asyncio.wait({serving, stopping}, return_when=asyncio.FIRST_COMPLETED)
    server.should_exit = True
    stopping.cancel()
    try:
        await serving
    finally:
        listener.close()
