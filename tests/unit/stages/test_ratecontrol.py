import asyncio
import random
from email.utils import formatdate

import pytest

from crawler.fetch.netguard import Resolver
from crawler.stages.ratecontrol import backoff, next_delay, parse_retry_after


def test_delay_follows_response_time_and_never_drops_below_the_floor() -> None:
    d = 0.0
    for _ in range(10):
        d = next_delay(d, floor=0.0, latency=2.0, status=200, retry_after=None, max_delay=60)
    assert 1.9 < d <= 2.0  # a server taking 2 s per page gets about 2 s between requests
    for _ in range(20):
        d = next_delay(d, floor=0.5, latency=0.01, status=200, retry_after=None, max_delay=60)
    assert d == pytest.approx(0.5, abs=0.01)  # healthy again: back down to the configured delay


def test_slow_down_doubles_honours_retry_after_and_is_capped() -> None:
    assert next_delay(0.0, floor=0, latency=0.1, status=429, retry_after=None, max_delay=60) == 1.0
    assert next_delay(3.0, floor=0, latency=0.1, status=503, retry_after=None, max_delay=60) == 6.0
    assert next_delay(1.0, floor=0, latency=0.1, status=429, retry_after=30, max_delay=60) == 30
    assert next_delay(1.0, floor=0, latency=0.1, status=429, retry_after=3600, max_delay=60) == 60


def test_retry_after_seconds_and_http_date() -> None:
    now = 1_800_000_000.0
    assert parse_retry_after("120", now) == 120
    assert parse_retry_after(formatdate(now + 30, usegmt=True), now) == pytest.approx(30, abs=1)
    assert parse_retry_after(formatdate(now - 30, usegmt=True), now) == 0
    assert parse_retry_after("soon", now) is None and parse_retry_after(None, now) is None


def test_backoff_grows_with_jitter_within_bounds() -> None:
    rng = random.Random(7)
    for attempt in range(5):
        wait = backoff(attempt, base=1.0, cap=100, rng=rng)
        assert 0.5 * 2**attempt <= wait <= 1.5 * 2**attempt
    assert backoff(20, base=1.0, cap=100) == 100
    assert backoff(0, base=1.0, cap=100, retry_after=40) == 40


def test_dns_cache_is_bounded_in_size_and_time(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    async def fake_getaddrinfo(self: object, host: str, port: int, **kw: object) -> list[tuple]:
        calls.append(host)
        return [(2, 1, 6, "", ("93.184.216.34", port))]

    monkeypatch.setattr(asyncio.BaseEventLoop, "getaddrinfo", fake_getaddrinfo)
    r = Resolver(ttl=0.2, size=2)

    async def go() -> None:
        for host in ("a.example", "a.example", "b.example", "c.example", "a.example"):
            assert await r.resolve(host, 80) == ["93.184.216.34"]
        await asyncio.sleep(0.25)
        await r.resolve("c.example", 80)

    asyncio.run(go())
    # a cached; b, c new; a evicted by the size bound, so asked again; c expired, asked again
    assert calls == ["a.example", "b.example", "c.example", "a.example", "c.example"]
