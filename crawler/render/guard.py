"""Every request a rendered page makes, answered by the crawler instead of by the browser's own
network stack: the page's document from the body the fetch stage got (the server is not asked
twice), everything else fetched through the job's guarded HTTP client, so the same network guard
(allowed networks, no private addresses, fixed DNS answers), robots.txt and body cap apply as to
any fetch. Requests to one host wait their turn: at most ``per_host`` at once, ``delay`` apart,
each the host's own where the crawl has one (an operator's override, the adaptive delay) and
the job's otherwise. Each is counted (``render_requests``, ``render_bytes``,
``render_blocked:<reason>``).

The browser's own requests follow the browser's rules, not the fetch stage's: a page's scripts,
modules, data, styles (and images, media, fonts unless ``Rules.block_types`` says not) are
loaded whatever their type, never stored as pages, within ``Rules.max_requests`` requests and
``Rules.max_bytes`` bytes per page, and only from the page's own site, the job's domains and
the CDN hosts the job names (``Rules.cdn_hosts``). Scripts and styles are kept for a few
minutes per worker process (``static_cache``), as a browser's cache keeps them, counted
``render_cached``: the same framework build on every page is asked of its host once.

What the page does to leave itself is answered without leaving it: a navigation of its top frame
(a ``location`` change, a form POST) gets an empty ``204`` that keeps the document as it stands
and is recorded (``navigated``, and ``target`` for a GET, to follow as a link); a popup's
requests are refused and the popup closed (``popups``); a dialog (alert, confirm, prompt,
beforeunload) is dismissed and a download refused, each counted (``dialogs``, ``downloads``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from crawler.errors import Reason
from crawler.fetch import FetchConfig
from crawler.fetch.client import HttpFetcher
from crawler.lru import ENTRY_OVERHEAD, LRU
from crawler.urls import domain_of, host_key

# Headers the fulfilled response must not repeat: the body handed over is already decoded and
# whole, so its length and encoding are the browser's to work out.
_DROP = frozenset({"content-encoding", "content-length", "transfer-encoding", "connection", "keep-alive",
                   "set-cookie"})

# Types no page gets, whatever the job says: open-ended streams and what only an installed app uses.
ALWAYS_BLOCKED = frozenset({"websocket", "eventsource", "manifest", "other"})

# A page's scripts and styles, kept per worker process as a browser's HTTP cache keeps them: an app
# shell's framework build is the same file on every page, and its host is asked for it once.
CACHED_TYPES = frozenset({"script", "stylesheet"})
CACHE_TTL = 300.0  # seconds
CACHE_BYTES = 64_000_000


@dataclass(frozen=True)
class Cached:
    status: int
    headers: dict[str, str]
    body: bytes
    expires: float


def _cache_size(key: tuple[object, ...], c: Cached) -> int:
    return ENTRY_OVERHEAD + len(c.body) + sum(len(k) + len(v) for k, v in c.headers.items())


# (network policy, URL) -> response: a job's allowed networks decide what a URL reaches.
static_cache: LRU[tuple[object, ...], Cached] = LRU(4096, CACHE_BYTES, sizeof=_cache_size)

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


@dataclass(frozen=True)
class Rules:
    """What the browser may load for a page besides its document (``crawler.config.settings``:
    render_block_types, render_cdn_hosts, render_max_requests, render_max_bytes)."""

    block_types: frozenset[str] = frozenset({"image", "media", "font"})
    cdn_hosts: frozenset[str] = frozenset()  # hosts besides the page's own site and the job's domains
    domains: frozenset[str] = frozenset()  # the job's registered domains in scope
    max_requests: int = 100
    max_bytes: int = 20_000_000


@dataclass
class Guard:
    """The request handler of one page being rendered."""

    url: str
    body: bytes
    content_type: str
    fetcher: HttpFetcher
    config: FetchConfig
    robots: RobotsCheck | None
    turns: HostTurns
    counts: Counter[str]
    rules: Rules = Rules()
    page: Any = None  # the page rendered; requests of any other (a popup) are refused
    blocked: int = 0
    served: bool = False  # the page's own document has been answered
    open: int = 0  # requests of the page under way
    last: float = field(default_factory=time.monotonic)  # when one last started or ended
    requests: int = 0  # requests past the document
    loaded: int = 0  # bytes of them
    popups: int = 0
    dialogs: int = 0
    downloads: int = 0
    navigated: str = ""  # how the page tried to leave: "navigated away" or "navigated away (form POST)"
    target: str = ""  # where a GET navigation was going

    def __post_init__(self) -> None:
        self._closing: set[asyncio.Future[None]] = set()
        self.site = domain_of(self.url)
        # Bodies whatever their type (scripts, JSON, styles), within the page's byte budget.
        self.config = dataclasses.replace(self.config, html_only=False)

    def quiet_for(self) -> float:
        """Seconds since the page's last request ended, or -1 while one is under way."""
        return -1.0 if self.open else time.monotonic() - self.last

    def _block(self, reason: str) -> None:
        self.blocked += 1
        self.counts[f"render_blocked:{reason}"] += 1

    def popup(self, popup: Any) -> None:
        """A window the page opened: counted and closed."""
        self.popups += 1
        self.counts["render_popups"] += 1
        self._closing.add(closing := asyncio.ensure_future(_quietly(popup.close())))
        closing.add_done_callback(self._closing.discard)

    def dialog(self, dialog: Any) -> None:
        """An alert, confirm, prompt or beforeunload of the page: counted and dismissed (a page
        waits on it for ever otherwise)."""
        self.dialogs += 1
        self.counts["render_dialogs"] += 1
        self._closing.add(closing := asyncio.ensure_future(_quietly(dialog.dismiss())))
        closing.add_done_callback(self._closing.discard)

    def download(self, download: Any) -> None:
        """A download the page started (the context accepts none: it is cancelled): counted."""
        self.downloads += 1
        self.counts["render_downloads"] += 1

    async def handle(self, route: Any, request: Any) -> None:
        self.open += 1
        try:
            await self._handle(route, request)
        except Exception:
            # The page or its frame went away mid-answer (a popup closed, a render ended): the
            # request dies with it, and the page is never failed for it.
            await _quietly(route.abort("failed"))
        finally:
            self.open -= 1
            self.last = time.monotonic()

    def _in_scope(self, url: str) -> bool:
        host = (urlsplit(url).hostname or "").lower()
        domain = domain_of(url)
        return domain == self.site or domain in self.rules.domains or host in self.rules.cdn_hosts

    async def _handle(self, route: Any, request: Any) -> None:
        url: str = request.url
        try:
            # A popup's first request has no frame yet (Playwright raises): it is not this page's.
            frame = request.frame
            ours = self.page is None or frame.page == self.page
            top = frame.parent_frame is None
        except Exception:
            ours, top = False, False
        if not ours:
            await route.abort("blockedbyclient")
            self._block("popup")
            return
        if request.is_navigation_request() and top:
            if self.served:
                # The page sending itself elsewhere: an empty answer keeps the document as it is.
                post = request.method != "GET"
                self.navigated = "navigated away (form POST)" if post else "navigated away"
                if not post and not self.target and url.startswith(("http://", "https://")):
                    self.target = url.split("#", 1)[0]
                self.counts["render_navigations:" + ("form_post" if post else "location")] += 1
                await route.fulfill(status=204, body=b"")
                return
            self.served = True
            await route.fulfill(status=200, body=self.body,
                                headers={"content-type": self.content_type or "text/html"})
            return
        kind = request.resource_type
        if kind in ALWAYS_BLOCKED or kind in self.rules.block_types:
            await route.abort("blockedbyclient")
            self._block(f"type_{kind}")
            return
        if not url.startswith(("http://", "https://")):
            await route.abort("blockedbyclient")
            self._block("scheme")
            return
        if self.requests >= self.rules.max_requests:
            await route.abort("blockedbyclient")
            self._block("too_many")
            return
        if not self._in_scope(url):
            await route.abort("blockedbyclient")
            self._block("third_party")
            return
        self.requests += 1
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
        left = self.rules.max_bytes - self.loaded
        if left <= 0:
            await route.abort("blockedbyclient")
            self._block(Reason.TOO_LARGE)
            return
        key = (self.config.network_key, url)
        cacheable = kind in CACHED_TYPES and request.method == "GET"
        hit = static_cache.get(key) if cacheable else None
        if hit is not None and hit.expires > time.monotonic() and len(hit.body) <= left:
            self.loaded += len(hit.body)
            self.counts["render_cached"] += 1
            await route.fulfill(status=hit.status, headers=hit.headers, body=hit.body)
            return
        config = dataclasses.replace(self.config, max_body=min(self.config.max_body, left))
        result = await self.turns(host_key(url), lambda: self.fetcher.request(request.method, url, config,
                                                                              self.robots))
        self.loaded += len(result.body)
        self.counts["render_bytes"] += len(result.body)
        if result.status is None or result.error == Reason.TOO_LARGE:
            # Refused (the network guard, robots.txt at a redirect), unanswered or past the budget;
            # an error status is the page's to see, as a browser would.
            await route.abort("blockedbyclient" if "blocked" in (result.error or "") else "failed")
            self._block(result.error or "no_response")
            return
        headers = {k: v for k, v in result.headers if k.lower() not in _DROP}
        if cacheable and result.status == 200 and not result.redirects and not _uncacheable(headers):
            static_cache.put(key, Cached(200, headers, result.body, time.monotonic() + CACHE_TTL))
        await route.fulfill(status=result.status, headers=headers, body=result.body)


def _uncacheable(headers: dict[str, str]) -> bool:
    control = next((v for k, v in headers.items() if k.lower() == "cache-control"), "").lower()
    return any(word in control for word in ("no-store", "no-cache", "private"))


async def _quietly(step: Awaitable[Any]) -> None:
    try:
        await step
    except Exception:
        pass
