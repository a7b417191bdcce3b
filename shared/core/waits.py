"""When a timed WAIT ends: Conductor's `duration` ("1 day 2 hours", "30m", "45 seconds") and
`until` ("2026-12-01 09:30", "2026-12-01 09:30 UTC", ISO 8601). Pure: the caller hands `now`.

A small grammar, so a regular expression is the honest parser; the standard library parses the
dates.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone

from shared.models.limits import JAVA_INT_MAX, MAX_TIME_MS

MAX_WAIT_MS = JAVA_INT_MAX * 1000
"""The longest `duration` (68 years, as any seconds field): now plus it is always a date."""

_DURATION = re.compile(
    r"^\s*(?:(?P<days>\d+)\s*(?:days?|d)\b)?"
    r"\s*(?:(?P<hours>\d+)\s*(?:hours?|hrs?|h)\b)?"
    r"\s*(?:(?P<minutes>\d+)\s*(?:minutes?|mins?|m)\b)?"
    r"\s*(?:(?P<seconds>\d+)\s*(?:seconds?|secs?|s)\b)?\s*$",
    re.IGNORECASE,
)
_UNTIL_FORMATS = ("%Y-%m-%d %H:%M", "%Y-%m-%d %H:%M:%S", "%Y-%m-%d")
DURATION_HELP = 'a duration such as "30s", "5 minutes" or "1d 2h 30m"'
UNTIL_HELP = 'a time such as "2026-12-01 09:30 UTC", "2026-12-01 09:30 +01:00" or ISO 8601'


class WaitSpecError(ValueError):
    """A `duration` or `until` that cannot be read; the message says what is expected."""


def parse_duration_ms(text: object) -> int:
    match = _DURATION.match(text) if isinstance(text, str) else None
    if match is None or not any(match.groupdict().values()):
        raise WaitSpecError(f"duration {text!r} is not {DURATION_HELP}")
    parts = {unit: int(value or 0) for unit, value in match.groupdict().items()}
    try:
        milliseconds = int(timedelta(**parts).total_seconds() * 1000)
    except OverflowError:
        milliseconds = MAX_TIME_MS + 1
    if milliseconds > MAX_WAIT_MS:
        raise WaitSpecError(f"duration {text!r} is longer than {MAX_WAIT_MS // 86_400_000} days")
    return milliseconds


def parse_until_ms(text: object) -> int:
    """Epoch ms of an `until`; a time without a zone is UTC (the engine's only clock)."""
    if not isinstance(text, str) or not text.strip():
        raise WaitSpecError(f"until {text!r} is not {UNTIL_HELP}")
    value = text.strip()
    zone: timezone = UTC
    for suffix in (" UTC", " GMT", " Z"):
        if value.upper().endswith(suffix):
            value = value[: -len(suffix)]
    offset = re.search(r"\s([+-]\d{2}):?(\d{2})$", value)
    if offset:
        sign = -1 if offset.group(1).startswith("-") else 1
        hours, minutes = abs(int(offset.group(1))), int(offset.group(2))
        zone = timezone(sign * timedelta(hours=hours, minutes=minutes))
        value = value[: offset.start()]
    for pattern in _UNTIL_FORMATS:
        try:
            moment = datetime.strptime(value, pattern).replace(tzinfo=zone)
            return _a_date(int(moment.timestamp() * 1000), text)
        except ValueError:
            continue
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise WaitSpecError(f"until {text!r} is not {UNTIL_HELP}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return _a_date(int(moment.timestamp() * 1000), text)


def _a_date(epoch_ms: int, text: str) -> int:
    if epoch_ms > MAX_TIME_MS:
        raise WaitSpecError(f"until {text!r} is after the end of year 9999 (UTC)")
    return max(epoch_ms, 0)  # a time already past ends the WAIT at once


def wait_ends_at(parameters: dict[str, object], now: int) -> int | None:
    """When a WAIT with these (evaluated) inputs ends by itself; None waits for a signal."""
    if "duration" in parameters and "until" in parameters:
        raise WaitSpecError("a WAIT takes either duration or until, not both")
    if "duration" in parameters:
        return now + parse_duration_ms(parameters["duration"])
    if "until" in parameters:
        return parse_until_ms(parameters["until"])
    return None
