"""Running a service process: logging, telemetry, adapters, and a clean stop on SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from collections.abc import Awaitable, Callable
from contextlib import suppress

from shared import telemetry
from shared.config import CairnSettings

log = logging.getLogger("cairn")


def setup_logging(level: str) -> None:
    logging.basicConfig(level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("aiokafka", "faststream", "pymongo", "httpx", "httpcore", "uvicorn"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


async def sleep_unless_stopped(stop: asyncio.Event, seconds: float) -> None:
    """Sleep for `seconds`, waking at once when `stop` is set (periodic loops stop promptly)."""
    with suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)


class StartupError(RuntimeError):
    """A service cannot start for a reason the operator can fix (a port in use, …): reported as
    one line and exit code 2, not a traceback."""


def run_service(
    name: str,
    main: Callable[[CairnSettings, asyncio.Event], Awaitable[None]],
    settings: CairnSettings | None = None,
) -> None:
    """Run `main(settings, stop)` until SIGTERM/SIGINT sets `stop`; main must then wind down."""
    settings = settings or CairnSettings()
    setup_logging(settings.log_level)
    telemetry.configure(f"cairn-{name}", settings.otlp_endpoint)

    async def runner() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        log.info("cairn %s starting", name)
        await main(settings, stop)
        log.info("cairn %s stopped", name)

    try:
        with suppress(KeyboardInterrupt):
            asyncio.run(runner())
    except StartupError as error:
        log.error("cairn %s cannot start: %s", name, error)
        sys.exit(2)
