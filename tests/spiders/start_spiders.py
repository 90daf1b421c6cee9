"""Spiders whose crawl starts from ``start_requests``, for tests/integration/test_start_requests.py.

Arguments: ``base`` (an origin), ``n`` (how many ids), ``fail_at`` (the generator raises when it
reaches that id), ``garbage_at`` (it yields a number there instead of a request)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

from crawler.spiders import Page, Request, Spider


class ManyStarts(Spider):
    version = "starts-1"
    follow_links = False

    def _one(self, i: int) -> Any:
        if i == int(getattr(self, "fail_at", -1)):
            raise RuntimeError("the id service went away")
        if i == int(getattr(self, "garbage_at", -1)):
            return 42
        url = f"{self.base}/item?id={i}"  # type: ignore[attr-defined]
        return url if i % 2 else Request(url, meta={"id": i})

    def start_requests(self) -> Iterator[Any]:
        for i in range(int(self.n)):  # type: ignore[attr-defined]
            yield self._one(i)

    def parse(self, page: Page, **kwargs: Any) -> Iterator[Any]:
        yield {"url": page.url, "id": page.meta.get("id")}  # what the start request carried


class AsyncStarts(ManyStarts):
    version = "starts-async-1"

    async def start_requests(self) -> AsyncIterator[Any]:  # type: ignore[override]
        for i in range(int(self.n)):  # type: ignore[attr-defined]
            yield self._one(i)


class BlockingStarts(ManyStarts):
    """Yields ``n`` start requests, then blocks for good (a cursor that never answers)."""

    version = "starts-blocking-1"

    def start_requests(self) -> Iterator[Any]:
        yield from super().start_requests()
        threading.Event().wait()  # never set: the generator never ends


class AsyncBlockingStarts(ManyStarts):
    version = "starts-async-blocking-1"

    async def start_requests(self) -> AsyncIterator[Any]:  # type: ignore[override]
        for i in range(int(self.n)):  # type: ignore[attr-defined]
            yield self._one(i)
        await asyncio.Event().wait()  # never set
