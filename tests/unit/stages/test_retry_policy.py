"""Retry decisions in one place: what is tried again, and after how long."""

from __future__ import annotations

from crawler.fetch.client import FetchResult
from crawler.stages.retry_policy import RetryPolicy, is_retryable

POLICY = RetryPolicy(max_attempts=3, base=1.0, cap=100.0)


def _result(error: str | None, status: int | None = None, headers: list[tuple[str, str]] | None = None) -> FetchResult:
    return FetchResult(url="http://a.test/", final_url="http://a.test/", status=status, error=error,
                       headers=headers or [])


def test_only_retryable_failures_with_tries_left_wait() -> None:
    assert is_retryable("connect") and not is_retryable("robots") and not is_retryable(None)
    assert POLICY.wait(0, _result(None, 200), 0.0) is None
    assert POLICY.wait(0, _result("robots"), 0.0) is None
    wait = POLICY.wait(0, _result("connect"), 0.0)
    assert wait is not None and 0.5 <= wait <= 1.5
    assert POLICY.wait(2, _result("connect"), 0.0) is None  # the third try was the last


def test_retry_after_and_robots_expiry_set_the_least_wait() -> None:
    slow = _result("http_5xx", 503, [("Retry-After", "40")])
    assert POLICY.wait(0, slow, 0.0) == 40.0
    assert POLICY.wait(0, _result("robots_unavailable"), 70.0) == 70.0
    assert POLICY.wait(0, _result("robots_unavailable"), 500.0) == 100.0  # never past the cap


def test_statuses_are_retried_as_scrapys_retry_http_codes() -> None:
    # A 501 POST was sent three times (about 10 s) where Scrapy sends it once.
    for status in (408, 429, 500, 502, 503, 504, 522, 524):
        error = "http_429" if status == 429 else "http_5xx" if status >= 500 else "http_4xx"
        assert POLICY.wait(0, _result(error, status), 0.0) is not None, status
    for status in (501, 505, 507, 511, 404, 410):
        assert POLICY.wait(0, _result("http_5xx" if status >= 500 else "http_4xx", status), 0.0) is None, status
    # A failing answer refused for its body keeps its own reason's verdict: final.
    assert POLICY.wait(0, _result("too_large", 503), 0.0) is None
    assert POLICY.wait(0, _result("refused_type", 500), 0.0) is None
