"""Retry delays per Conductor's retryLogic, with jitter that decisions can reproduce."""

import hashlib

from shared.models.definitions import RetryLogic, TaskDef
from shared.models.limits import JAVA_INT_MAX

MAX_EXPONENT = 31
"""2**31 times any delay is past any sensible wait; a larger exponent would only make Python
build a huge integer (retryCount may be up to 2**31 - 1)."""


def retry_delay_seconds(task_def: TaskDef, retry_count: int) -> int:
    """Delay before attempt `retry_count` (1 for the first retry).

    FIXED: retryDelaySeconds. EXPONENTIAL_BACKOFF: retryDelaySeconds * 2^(retry_count-1).
    LINEAR_BACKOFF: retryDelaySeconds * backoffScaleFactor * retry_count. Capped by
    maxRetryDelaySeconds when set, and by 2**31 - 1 seconds (68 years) always, so a deadline
    stays a date.
    """
    base = task_def.retry_delay_seconds
    n = max(retry_count - 1, 0)
    match task_def.retry_logic:
        case RetryLogic.FIXED:
            delay = base
        case RetryLogic.EXPONENTIAL_BACKOFF:
            delay = base * (2 ** min(n, MAX_EXPONENT))
        case RetryLogic.LINEAR_BACKOFF:
            delay = base * task_def.backoff_scale_factor * (n + 1)
    if task_def.max_retry_delay_seconds:
        delay = min(delay, task_def.max_retry_delay_seconds)
    return min(delay, JAVA_INT_MAX)


def retry_delay_ms(task_def: TaskDef, retry_count: int, jitter_seed: str) -> int:
    """The delay in milliseconds, plus backoffJitterMs of jitter when set.

    The jitter is drawn from `jitter_seed` (the new execution's id, itself derived from the
    workflow id, the task reference and the attempt), not from a random source: replaying a
    decision gives the same delay, and retries of many workflows still spread out."""
    delay = retry_delay_seconds(task_def, retry_count) * 1000
    if task_def.backoff_jitter_ms:
        digest = hashlib.sha256(jitter_seed.encode()).digest()
        delay += int.from_bytes(digest[:8], "big") % (task_def.backoff_jitter_ms + 1)
    return delay
