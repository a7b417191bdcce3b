"""Retry delays per Conductor's retryLogic."""

from shared.models.definitions import RetryLogic, TaskDef


def retry_delay_seconds(task_def: TaskDef, retry_count: int) -> int:
    """Delay before attempt `retry_count` (1 for the first retry).

    FIXED: retryDelaySeconds. EXPONENTIAL_BACKOFF: retryDelaySeconds * 2^(retry_count-1).
    LINEAR_BACKOFF: retryDelaySeconds * backoffScaleFactor * retry_count. Capped by
    maxRetryDelaySeconds when set.
    """
    base = task_def.retry_delay_seconds
    n = max(retry_count - 1, 0)
    match task_def.retry_logic:
        case RetryLogic.FIXED:
            delay = base
        case RetryLogic.EXPONENTIAL_BACKOFF:
            delay = base * (2**n)
        case RetryLogic.LINEAR_BACKOFF:
            delay = base * task_def.backoff_scale_factor * (n + 1)
    if task_def.max_retry_delay_seconds:
        delay = min(delay, task_def.max_retry_delay_seconds)
    return delay
