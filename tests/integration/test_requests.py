"""Requests with callbacks and data, end to end on real workers (issue 28): callbacks routed with
their cb_kwargs and meta, JSON, RSS and sitemaps reaching their callbacks, POST requests deduplicated
by method + URL + body, requests that cost only themselves, two shards, and a job killed mid-crawl
and recovered from the store with every request's callback and data."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import redis

from crawler import jobs
from crawler.cli import main
from crawler.config.settings import Settings
from crawler.frontier.sharding import shard_of_url
from crawler.local.redis_server import RedisServer
from crawler.state import keys
from crawler.state.conn import connect
from crawler.store import open_store
from crawler.testweb import TestWeb
from crawler.urls import domain_of
from tests.conftest import ROOT, Workers, wait_done
from tests.integration.test_crawl import cli
from tests.web.handlers import body, slow

FAST_RECOVERY = {"CRAWLER_LEASE_TIMEOUT": "4", "CRAWLER_VISIBILITY_TIMEOUT": "12", "CRAWLER_TASK_TIME_LIMIT": "10"}

SPIDER = "tests.spiders.requests:CallbackSpider"
SPREAD = f"{ROOT / 'tests' / 'spiders' / 'requests.py'}:SpreadSpider"
QUOTES = [("The world as we have created it", "Albert Einstein", "a"), ("It is our choices", "J.K. Rowling", "b")]
RSS = b"""<?xml version="1.0" encoding="UTF-8"?><rss version="2.0"><channel><title>f</title>
<item><title>first post</title></item><item><title>second post</title></item></channel></rss>"""
SITEMAP = b"""<?xml version="1.0" encoding="UTF-8"?>
<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"><url><loc>http://x.example/1</loc></url>
<url><loc>http://x.example/2</loc></url></urlset>"""


PDF = b"%PDF-1.4\n" + bytes(range(256)) * 40


class Shop:
    """The routes of CallbackSpider's site on site ``site`` of ``web``."""

    def __init__(self, web: TestWeb, site: int = 0, api_pages: int = 3) -> None:
        self.posts: list[bytes] = []
        self._lock = threading.Lock()
        quotes = "".join(f'<div class="quote"><span class="text">{t}</span>'
                         f'<a class="author" href="/author/{slug}">by</a></div>' for t, _, slug in QUOTES)
        web.route(site, "/", body(f"<html><title>quotes</title><body>{quotes}</body></html>".encode()))
        for _, name, slug in QUOTES:
            web.route(site, f"/author/{slug}", body(f"<html><body><h1>{name}</h1></body></html>".encode()))
        self.api_pages = api_pages
        web.route(site, "/api", self._api, any_query=True)
        web.route(site, "/feed.xml", body(RSS, ctype="application/rss+xml"))
        web.route(site, "/sitemap.xml", body(SITEMAP, ctype="application/xml"))
        web.route(site, "/nocallback", body(b"<html><title>n</title></html>"))
        web.route(site, "/search", self._search, method="POST")
        web.route(site, "/missing", body(b"gone away", status=404, ctype="text/plain"))
        web.route(site, "/doc.pdf", body(PDF, ctype="application/pdf"))
        web.route(site, "/img.png", body(b"\x89PNG....", ctype="image/png"))
        web.route(site, "/notes.txt", body(b"plain <a href='/x'>notes</a>", ctype="text/plain; charset=utf-8"))

    def _api(self, h: BaseHTTPRequestHandler) -> None:
        n = int(parse_qs(urlsplit(h.path).query)["page"][0])
        data = {"page": n, "has_next": n < self.api_pages, "items": [{"id": f"{n}-{i}"} for i in range(2)]}
        body(json.dumps(data).encode(), ctype="application/json")(h)

    def _search(self, h: BaseHTTPRequestHandler) -> None:
        got = h.rfile.read(int(h.headers.get("Content-Length") or 0))
        with self._lock:
            self.posts.append(got)
        body(b"results for " + got, ctype="text/plain; charset=utf-8")(h)


def expected_items(origin: str, api_pages: int = 3) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = [{"kind": "home", "url": origin + "/"}]
    items += [{"kind": "quote", "quote": t, "author": name, "n": i, "url": f"{origin}/author/{slug}"}
              for i, (t, name, slug) in enumerate(QUOTES)]
    items += [{"kind": "api", "id": f"{n}-{i}"} for n in range(1, api_pages + 1) for i in range(2)]
    items += [{"kind": "api_done", "pages": api_pages}]
    items += [{"kind": "feed", "title": "first post"}, {"kind": "feed", "title": "second post"}]
    items += [{"kind": "sitemap", "loc": "http://x.example/1"}, {"kind": "sitemap", "loc": "http://x.example/2"}]
    items += [{"kind": "search", "q": q, "answer": f"results for q={a}", "method": "POST"}
              for q, a in (("a", "a"), ("b", "b"), ("again", "a"))]
    # The errback gets the failure with its reason, the response and the request's data.
    items += [{"kind": "failed", "status": 404, "error": "http_4xx", "quote": "lost", "body": "gone away",
               "callback": "parse_author"}]
    items += [{"kind": "binary", "name": "doc", "size": len(PDF), "head": "%PDF-", "type": "application/pdf"}]
    items += [{"kind": "text", "text": "plain <a href='/x'>notes</a>", "links": []}]
    # The refused type and the page whose callback does not exist: neither reaches a callback; the
    # refused one reaches on_error (no errback of its own).
    items += [{"kind": "on_error", "url": origin + "/img.png", "error": "refused_type"}]
    return items


def _key(item: dict[str, Any]) -> str:
    return json.dumps(item, sort_keys=True)


def stored_items(db: Path) -> list[dict[str, Any]]:
    store = open_store(f"sqlite:///{db}")
    try:
        return [r["item"] for r in store.items()]
    finally:
        store.close()


def stored_pages(db: Path) -> dict[str, dict[str, Any]]:
    store = open_store(f"sqlite:///{db}")
    try:
        return {p["url"]: p for p in store.pages()}
    finally:
        store.close()


def test_callbacks_cb_kwargs_meta_apis_feeds_and_posts(make_web: Callable[..., TestWeb], tmp_path: Path,
                                                       r: redis.Redis, redis_url: str) -> None:
    web = make_web(1, 1)
    shop = Shop(web)
    origin = web.origin(0)
    out = tmp_path / "out"
    res = cli("crawl", origin + "/", "--spider", SPIDER, "--out", str(out), "--workers", "2",
              "--redis-url", redis_url, env={**os.environ, "CRAWLER_REFUSE_TYPES": "image/,video/"})
    assert res.returncode == 0, res.stderr[-3000:]
    job = res.stdout.split("job ", 1)[1].split(":", 1)[0]
    items = stored_items(out / "crawl.db")
    assert sorted(map(_key, items)) == sorted(map(_key, expected_items(origin)))

    # POST bodies: a and b fetched once each (the second "a" deduplicated), and "a" again for
    # dont_filter.
    assert sorted(shop.posts) == [b"q=a", b"q=a", b"q=b"]
    pages = stored_pages(out / "crawl.db")
    posts = [u for u in pages if u.startswith(origin + "/search")]
    assert len(posts) == 3 and all("#~" in u for u in posts)
    assert all(pages[u]["final_url"] == origin + "/search" for u in posts)
    # Non-HTML pages are stored with their status and type.
    assert pages[origin + "/api?page=1"]["content_type"] == "application/json"
    assert pages[origin + "/feed.xml"]["status"] == 200
    assert pages[origin + "/doc.pdf"]["content_length"] == len(PDF)
    png = pages[origin + "/img.png"]
    assert (png["status"], png["error"], png["content_type"], png["content_length"]) == (200, "refused_type",
                                                                                         "image/png", 0)
    assert pages[origin + "/missing"]["status"] == 404
    # The rejected requests were never fetched; the one with a missing callback was, and stored.
    paths = {h.path for h in web.hits()}
    assert "/big" not in paths and "/notjson" not in paths
    assert origin + "/nocallback" in pages

    counters = {k: int(v) for k, v in jobs.status(r, job)["counters"].items()}
    assert counters["spider_error:request_too_large"] == 1
    assert counters["spider_error:request_not_json"] == 1
    assert counters["spider_error:no_callback"] == 1
    assert counters["spider_error:parse"] == 1  # the 42
    assert counters["spider_error"] == 4


def _spread_web(make_web: Callable[..., TestWeb], sites: int, n: int, delay: float = 0.0) -> tuple[TestWeb, Shop]:
    web = make_web(sites, 1)
    shop = Shop(web, 0)
    for site in range(1, sites):
        for i in range(n):
            page = body(f"<html><body><h1>author {i} of {site}</h1></body></html>".encode())
            web.route(site, f"/author/{i}", slow(delay, page) if delay else page)
        web.route(site, "/search", shop._search, method="POST")
    return web, shop


def _spread_items(web: TestWeb, sites: int, n: int) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for site in range(1, sites):
        origin = web.origin(site)
        items += [{"kind": "quote", "quote": f"q{i}", "n": i, "author": f"author {i} of {site}",
                   "url": f"{origin}/author/{i}"} for i in range(n)]
        items += [{"kind": "search", "q": i, "answer": f"results for q={i}", "origin": origin} for i in range(3)]
    return items


def _spread_settings(web: TestWeb, sites: int, n: int, store: str, **kw: Any) -> Settings:
    details = ",".join(web.origin(s) for s in range(1, sites))
    return Settings.from_env(store=store, shards=2, spider=SPREAD, obey_robots=False,
                             spider_args=[f"details={details}", f"n={n}"],
                             allow_domains=[domain_of(web.origin(s)) for s in range(sites)], **kw)


def test_callbacks_and_data_reach_pages_fetched_on_the_other_shard_through_the_stores_frontier(
        make_web: Callable[..., TestWeb], workers: Workers, r: redis.Redis, tmp_path: Path) -> None:
    sites, n = 4, 6
    web, _ = _spread_web(make_web, sites, n)
    home = shard_of_url(web.origin(0) + "/", 2)
    assert {shard_of_url(web.origin(s) + "/", 2) for s in range(1, sites)} - {home}, "no detail on the other shard"
    for name, queue in (("s0", "shard-0"), ("s1", "shard-1")):
        workers.start(name, queue, wait=False)
    for name in ("s0", "s1"):
        workers.wait_ready(name, timeout=180)  # a loaded machine starts Celery slowly
    # Host queues of 2 in Redis: most requests wait in the store's frontier table on the way.
    settings = _spread_settings(web, sites, n, f"sqlite:///{tmp_path / 'c.db'}", host_queue_cap=2)
    job = jobs.submit(r, settings, [web.origin(0) + "/"])
    st = wait_done(r, job, timeout=240)
    assert int(st["counters"]["spilled"]) > 0
    items = stored_items(tmp_path / "c.db")
    assert sorted(map(_key, items)) == sorted(map(_key, _spread_items(web, sites, n)))
    assert "spider_error" not in st["counters"]
    # Both workers fetched pages (each serves one shard only).
    fetched_by = {p["fetched_by"] for p in stored_pages(tmp_path / "c.db").values()}
    assert len(fetched_by) == 2, fetched_by


def test_a_job_killed_mid_crawl_and_recovered_keeps_every_requests_callback_and_data(
        make_web: Callable[..., TestWeb], workers: Workers, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sites, n = 3, 12
    web, _ = _spread_web(make_web, sites, n, delay=0.25)
    server = RedisServer().start()  # nothing on disk: a restart comes back empty
    store_url = f"sqlite:///{tmp_path / 'crawl.db'}"
    try:
        monkeypatch.setenv("CRAWLER_REDIS_URL", server.url)
        workers.redis_url = server.url
        for name in ("w0", "w1"):
            workers.start(name, "shard-0,shard-1", env=FAST_RECOVERY, wait=False)
        for name in ("w0", "w1"):
            workers.wait_ready(name, timeout=180)
        client = connect(server.url)
        settings = _spread_settings(web, sites, n, store_url, per_host=1)
        job = jobs.submit(client, settings, [web.origin(0) + "/"])
        deadline = time.monotonic() + 60
        while int(client.hget(keys.counters(job), "stored") or 0) < 6:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert server.proc is not None
        server.proc.send_signal(signal.SIGKILL)  # mid-crawl: most details not fetched yet
        server.proc.wait()
        stored_before = len(stored_pages(tmp_path / "crawl.db"))
        assert stored_before < 1 + (sites - 1) * (n + 3)
        server = RedisServer(port=server.port).start()
        time.sleep(1.0)
        assert main(["recover", job, "--store", store_url, "--redis-url", server.url]) == 0
        st = wait_done(client, job, timeout=240)
        items = stored_items(tmp_path / "crawl.db")
        assert sorted(map(_key, items)) == sorted(map(_key, _spread_items(web, sites, n)))
        assert "spider_error" not in st["counters"]
    finally:
        workers.stop()
        server.stop()


def test_priority_puts_a_request_at_the_head_of_its_host_queue_and_specs_survive_the_frontier(
        r: redis.Redis) -> None:
    from crawler.frontier import Entry, Fetched, Frontier
    from crawler.spiders.request import Request, to_spec

    job = "job-prio"
    r.hset(keys.meta(job), mapping={"status": "running"})
    r.sadd(keys.JOBS, job)
    f = Frontier(r)
    spec = to_spec(Request("http://a.com/urgent", "cb", cb_kwargs={"x": "é \x1e"}, priority=2))
    late = to_spec(Request("http://a.com/late", "cb", priority=-1))
    f.admit(job, [Entry(f"http://a.com/p{i}") for i in range(3)], 1)
    f.admit(job, [Entry("http://a.com/late", spec=late), Entry("http://a.com/urgent", spec=spec, urgent=True)], 1)

    def one(now: float) -> tuple[Entry, str]:
        d = f.dispatch(job, 0, now=now, max_urls=1, per_host=1, delay=0.0, lease_timeout=60.0, concurrency=10)
        return d.items[0][0], d.token

    first, token = one(time.time())
    assert first.url == "http://a.com/urgent" and first.spec == spec and first.urgent
    # Retried (a 5xx): it comes back with its spec.
    f.fetched(job, [Fetched(first.url, token, time.time() - 1)], lease_timeout=60.0, delay=0.0)
    f.promote(job, now=time.time() + 1)
    order = []
    for _ in range(5):
        e, token = one(time.time() + 2)
        order.append(e)
        f.fetched(job, [Fetched(e.url, token)], lease_timeout=60.0, delay=0.0)
        f.release(job, [(e.url, token)], delay=0.0)
    assert [e.url for e in order] == ["http://a.com/urgent", "http://a.com/p0", "http://a.com/p1",
                                      "http://a.com/p2", "http://a.com/late"]
    assert order[0].spec == spec and order[-1].spec == late


def test_a_periodic_jobs_revisits_keep_their_callbacks_methods_and_data(
        make_web: Callable[..., TestWeb], workers: Workers, r: redis.Redis, tmp_path: Path) -> None:
    from crawler.control import periodic as cycles

    sites, n = 2, 3
    web, shop = _spread_web(make_web, sites, n)
    visits = {"count": 0}

    def changing(i: int) -> Callable[[BaseHTTPRequestHandler], None]:
        def handler(h: BaseHTTPRequestHandler) -> None:
            visits["count"] += 1  # the page changes on every visit: a revisit parses it again
            body(f"<html><body><h1>author {i} of 1</h1><p>{visits['count']}</p></body></html>".encode())(h)
        return handler

    for i in range(n):
        web.route(1, f"/author/{i}", changing(i))
    workers.start("w0", "shard-0,shard-1", wait=False)
    workers.wait_ready("w0", timeout=180)
    store_url = f"sqlite:///{tmp_path / 'c.db'}"
    settings = _spread_settings(web, sites, n, store_url, every=60.0, revisit_min=1.0, revisit_max=60.0)
    job = jobs.submit(r, settings, [web.origin(0) + "/"])
    deadline = time.monotonic() + 240
    while int(jobs.status(r, job)["counters"].get("stored", 0)) < 1 + n + 3:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    time.sleep(1.0)
    posts, author_hits = len(shop.posts), visits["count"]
    assert cycles.start_cycle(r, job, open_store, time.time() + 61) == 2
    while len(shop.posts) < posts + 3 or visits["count"] < author_hits + n:
        assert time.monotonic() < deadline, (shop.posts, visits)
        time.sleep(0.1)
    time.sleep(2.0)
    # POSTed again with their bodies (never a GET of the key), and the changed author pages went
    # to parse_author with their quotes again.
    assert sorted(shop.posts[posts:]) == [b"q=0", b"q=1", b"q=2"]
    assert not [h for h in web.hits() if "#" in h.path or (h.path == "/search")]
    items = stored_items(tmp_path / "c.db")
    assert sorted(map(_key, items)) == sorted(map(_key, _spread_items(web, sites, n)))
    assert "spider_error" not in jobs.status(r, job)["counters"]
