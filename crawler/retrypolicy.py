"""Whether a failed fetch is tried again, and when: the one place retry decisions are made."""

from __future__ import annotations

from dataclasses import dataclass

from crawler import errors
from crawler.fetch.client import FetchResult
from crawler.frontier.ratecontrol import backoff, parse_retry_after
from crawler.settings import Settings


def is_retryable(reason: str | None) -> bool:
    cls = errors.REASONS.get(reason or "")
    return cls is not None and issubclass(cls, errors.Retryable)


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

    def wait(self, attempts: int, result: FetchResult, robots_wait: float) -> float | None:
        """Seconds before the next try of a URL fetched ``attempts + 1`` times so far with
        ``result``; None if the result is final (success, a permanent failure, or no tries
        left). ``robots_wait``: seconds until its origin's robots.txt may be asked again."""
        if not is_retryable(result.error) or attempts + 1 >= self.max_attempts:
            return None
        retry_after = parse_retry_after(result.header("retry-after")) if result.status in (429, 503) else None
        if result.error == errors.RobotsUnavailable.reason:
            retry_after = max(0.0, robots_wait)
        return backoff(attempts, base=self.base, cap=self.cap, retry_after=retry_after)
