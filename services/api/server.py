"""Serving the api inside a service's event loop, stopped by the service's stop event."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Generator

import uvicorn
from fastapi import FastAPI


class _EmbeddedServer(uvicorn.Server):
    """uvicorn without its own signal handling: the service runtime owns SIGTERM/SIGINT and
    stops every component (api, decider, …) in order."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


async def serve(app: FastAPI, host: str, port: int, stop: asyncio.Event) -> None:
    """Serve until `stop` is set, then finish open requests (bounded) and return."""
    config = uvicorn.Config(
        app, host=host, port=port, log_level="warning", lifespan="off", timeout_graceful_shutdown=5
    )
    server = _EmbeddedServer(config)
    serving = asyncio.create_task(server.serve())
    stopping = asyncio.create_task(stop.wait())
    await asyncio.wait({serving, stopping}, return_when=asyncio.FIRST_COMPLETED)
    server.should_exit = True
    stopping.cancel()
    try:
        await serving
    except SystemExit:  # uvicorn exits when it cannot bind
        raise OSError(
            f"cannot listen on {host}:{port} (address in use?); choose another with --port"
        ) from None


async def wait_until_serving(
    app_server_task: asyncio.Task[None], host: str, port: int, within_s: float = 10
) -> None:
    """Wait until the port accepts connections (or the server task died)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    while loop.time() < deadline:
        if app_server_task.done():
            app_server_task.result()
            raise RuntimeError("the api server stopped during start-up")
        try:
            _, writer = await asyncio.open_connection(host, port)
        except OSError:
            await asyncio.sleep(0.05)
            continue
        writer.close()
        return
    raise TimeoutError(f"the api did not listen on {host}:{port} within {within_s:.0f}s")
