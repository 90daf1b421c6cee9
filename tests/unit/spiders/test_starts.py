"""StartRequests alone: what a generator yields is taken at once, though it then pauses or blocks
for good; the position counts only what was taken; a worker taking over skips to it."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from crawler.spiders import Spider
from crawler.spiders.starts import StartRequests

release = threading.Event()


class Pauses(Spider):
    def start_requests(self) -> Iterator[Any]:
        for i in range(3):
            yield f"http://h/{i}"
        release.wait()  # a slow source: nothing until the test lets it go on
        yield "http://h/3"
        yield 42  # garbage: counted, consumed


class AsyncPauses(Spider):
    async def start_requests(self) -> AsyncIterator[Any]:  # type: ignore[override]
        for i in range(3):
            yield f"http://h/{i}"
        while not release.is_set():
            await asyncio.sleep(0.01)
        yield "http://h/3"
        yield 42


@pytest.mark.parametrize("cls", [Pauses, AsyncPauses])
def test_what_was_yielded_is_taken_though_the_generator_then_pauses(cls: type[Spider]) -> None:
    release.clear()
    live = StartRequests(cls(), ahead=10)
    counts: Counter[str] = Counter()
    began = time.monotonic()
    got = live.take(500, counts, wait=1.0)
    while len(got) < 3 and time.monotonic() - began < 1:  # the reader may not have read all 3 yet
        got += live.take(500, counts, wait=0.1)
    assert [r.url for r in got] == [f"http://h/{i}" for i in range(3)]
    assert time.monotonic() - began < 0.9  # not a second's wait once some were read
    assert live.consumed == 3 and not live.exhausted
    began = time.monotonic()
    assert live.take(500, counts, wait=0.2) == []  # still paused: back soon, with nothing
    assert time.monotonic() - began < 0.5
    release.set()
    got = []
    while not live.exhausted:
        got += live.take(500, counts, wait=1.0)
    assert [r.url for r in got] == ["http://h/3"]
    assert live.consumed == 5 and counts["spider_error:start_requests"] == 1


def test_reading_ahead_is_bounded_and_a_takeover_skips_what_was_taken() -> None:
    class Many(Spider):
        read = 0

        def start_requests(self) -> Iterator[Any]:
            for i in range(1000):
                Many.read += 1
                yield f"http://h/{i}"

    live = StartRequests(Many(), ahead=20)
    counts: Counter[str] = Counter()
    assert len(live.take(5, counts, wait=1.0)) == 5
    time.sleep(0.3)
    assert Many.read <= 5 + 20 + 1  # taken, queued, and one in hand
    live.close()
    again = StartRequests(Many(), skip=5, ahead=20)
    assert [r.url for r in again.take(3, counts, wait=1.0)] == ["http://h/5", "http://h/6", "http://h/7"]
    assert again.consumed == 8
    again.close()


def test_a_generator_that_raises_ends_with_the_error_counted() -> None:
    class Raises(Spider):
        def start_requests(self) -> Iterator[Any]:
            yield "http://h/0"
            raise RuntimeError("the id service went away")

    live = StartRequests(Raises())
    counts: Counter[str] = Counter()
    got = []
    deadline = time.monotonic() + 5
    while not live.exhausted and time.monotonic() < deadline:
        got += live.take(10, counts, wait=0.5)
    assert [r.url for r in got] == ["http://h/0"] and live.exhausted
    assert counts["spider_error:start_requests"] == 1 and live.consumed == 1
