"""A fetch task reports the requests over while others are still out (``crawler.stages.stragglers``)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from crawler.fetch import FetchConfig
from crawler.fetch.client import FetchResult, Runtime
from crawler.stages.stragglers import fetch_reporting_early

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
