"""A fetch task reports the requests over while others are still out (``crawler.stages.stragglers``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from crawler.fetch import FetchConfig
from crawler.fetch.client import FetchResult, Runtime
from crawler.stages.stragglers import fetch_reporting_early, is_untried

CONFIG = FetchConfig(user_agent="t")


@pytest.fixture
def rt() -> Iterator[Runtime]:
    runtime = Runtime(max_clients=1)
    yield runtime
    runtime.loop.close()


class Timed:
    """A fetcher whose URL ``.../<seconds>`` answers after that many seconds."""

    def __init__(self) -> None:
        self.cancelled: list[str] = []

    async def fetch_many(self, urls: Sequence[str], config: FetchConfig, *args: Any, **kw: Any) -> list[FetchResult]:
        (url,) = urls
        try:
            await asyncio.sleep(float(url.rsplit("/", 1)[1]))
        except asyncio.CancelledError:
            self.cancelled.append(url)
            raise
        return [FetchResult(url=url, final_url=url, status=200)]


def test_those_over_are_reported_while_the_rest_are_out_and_all_come_back_in_order(rt: Runtime) -> None:
    urls = ["http://a/0.01", "http://b/1.5", "http://c/0.02", "http://d/0.5"]
    reports: list[list[int]] = []
    got = fetch_reporting_early(rt, Timed(), urls, CONFIG, None, {}, None, None,
                                lambda pos, res: reports.append(pos) or None, after=0.3)
    assert [r.url for r in got] == urls
    # At 0.3 s a and c are over, at 0.9 s d; b, over at 1.5 s (before 2.1 s), the last, comes
    # back with the result only.
    assert reports == [[0, 2], [3]]


def test_a_task_over_in_time_reports_nothing_early(rt: Runtime) -> None:
    reports: list[list[int]] = []
    got = fetch_reporting_early(rt, Timed(), ["http://a/0.01", "http://b/0.02"], CONFIG, None, {}, None, None,
                                lambda pos, res: reports.append(pos) or None, after=1.0)
    assert len(got) == 2 and reports == []


def test_a_report_that_raises_cancels_the_requests_still_out(rt: Runtime) -> None:
    fetcher = Timed()

    def report(positions: list[int], results: list[FetchResult]) -> None:
        raise ConnectionError("Redis went away")

    with pytest.raises(ConnectionError):
        fetch_reporting_early(rt, fetcher, ["http://a/0.01", "http://b/5"], CONFIG, None, {}, None, None,
                              report, after=0.05)
    assert fetcher.cancelled == ["http://b/5"]
    assert not asyncio.all_tasks(rt.loop)


class Logged(Timed):
    """A ``Timed`` fetcher that notes when each request starts and ends, and answers 503 for a
    URL with ``/503/`` in it."""

    def __init__(self) -> None:
        super().__init__()
        self.spans: dict[str, tuple[float, float]] = {}

    async def fetch_many(self, urls: Sequence[str], config: FetchConfig, *args: Any, **kw: Any) -> list[FetchResult]:
        start = time.monotonic()
        (r,) = await super().fetch_many(urls, config, *args, **kw)
        self.spans[urls[0]] = (start, time.monotonic())
        return [FetchResult(url=r.url, final_url=r.url, status=503 if "/503/" in r.url else 200)]


def test_a_runs_urls_go_one_after_another_waiting_between_and_are_reported_together(rt: Runtime) -> None:
    urls = ["http://a/p/0.01", "http://a/q/0.02", "http://a/r/0.01", "http://b/0.05", "http://c/2.0"]
    fetcher = Logged()
    waits: list[float] = []

    def pace(i: int, wait: float, r: FetchResult) -> float | None:
        assert r.url == urls[i]
        waits.append(wait)
        return wait * 2

    reports: list[list[int]] = []
    got = fetch_reporting_early(rt, fetcher, urls, CONFIG, None, {}, None, None,
                                lambda pos, res: reports.append(pos) or None, after=0.6,
                                runs=[([0, 1, 2], 0.05)], pace=pace)
    assert [r.url for r in got] == urls and all(r.status == 200 for r in got)
    a = [fetcher.spans[urls[i]] for i in range(3)]
    # One at a time, each after the wait ``pace`` gave (0.05, then 0.1).
    assert a[1][0] - a[0][1] >= 0.05 and a[2][0] - a[1][1] >= 0.1
    assert waits == [0.05, 0.1, 0.2]
    # b went beside the run; the run was reported whole, before c, the straggler, was over.
    assert fetcher.spans[urls[3]][0] < a[1][0]
    assert reports == [[3, 0, 1, 2]]


def test_a_run_pace_stops_leaves_the_rest_untried(rt: Runtime) -> None:
    urls = ["http://a/0.01", "http://a/503/0.01", "http://a/x/0.01", "http://a/y/0.01"]
    fetcher = Logged()
    got = fetch_reporting_early(rt, fetcher, urls, CONFIG, None, {}, None, None, lambda pos, res: None,
                                runs=[([0, 1, 2, 3], 0.0)], pace=lambda i, wait, r: None if r.status == 503 else wait)
    assert [r.status for r in got[:2]] == [200, 503]
    assert [is_untried(r) for r in got] == [False, False, True, True] and [r.url for r in got] == urls
    assert set(fetcher.spans) == set(urls[:2])  # never sent
