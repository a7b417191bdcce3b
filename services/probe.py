"""The container health probe: `python -m services.probe [service]` (also `cairn health`).

Docker's HEALTHCHECK and Kubernetes' exec probes run this every few seconds in every pod, so it
imports only the standard library and the settings: the full `cairn` CLI costs about a second of
CPU per start, which a probe would pay forever. Healthy means the service's heartbeat file (touched
by its event loop, see services.runtime.beat) is fresh and, for the api, GET /health answers 200.
Exit 0 healthy, 1 unhealthy, 2 for a bad argument.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

# `cairn run` knows these (services.assembly.SERVICES; tests/deploy/test_health.py keeps them equal).
SERVICES = ("api", "decider", "scheduler", "timer", "sweeper", "system-worker", "events")
DEFAULT_MAX_AGE_S = 30.0


class Unhealthy(Exception):
    """The reason a probe fails, for the person reading `docker inspect` or `kubectl describe`."""


def heartbeat_path(name: str) -> Path:
    """The file a `cairn run <name>` process touches while its event loop runs."""
    return Path(tempfile.gettempdir()) / "cairn-heartbeat" / name


def check(service: str | None, max_age_s: float = DEFAULT_MAX_AGE_S) -> str:
    """The healthy service's name; raises Unhealthy saying why not. With no `service`, the one
    whose heartbeat is here (one per container)."""
    if service is None:
        running = [name for name in SERVICES if heartbeat_path(name).exists()]
        if not running:
            raise Unhealthy("no cairn service is running here (no heartbeat file)")
        if len(running) > 1:
            raise Unhealthy(f"{', '.join(running)} have a heartbeat here: name the service to check")
        service = running[0]
    elif service not in SERVICES:
        raise ValueError(f"unknown service {service!r}; choose one of: {', '.join(SERVICES)}")
    try:
        age = time.time() - heartbeat_path(service).stat().st_mtime
    except OSError:
        raise Unhealthy(f"{service} is not running (no {heartbeat_path(service)})") from None
    if age > max_age_s:
        raise Unhealthy(f"{service}'s last heartbeat was {age:.0f}s ago")
    if service == "api":
        _check_api()
    return service


def _check_api() -> None:
    from shared.config import CairnSettings

    settings = CairnSettings()
    host = "127.0.0.1" if settings.api_host in ("", "0.0.0.0", "::") else settings.api_host
    url = f"http://{f'[{host}]' if ':' in host else host}:{settings.api_port}/health"
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            status = response.status
    except urllib.error.HTTPError as error:
        status = error.code
    except (OSError, ValueError) as error:
        raise Unhealthy(f"GET {url}: {error}") from None
    if status != 200:
        raise Unhealthy(f"GET {url} answered {status}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m services.probe", description=__doc__.split("\n\n")[0])
    parser.add_argument("service", nargs="?", help="service to check; default: the one running here")
    parser.add_argument(
        "--max-age", type=float, default=DEFAULT_MAX_AGE_S, help="seconds a heartbeat stays fresh"
    )
    args = parser.parse_args(argv)
    try:
        healthy = check(args.service, args.max_age)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except Unhealthy as error:
        print(f"unhealthy: {error}", file=sys.stderr)
        return 1
    print(f"{healthy} healthy")
    return 0


if __name__ == "__main__":
    sys.exit(main())
