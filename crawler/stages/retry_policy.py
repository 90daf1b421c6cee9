"""Whether a failed fetch is tried again, and when: the one place retry decisions are made."""

from __future__ import annotations

import random
from dataclasses import dataclass

from crawler import errors
from crawler.config.settings import Settings
from crawler.fetch.client import FetchResult
from crawler.stages.ratecontrol import backoff, parse_retry_after


def is_retryable(reason: str | None) -> bool:
    cls = errors.REASONS.get(reason or "")
    return cls is not None and issubclass(cls, errors.Retryable)


# Scrapy's RETRY_HTTP_CODES: what a server answers for a passing failure (408: it timed out
# waiting for the request; 522, 524: a CDN's origin did not answer).
RETRIED_STATUSES = frozenset({408, 429, 500, 502, 503, 504, 522, 524})
# The reasons that are a status's own (not a body refused or cut off whatever the status).
STATUS_ERRORS = frozenset({errors.HTTP4xx.reason, errors.HTTP5xx.reason, errors.HTTP429.reason})


@dataclass(frozen=True)
class RetryPolicy:
    """A job's retry rules: retryable failures wait an exponential backoff with jitter (at
    least Retry-After on 429/503, or until robots.txt may be asked again), up to
    ``max_attempts`` tries in all."""

    max_attempts: int
    base: float
    cap: float

    @classmethod
    def of(cls, s: Settings) -> RetryPolicy:
        return cls(max_attempts=s.max_attempts, base=s.retry_base, cap=s.max_delay * 10)

    @staticmethod
    def retries(result: FetchResult) -> bool:
        """Whether the result is a failure worth another try: a server's answer by its status,
        as Scrapy's RETRY_HTTP_CODES has it (a 501 or 505 says the same every time), anything
        else by its reason."""
        if result.status is not None and result.status >= 400 and result.error in STATUS_ERRORS:
            return result.status in RETRIED_STATUSES
        return is_retryable(result.error)  # a 503 cut off as too_large is final, as its reason says

    def wait(self, attempts: int, result: FetchResult, robots_wait: float) -> float | None:
        """Seconds before the next try of a URL fetched ``attempts + 1`` times so far with
        ``result``; None if the result is final (success, a permanent failure, or no tries
        left). ``robots_wait``: seconds until its origin's robots.txt may be asked again."""
        if not self.retries(result) or attempts + 1 >= self.max_attempts:
            return None
        retry_after = parse_retry_after(result.header("retry-after")) if result.status in (429, 503) else None
        if result.error == errors.RobotsUnavailable.reason:
            retry_after = max(0.0, robots_wait)
        return backoff(attempts, base=self.base, cap=self.cap, retry_after=retry_after)


# -- a store that is down -------------------------------------------------------------------
# It must not lose pages nor turn them into refetches: the pages a waiting store task holds keep
# their leases (renewed past its next try, see ``stages.hold_for_retry``), and they keep counting
# against the job's concurrency, so dispatch pauses instead of fetching pages that could not be
# stored either.

STORE_BASE = 1.0  # seconds before the first retry; doubles each time
STORE_CAP = 30.0  # seconds between tries at most: an outage's end is noticed within this


def store_cap(s: Settings) -> float:
    # A retry waits in the worker as a countdown message, unacknowledged: it must be sent on
    # well before Redis would deliver it again to someone else (the visibility timeout).
    return max(STORE_BASE, min(STORE_CAP, s.visibility_timeout / 4))


def store_wait(attempt: int, s: Settings, rng: random.Random | None = None) -> float | None:
    """Seconds before try ``attempt + 2`` of a store task whose ``attempt + 1`` tries failed,
    or None once the waits so far (without jitter) add up to ``store_retry_for``."""
    c = store_cap(s)
    waited = sum(min(c, STORE_BASE * 2**k) for k in range(attempt))
    if waited >= s.store_retry_for:
        return None
    return backoff(attempt, base=STORE_BASE, cap=c, rng=rng)
