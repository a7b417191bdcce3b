"""The services' clock: epoch milliseconds, the unit of every time in Cairn's documents."""

import time


def now_ms() -> int:
    return int(time.time() * 1000)
