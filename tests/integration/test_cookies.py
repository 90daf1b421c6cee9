"""No cookie crosses a job, or even a request: the HTTP client a worker shares between jobs keeps
none. A loopback site sets a new cookie on every response (redirects and robots.txt included)
and records every Cookie header it is sent."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import redis
from warcio.archiveiterator import ArchiveIterator

from crawler import jobs
from crawler.config.settings import Settings
from crawler.fetch import FetchConfig, fetch_batch
from crawler.fetch.client import runtime
from crawler.testweb import TestWeb
from tests.conftest import TEST_NETWORKS, Workers, wait_done
from tests.web import handlers as hw


class CookieSite:
    """Routes that answer with Set-Cookie and note the Cookie headers that come in."""

    def __init__(self, web: TestWeb) -> None:
        self.web = web
        self.requests: list[tuple[str, list[str]]] = []  # (path, Cookie headers)
        self._n = itertools.count()
        self._lock = threading.Lock()

    def route(self, path: str, inner: hw.Handler) -> None:
        def handler(h: BaseHTTPRequestHandler) -> None:
            with self._lock:
                self.requests.append((h.path, h.headers.get_all("Cookie") or []))
                n = next(self._n)
            send_header = h.send_header

            def with_cookie(key: str, value: str) -> None:
                if key == "Content-Type":  # every response has one: the cookie rides along
                    send_header("Set-Cookie", f"sid{n}={'v' * 40}{n}; Path=/; Max-Age=3600")
                send_header(key, value)
            h.send_header = with_cookie
            inner(h)
        self.web.route(0, path, handler)

    def sent_cookies(self) -> list[tuple[str, list[str]]]:
        with self._lock:
            return [(p, c) for p, c in self.requests if c]


def cookie_site(make_web: Callable[..., TestWeb]) -> CookieSite:
    site = CookieSite(make_web(1, 1))
    site.route("/robots.txt", hw.body(b"User-agent: *\nAllow: /\n", ctype="text/plain"))
    site.route("/", hw.body(hw.html("home", ["/a", "/b", "/r"])))
    site.route("/a", hw.body(hw.html("a", ["/b", "/c"])))
    site.route("/b", hw.body(hw.html("b", ["/a", "/c"])))
    site.route("/c", hw.body(hw.html("c", ["/"])))
    site.route("/r", hw.body(b"", 302, headers={"Location": "/c?from=r", "Content-Type": "text/html"}))
    site.route("/c?from=r", hw.body(hw.html("c via r")))
    return site


def test_the_shared_client_never_stores_or_sends_a_cookie(make_web: Callable[..., TestWeb]) -> None:
    site = cookie_site(make_web)
    cfg = FetchConfig(user_agent="t", allow_networks=tuple(TEST_NETWORKS.split(",")), deadline=5)
    urls = [site.web.url(0, p) for p in ("/", "/a", "/r", "/b")]
    for _job in ("A", "B"):  # two jobs' fetches on the one client a worker process shares
        results = fetch_batch(urls, cfg)
        assert [r.error for r in results] == [None] * len(urls)
        assert not [r for r in results if any(k.lower() == "cookie" for k, _ in r.request_headers)]
    assert len(site.requests) == 2 * (len(urls) + 1)  # /r's redirect hop too
    assert site.sent_cookies() == []
    assert len(runtime().fetcher(cfg).client.cookies.jar) == 0


def test_a_crawl_sends_no_cookie_across_pages_or_jobs(make_web: Callable[..., TestWeb], workers: Workers,
                                                       r: redis.Redis, tmp_path: Path) -> None:
    site = cookie_site(make_web)
    workers.start("w0", "shard-0,shard-1,shard-2,shard-3")
    for job in ("a", "b"):  # one after the other on the same worker process, as tenants would
        settings = Settings.from_env(store=f"sqlite:///{tmp_path}/{job}.db", warc_dir=str(tmp_path / f"warc-{job}"),
                                     allow_domains=[site.web.ips[0]], autothrottle=False)
        st = wait_done(r, jobs.submit(r, settings, [site.web.url(0, "/")]), timeout=60)
        assert st["counters"]["fetched"] == 5, st["counters"]  # /, /a, /b, /c, /r (stored at /c?from=r)
    assert len(site.requests) >= 2 * 6  # each job: five pages and the redirect's target (robots.txt is cached)
    assert site.sent_cookies() == []
    archived = 0
    for warc in tmp_path.glob("warc-b/*.warc.gz"):
        with warc.open("rb") as f:
            for record in ArchiveIterator(f):
                if record.rec_type == "request":
                    archived += 1
                    assert record.http_headers.get_header("Cookie") is None
    assert archived >= 5
