"""RetryPolicy: how an activity or a child workflow is retried, by the orchestrator, with
durable timers (Dapr's semantics: the first attempt counts, the delay grows by the backoff
coefficient, capped by max_retry_interval, and retries stop once their delays would pass
retry_timeout)."""

from __future__ import annotations

from datetime import timedelta


class RetryPolicy:
    def __init__(
        self,
        *,
        first_retry_interval: timedelta,
        max_number_of_attempts: int,
        backoff_coefficient: float | None = 1.0,
        max_retry_interval: timedelta | None = None,
        retry_timeout: timedelta | None = None,
    ) -> None:
        if first_retry_interval < timedelta(0):
            raise ValueError("first_retry_interval must be >= 0")
        if max_number_of_attempts < 1:
            raise ValueError("max_number_of_attempts must be >= 1")
        if backoff_coefficient is not None and backoff_coefficient < 1:
            raise ValueError("backoff_coefficient must be >= 1")
        if max_retry_interval is not None and max_retry_interval < timedelta(0):
            raise ValueError("max_retry_interval must be >= 0")
        if retry_timeout is not None and retry_timeout < timedelta(0):
            raise ValueError("retry_timeout must be >= 0")
        self._first = first_retry_interval
        self._attempts = max_number_of_attempts
        self._backoff = backoff_coefficient
        self._max_interval = max_retry_interval
        self._timeout = retry_timeout

    @property
    def first_retry_interval(self) -> timedelta:
        return self._first

    @property
    def max_number_of_attempts(self) -> int:
        return self._attempts

    @property
    def backoff_coefficient(self) -> float | None:
        return self._backoff

    @property
    def max_retry_interval(self) -> timedelta | None:
        return self._max_interval

    @property
    def retry_timeout(self) -> timedelta | None:
        return self._timeout

    def next_delay(self, attempts_made: int) -> timedelta | None:
        """The wait before attempt `attempts_made + 1`, or None when no attempt is left. Counted
        from the delays themselves, not the clock, so a replay decides the same."""
        if attempts_made >= self._attempts:
            return None
        factor = self._backoff or 1.0
        delays = []
        for attempt in range(1, attempts_made + 1):
            delay = self._first * factor ** (attempt - 1)
            if self._max_interval is not None:
                delay = min(delay, self._max_interval)
            delays.append(delay)
        if self._timeout is not None and sum(delays, timedelta(0)) >= self._timeout:
            return None
        return delays[-1] if delays else self._first
