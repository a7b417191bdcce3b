"""Running a service process: logging, telemetry, adapters, and a clean stop on SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from collections.abc import Awaitable, Callable
from contextlib import suppress
from pathlib import Path

from services.probe import heartbeat_path
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


HEARTBEAT_INTERVAL_S = 5.0


def _touch(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch()


async def beat(path: Path, stop: asyncio.Event, interval_s: float = HEARTBEAT_INTERVAL_S) -> None:
    """Touch `path` every `interval_s` until `stop`, then remove it. The touch runs on the event
    loop on purpose (it takes microseconds): a wedged loop stops the beats, so a stale file means
    the process no longer makes progress."""
    warned = False
    try:
        while not stop.is_set():
            try:
                _touch(path)
            except OSError as error:
                if not warned:  # a read-only /tmp must not stop the service, only its health check
                    log.warning("cannot write heartbeat %s: %s", path, error)
                    warned = True
            await sleep_unless_stopped(stop, interval_s)
    finally:
        _remove(path)


def _remove(path: Path) -> None:
    path.unlink(missing_ok=True)


class StoppedWhileStarting(Exception):
    """SIGTERM arrived while the service was still waiting for a server: a clean exit (0), not
    a failure; an orchestrator stopping a pod that never came up must not wait out its grace."""


def startup_sleep(stop: asyncio.Event | None) -> Callable[[float], Awaitable[None]]:
    """The sleep between startup retries: cut short, with StoppedWhileStarting, by `stop`."""

    async def sleep(seconds: float) -> None:
        if stop is None:
            await asyncio.sleep(seconds)
            return
        await sleep_unless_stopped(stop, seconds)
        if stop.is_set():
            raise StoppedWhileStarting()

    return sleep


class StartupError(RuntimeError):
    """A service cannot start for a reason the operator can fix (a port in use, …): reported as
    one line and exit code 2, not a traceback."""


def event_loop_factory(settings: CairnSettings) -> Callable[[], asyncio.AbstractEventLoop]:
    """The loop a service runs on (CAIRN_EVENT_LOOP). uvloop by default: a step crosses the loop
    a dozen times (bus wake-ups, HTTP reads and writes, timers), and libuv's loop costs less CPU
    per turn than Python's selector loop (benchmarks/README.md, issue 16)."""
    if settings.event_loop == "uvloop":
        import uvloop

        return uvloop.new_event_loop
    return asyncio.new_event_loop


def run_service(
    name: str,
    main: Callable[[CairnSettings, asyncio.Event], Awaitable[None]],
    settings: CairnSettings | None = None,
    heartbeat: bool = False,
) -> None:
    """Run `main(settings, stop)` until SIGTERM/SIGINT sets `stop`; main must then wind down.
    With `heartbeat`, `heartbeat_path(name)` is touched meanwhile (`cairn health`)."""
    settings = settings or CairnSettings()
    setup_logging(settings.log_level)
    telemetry.configure(f"cairn-{name}", settings.otlp_endpoint)

    async def runner() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        log.info("cairn %s starting", name)
        beating = asyncio.create_task(beat(heartbeat_path(name), stop)) if heartbeat else None
        try:
            await main(settings, stop)
        finally:
            if beating is not None:
                stop.set()
                await beating
        log.info("cairn %s stopped", name)

    try:
        with suppress(KeyboardInterrupt), asyncio.Runner(loop_factory=event_loop_factory(settings)) as loop:
            loop.run(runner())
    except StoppedWhileStarting:
        log.info("cairn %s stopped while starting", name)
    except StartupError as error:
        log.error("cairn %s cannot start: %s", name, error)
        sys.exit(2)
