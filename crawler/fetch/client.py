"""Concurrent fetching of a batch of URLs with httpx's AsyncClient.

``Fetcher.fetch_many(urls)`` is the seam: the pipeline and tests can plug in another one. The
HTTP implementation follows redirects itself (each hop recorded, loops and chains past the cap
named), reads at most ``max_body`` decoded bytes, decoding the raw stream in bounded steps (so a
compression bomb costs about ``max_body`` of memory, not its inflated size), puts one deadline
over the whole request so a trickling server cannot hold a slot, and keeps no cookies: the client
is shared by every job in the process.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import logging
import os
import ssl
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar
from urllib.parse import urljoin

import httpcore
import httpx

from crawler import errors
from crawler.config.redact import redact_request_headers, redact_response_headers
from crawler.config.settings import parse_networks, process_limit
from crawler.fetch import decoding
from crawler.fetch.cookies import NoCookies
from crawler.fetch.netguard import GuardedBackend, NetworkGuard, Resolver
from crawler.lru import LRU
from crawler.parse.html import is_html
from crawler.urls import redirect_target

T = TypeVar("T")
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FetchConfig:
    user_agent: str
    connect_timeout: float = 5.0
    read_timeout: float = 10.0
    deadline: float = 30.0
    max_redirects: int = 5
    max_body: int = 5_000_000
    allow_networks: tuple[str, ...] = ()  # fetched although not public (the guard's exceptions)
    resolve: tuple[tuple[str, str], ...] = ()  # fixed DNS answers, like curl --resolve
    dns_ttl: float = 300.0
    html_only: bool = True  # do not read bodies that are not HTML
    # Content-type prefixes never read (``refuse_types``): such a response is ``refused_type``.
    refuse_types: tuple[str, ...] = ()

    @property
    def network_key(self) -> tuple[object, ...]:
        return (self.allow_networks, self.resolve, self.dns_ttl)


# Checks a redirect target before it is followed: returns a reason code to stop, or None.
HopCheck = Callable[[str], Awaitable[str | None]]


@dataclass
class FetchResult:
    url: str
    final_url: str
    status: int | None = None
    http_version: str = "HTTP/1.1"
    headers: list[tuple[str, str]] = field(default_factory=list)
    request_headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""
    error: str | None = None
    fetched_at: float = 0.0
    elapsed: float = 0.0
    redirects: list[tuple[int, str]] = field(default_factory=list)  # (status, url) per hop
    ip: str = ""  # the address actually connected to
    # False: never sent (held back by robots.txt or our rules), whatever ``error`` says: a page
    # of an origin whose robots.txt reached no server fails as ``connect`` without a request.
    sent: bool = True

    def header(self, name: str) -> str | None:
        name = name.lower()
        for k, v in self.headers:
            if k.lower() == name:
                return v
        return None

    @property
    def content_type(self) -> str:
        return self.header("content-type") or ""

    @property
    def sha1(self) -> str:
        return hashlib.sha1(self.body).hexdigest() if self.body else ""


# Extra request headers per URL (conditional GET validators), sent on the first hop only.
ExtraHeaders = Mapping[str, Sequence[tuple[str, str]]]


class Hops(Protocol):
    """A session's part in each hop of a request (redirects included): the headers that depend
    on the hop's own URL (cookies, credentials for that host only), and what each response set.
    Headers given here are never recorded in the clear (see ``crawler.config.redact``)."""

    def headers(self, url: str) -> Sequence[tuple[str, str]]:
        ...

    def received(self, url: str, headers: Sequence[tuple[str, str]]) -> None:
        ...


# A spider's request other than a plain GET: (method, body, first-hop headers), per URL position.
RequestSpec = tuple[str, bytes, Sequence[tuple[str, str]]]


class Fetcher(Protocol):
    async def fetch_many(self, urls: Sequence[str], config: FetchConfig, check: HopCheck | None = None,
                         headers: ExtraHeaders | None = None, hops: Hops | None = None,
                         requests: Sequence[RequestSpec | None] | None = None) -> list[FetchResult]:
        """One result per URL, in order; failures are results with ``error`` set, never raised.
        ``check`` vets every redirect target before it is followed; ``hops`` adds a session's
        headers to every hop and sees every response. ``requests`` (only given when some URL
        is more than a GET): per URL, its method, body and own headers, or None."""
        ...


def status_error(status: int) -> errors.Reason | None:
    if status == 429:
        return errors.HTTP429.reason
    if status >= 500:
        return errors.HTTP5xx.reason
    if status >= 400:
        return errors.HTTP4xx.reason
    return None


def map_exception(exc: BaseException) -> errors.Reason:
    """Translate a transport exception into a stable reason code."""
    if isinstance(exc, errors.CrawlError):
        return exc.reason
    if isinstance(exc, (asyncio.TimeoutError, httpx.TimeoutException)):
        return errors.FetchTimeout.reason
    if isinstance(exc, httpx.ConnectError):
        text = str(exc).lower()
        if "name or service not known" in text or "nodename nor servname" in text or "name resolution" in text:
            return errors.DNSError.reason
        if isinstance(exc.__context__, ssl.SSLError) or "ssl" in text or "certificate" in text:
            return errors.TLSError.reason
        return errors.ConnectError.reason
    if isinstance(exc, httpx.DecodingError):
        return errors.Decode.reason
    if isinstance(exc, (httpx.UnsupportedProtocol, httpx.InvalidURL)):
        return errors.BadURL.reason
    if isinstance(exc, httpx.ProtocolError):
        return errors.ProtocolError.reason
    if isinstance(exc, (httpx.NetworkError, OSError)):
        return errors.ConnectError.reason
    return errors.Internal.reason


class HttpFetcher:
    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client

    async def fetch_many(self, urls: Sequence[str], config: FetchConfig, check: HopCheck | None = None,
                         headers: ExtraHeaders | None = None, hops: Hops | None = None,
                         requests: Sequence[RequestSpec | None] | None = None) -> list[FetchResult]:
        extra = headers or {}
        if requests:
            return list(await asyncio.gather(*(
                self.fetch_one(u, config, check, extra.get(u, ()), hops) if r is None
                else self.request(r[0], u, config, check, extra.get(u, ()), hops, r[1], own=r[2])
                for u, r in zip(urls, requests, strict=True))))
        return list(await asyncio.gather(*(self.fetch_one(u, config, check, extra.get(u, ()), hops) for u in urls)))

    async def fetch_one(self, url: str, config: FetchConfig, check: HopCheck | None = None,
                        headers: Sequence[tuple[str, str]] = (), hops: Hops | None = None) -> FetchResult:
        return await self.request("GET", url, config, check, headers, hops)

    async def request(self, method: str, url: str, config: FetchConfig, check: HopCheck | None = None,
                      headers: Sequence[tuple[str, str]] = (), hops: Hops | None = None,
                      body: bytes = b"", own: Sequence[tuple[str, str]] = ()) -> FetchResult:
        """One request (a session's login POST, or a page's GET) through the guarded client,
        redirects followed as browsers do: 301/302/303 turn a POST into a GET without body,
        307/308 repeat it. ``own``: a spider request's own headers, sent on the first hop in
        place of the crawler's of the same name (as Scrapy's override its defaults). Failures
        are results with ``error`` set, never raised."""
        result = FetchResult(url=url, final_url=url, fetched_at=time.time())
        start = time.monotonic()
        try:
            async with asyncio.timeout(config.deadline):
                await self._follow(result, config, check, headers, hops, method, body, own)
        except Exception as exc:  # every failure becomes a named result, never a crashed batch
            result.error = map_exception(exc)
        result.elapsed = time.monotonic() - start
        return result

    async def _follow(self, result: FetchResult, config: FetchConfig, check: HopCheck | None,
                      extra: Sequence[tuple[str, str]], hops: Hops | None = None, method: str = "GET",
                      body: bytes = b"", own: Sequence[tuple[str, str]] = ()) -> None:
        timeout = httpx.Timeout(config.read_timeout, connect=config.connect_timeout)
        # A loop is the same request going out again, not the same URL: a POST answered by a 303
        # to itself (Post/Redirect/Get), or a gate that sets a cookie and sends the client back,
        # asks for the URL anew and gets something else, as browsers, curl and Scrapy see it.
        seen: set[tuple[str, str, tuple[tuple[str, str], ...]]] = set()
        current, previous = result.url, result.url
        for hop in range(config.max_redirects + 1):
            session = tuple(hops.headers(current)) if hops is not None else ()
            request_key = (method, current, session)
            if request_key in seen:
                raise errors.RedirectLoop(f"{previous} -> {current}")
            seen.add(request_key)
            headers = [("User-Agent", config.user_agent), *(extra if hop == 0 else ()), *session]
            sent: Sequence[tuple[str, str]] | list[tuple[bytes, bytes]] = (
                _replaced(headers, own) if own and hop == 0 else headers)
            request = self.client.build_request(method, current, headers=sent, timeout=timeout,
                                                content=body or None)
            response = await self.client.send(request, stream=True)
            try:
                if hops is not None:
                    hops.received(current, [(k.decode("latin-1"), v.decode("latin-1"))
                                            for k, v in response.headers.raw])
                location = response.headers.get("location") if response.is_redirect else None
                if location is not None:
                    nxt = redirect_target(urljoin(current, location.strip()))
                    result.redirects.append((response.status_code, current))
                    previous, current = current, nxt
                    if method == "POST" and response.status_code in (301, 302, 303):
                        method, body = "GET", b""
                    result.final_url = current
                    reason = await check(nxt) if check else None
                    if reason:
                        result.error = reason
                        return
                    continue
                result.final_url = current
                result.status = response.status_code
                result.http_version = response.http_version
                result.ip = _peer_ip(response)
                # Credentials and cookies never leave the client in the clear: results end up
                # in messages, WARC records and exports.
                result.request_headers = redact_request_headers(
                    [(k.decode(), v.decode()) for k, v in request.headers.raw])
                # The body is stored decoded, so the encoding headers no longer describe it.
                result.headers = redact_response_headers(
                    [(k.decode("latin-1"), v.decode("latin-1")) for k, v in response.headers.raw
                     if k.lower() not in (b"content-encoding", b"transfer-encoding", b"content-length")])
                if config.refuse_types and _refused(result.content_type, config.refuse_types):
                    result.error = errors.RefusedType.reason
                    return
                if config.html_only and response.status_code == 200 and not is_html(result.content_type):
                    result.error = errors.NotHTML.reason
                    return
                result.body, cut = await _read_capped(response, config.max_body)
                result.error = errors.TooLarge.reason if cut else status_error(response.status_code)
                return
            finally:
                await response.aclose()
        result.final_url = current
        raise errors.TooManyRedirects(f"more than {config.max_redirects} redirects")


def _replaced(base: Sequence[tuple[str, str]], own: Sequence[tuple[str, str]]) -> list[tuple[bytes, bytes]]:
    """``base`` without the fields ``own`` names (case-insensitively), then ``own``, as bytes:
    the request's values UTF-8 as Scrapy sends them (httpx would refuse what is not ASCII). The
    client's defaults (``Accept-Encoding``) are replaced by httpx itself."""
    names = {k.lower() for k, _ in own}
    return [*((k.encode("latin-1"), v.encode("latin-1")) for k, v in base if k.lower() not in names),
            *((k.encode("latin-1"), v.encode()) for k, v in own)]


def _refused(content_type: str, refused: Sequence[str]) -> bool:
    ct = content_type.split(";", 1)[0].strip().lower()
    return any(ct.startswith(prefix) for prefix in refused)


def _peer_ip(response: httpx.Response) -> str:
    stream = response.extensions.get("network_stream")
    addr = stream.get_extra_info("server_addr") if stream is not None else None
    return str(addr[0]) if addr else ""


async def _read_capped(response: httpx.Response, limit: int) -> tuple[bytes, bool]:
    """At most ``limit`` decoded bytes, and whether the body was cut. Decoded here from the raw
    stream, never by httpx, which inflates a whole network chunk before anyone may stop it."""
    decoder = decoding.decoder(response.headers.get_list("content-encoding", split_commas=True))
    # Compressed input that decodes to (almost) nothing, such as brotli metadata blocks or empty
    # gzip members, is still download the cap should stop; real compressed bodies stay far below.
    raw_cap = 2 * limit + decoding.STEP
    # BytesIO, not a list to join or a bytearray to copy: its getvalue() hands over its own
    # buffer, so a body costs its size once, not twice.
    body = io.BytesIO()
    size = raw = 0
    async for chunk in response.aiter_raw():
        raw += len(chunk)
        decoder.feed(chunk)
        while out := decoder.read(min(decoding.STEP, limit - size + 1)):
            if size + len(out) > limit:
                body.write(out[: limit - size])
                return body.getvalue(), True
            size += body.write(out)
        if raw > raw_cap:
            return body.getvalue(), True
    return body.getvalue(), False


class OriginPools:
    """One small httpcore pool per origin instead of one pool for every host. httpcore scans all
    of a pool's connections (a readability syscall each) whenever a request starts or ends, so a
    single pool holding hundreds of connections to many hosts spent more CPU choosing a
    connection than reading the response (measured: 43% of a worker's samples at 20 hosts x 16).
    Pools of origins no request has used for a while are closed once there are more than
    ``max_pools``."""

    def __init__(self, backend: httpcore.AsyncNetworkBackend, per_origin: int, keepalive_expiry: float,
                 max_pools: int = 1024) -> None:
        self.backend = backend
        self.per_origin = per_origin
        self.keepalive_expiry = keepalive_expiry
        self.max_pools = max_pools
        self.ssl_context = httpx.create_ssl_context(trust_env=False)
        self.pools: OrderedDict[tuple[bytes, bytes, int | None], httpcore.AsyncConnectionPool] = OrderedDict()

    def _pool(self, url: httpcore.URL) -> httpcore.AsyncConnectionPool:
        key = (url.scheme, url.host, url.port)
        pool = self.pools.get(key)
        if pool is None:
            pool = self.pools[key] = httpcore.AsyncConnectionPool(
                ssl_context=self.ssl_context, max_connections=self.per_origin,
                max_keepalive_connections=self.per_origin, keepalive_expiry=self.keepalive_expiry,
                http1=True, http2=False, network_backend=self.backend)
        else:
            self.pools.move_to_end(key)
        return pool

    async def _evict(self) -> None:
        for key in list(self.pools)[: max(0, len(self.pools) - self.max_pools)]:
            pool = self.pools[key]
            if all(c.is_idle() for c in pool.connections):
                del self.pools[key]
                await pool.aclose()

    async def handle_async_request(self, request: httpcore.Request) -> httpcore.Response:
        pool = self._pool(request.url)
        if len(self.pools) > self.max_pools:
            await self._evict()
        return await pool.handle_async_request(request)

    async def aclose(self) -> None:
        pools, self.pools = list(self.pools.values()), OrderedDict()
        for pool in pools:
            await pool.aclose()


# What carries httpx's requests: aiohttp through httpx-aiohttp (crawler.fetch.transport), half
# httpcore's CPU per page (bench/client_cost.py: 0.37 against 0.75 ms), or httpcore
# (CRAWLER_HTTP_TRANSPORT=httpcore). Both connect only where the network guard allows.
TRANSPORT = os.environ.get("CRAWLER_HTTP_TRANSPORT", "aiohttp")


class GuardedTransport(httpx.AsyncHTTPTransport):
    """httpx's transport with per-origin connection pools whose every connection goes through
    the network guard."""

    def __init__(self, backend: httpcore.AsyncNetworkBackend, per_origin: int = 32,
                 keepalive_expiry: float = 30.0) -> None:
        super().__init__(trust_env=False)
        # httpx declares _pool as one httpcore pool; it calls only the two methods OriginPools has.
        self._pool = OriginPools(backend, per_origin, keepalive_expiry)  # type: ignore[assignment]  # see above


def new_client(config: FetchConfig) -> httpx.AsyncClient:
    guard = NetworkGuard(parse_networks(config.allow_networks))
    resolver = Resolver(ttl=config.dns_ttl, overrides=dict(config.resolve))
    transport: httpx.AsyncBaseTransport
    if TRANSPORT == "aiohttp":
        from crawler.fetch.transport import GuardedAiohttpTransport

        transport = GuardedAiohttpTransport(guard, resolver)
    else:
        transport = GuardedTransport(GuardedBackend(guard, resolver))
    # trust_env=False: proxy variables from the environment must never redirect crawl traffic.
    return httpx.AsyncClient(follow_redirects=False, trust_env=False, cookies=NoCookies(),
                             headers={"Accept-Encoding": decoding.ACCEPT_ENCODING}, transport=transport)


class Runtime:
    """One event loop per process and one HTTP client per network policy, kept across tasks so
    connections are reused; rebuilt after a fork. Jobs with different guard settings never
    share a pooled connection. At most ``max_clients`` are kept: the least recently used is
    closed (its pools and sockets) on this loop when another policy needs room."""

    def __init__(self, max_clients: int | None = None) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        limit = max_clients if max_clients is not None else process_limit("http_clients")
        self._fetchers: LRU[tuple[object, ...], HttpFetcher] = LRU(limit, on_evict=self._close)

    def fetcher(self, config: FetchConfig) -> HttpFetcher:
        f = self._fetchers.get(config.network_key)
        if f is None:
            f = HttpFetcher(self.run(_make_client(config)))
            self._fetchers.put(config.network_key, f)
        return f

    def _close(self, _key: tuple[object, ...], fetcher: HttpFetcher) -> None:
        # Called from fetcher(), outside the loop: tasks run one at a time per process, so the
        # evicted client has no request in flight.
        try:
            self.run(fetcher.client.aclose())
        except Exception:  # its sockets go with it anyway; the task that needs room goes on
            log.warning("closing an evicted HTTP client failed", exc_info=True)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coro)


async def _make_client(config: FetchConfig) -> httpx.AsyncClient:
    return new_client(config)


_runtime: Runtime | None = None


def runtime() -> Runtime:
    global _runtime
    if _runtime is None or _runtime.pid != os.getpid():
        _runtime = Runtime()
    return _runtime


def fetch_batch(urls: Sequence[str], config: FetchConfig, fetcher: Fetcher | None = None,
                check: HopCheck | None = None) -> list[FetchResult]:
    """Fetch URLs concurrently from synchronous code (a Celery task)."""
    rt = runtime()
    return rt.run((fetcher or rt.fetcher(config)).fetch_many(urls, config, check))
