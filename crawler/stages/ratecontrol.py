"""Per-host rate control and retry timing: pure functions, no I/O.

The adaptive delay is per-server frequency control (as in Scrapy's AutoThrottle): a healthy
host's delay moves halfway towards its response time each response, so
a server that takes 2 s per page gets about one request in flight half the time; 429 and 503
double it (or honour Retry-After); it never falls below the configured delay or the host's
Crawl-delay, and never rises above ``max_delay``.
"""

from __future__ import annotations

import random
import time
from email.utils import parsedate_to_datetime

SLOW_DOWN = (429, 503)


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or HTTP-date); None if absent or
    unreadable; never negative."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    return max(0.0, when - (time.time() if now is None else now))


def next_delay(current: float, *, floor: float, latency: float, status: int | None,
               retry_after: float | None, max_delay: float) -> float:
    if status in SLOW_DOWN or retry_after is not None:
        wanted = max(current * 2, 1.0, retry_after or 0.0)
    else:
        wanted = (current + latency) / 2
    return min(max_delay, max(floor, wanted))


def backoff(attempt: int, *, base: float, cap: float, retry_after: float | None = None,
            rng: random.Random | None = None) -> float:
    """Seconds before retry number ``attempt + 1``: exponential with jitter (0.5x to 1.5x), at
    least Retry-After, at most ``cap``."""
    r = rng or random
    wait = base * (2**attempt) * (0.5 + r.random())
    return float(min(cap, max(wait, retry_after or 0.0)))
