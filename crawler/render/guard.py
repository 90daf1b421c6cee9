"""Every request a rendered page makes, answered by the crawler instead of by the browser's own
network stack: the page's document from the body the fetch stage got (the server is not asked
twice), everything else fetched through the job's guarded HTTP client, so the same network guard
(allowed networks, no private addresses, fixed DNS answers), robots.txt and body cap apply as to
any fetch. Requests to one host wait their turn: at most ``per_host`` at once, ``delay`` apart,
each the host's own where the crawl has one (an operator's override, the adaptive delay) and
the job's otherwise. Each is counted (``render_requests``, ``render_blocked:<reason>``).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

from crawler.fetch import FetchConfig
from crawler.fetch.client import HttpFetcher
from crawler.urls import host_key

# Headers the fulfilled response must not repeat: the body handed over is already decoded and
# whole, so its length and encoding are the browser's to work out.
_DROP = frozenset({"content-encoding", "content-length", "transfer-encoding", "connection", "keep-alive",
                   "set-cookie"})

RobotsCheck = Callable[[str], Awaitable[str | None]]


# host -> (its requests in flight at most, its delay in seconds).
Limits = Callable[[str], tuple[int, float]]


class HostTurns:
    """Per host: requests in flight at most ``per_host``, each starting at least ``delay`` after
    the last one started and after the last one ended (the crawl's meaning of a delay), or what
    ``limits`` says for the host (asked once per host)."""

    def __init__(self, per_host: int, delay: float, limits: Limits | None = None) -> None:
        self.per_host, self.delay = max(1, per_host), delay
        self.limits = limits
        self._slots: dict[str, asyncio.Semaphore] = {}
        self._delays: dict[str, float] = {}
        self._next: dict[str, float] = {}

    async def __call__(self, host: str, fetch: Callable[[], Awaitable[Any]]) -> Any:
        slot = self._slots.get(host)
        if slot is None:
            per_host, self._delays[host] = self.limits(host) if self.limits else (self.per_host, self.delay)
            slot = self._slots[host] = asyncio.Semaphore(max(1, per_host))
        delay = self._delays[host]
        async with slot:
            if delay:
                now = time.monotonic()
                start = max(now, self._next.get(host, 0.0))
                self._next[host] = start + delay
                if start > now:
                    await asyncio.sleep(start - now)
            try:
                return await fetch()
            finally:
                if delay:
                    self._next[host] = max(self._next[host], time.monotonic() + delay)


class Guard:
    """The request handler of one page being rendered."""

    def __init__(self, url: str, body: bytes, content_type: str, fetcher: HttpFetcher, config: FetchConfig,
                 robots: RobotsCheck | None, turns: HostTurns, counts: Counter[str]) -> None:
        self.url, self.body, self.content_type = url, body, content_type
        self.fetcher, self.config, self.robots, self.turns = fetcher, config, robots, turns
        self.counts = counts
        self.blocked = 0
        self.served = False  # the page's own document has been answered
        self.open = 0  # requests of the page under way
        self.last = time.monotonic()  # when one last started or ended

    def quiet_for(self) -> float:
        """Seconds since the page's last request ended, or -1 while one is under way."""
        return -1.0 if self.open else time.monotonic() - self.last

    def _block(self, reason: str) -> None:
        self.blocked += 1
        self.counts[f"render_blocked:{reason}"] += 1

    async def handle(self, route: Any, request: Any) -> None:
        self.open += 1
        try:
            await self._handle(route, request)
        finally:
            self.open -= 1
            self.last = time.monotonic()

    async def _handle(self, route: Any, request: Any) -> None:
        url: str = request.url
        if request.is_navigation_request() and request.frame.parent_frame is None:
            if self.served:
                # A script sending the page elsewhere: what is read is this page, as it stands.
                await route.abort("blockedbyclient")
                self._block("navigation")
                return
            self.served = True
            await route.fulfill(status=200, body=self.body,
                                headers={"content-type": self.content_type or "text/html"})
            return
        if request.resource_type in ("media", "websocket", "eventsource", "manifest", "other"):
            await route.abort("blockedbyclient")
            self._block(f"type_{request.resource_type}")
            return
        if not url.startswith(("http://", "https://")):
            await route.abort("blockedbyclient")
            self._block("scheme")
            return
        self.counts["render_requests"] += 1
        if self.robots is not None and (reason := await self.robots(url)):
            await route.abort("blockedbyclient")
            self._block(reason)
            return
        if request.method not in ("GET", "HEAD"):
            # Scripts may read, not write: a POST from a page could change state on the site.
            await route.abort("blockedbyclient")
            self._block("method")
            return
        result = await self.turns(host_key(url), lambda: self.fetcher.request(request.method, url, self.config,
                                                                              self.robots))
        if result.error or result.status is None:
            await route.abort("blockedbyclient" if "blocked" in (result.error or "") else "failed")
            self._block(result.error or "no_response")
            return
        headers = {k: v for k, v in result.headers if k.lower() not in _DROP}
        await route.fulfill(status=result.status, headers=headers, body=result.body)
