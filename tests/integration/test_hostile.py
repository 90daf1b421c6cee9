"""A crawl of a mixed healthy and hostile web finishes in bounded time, with every healthy page
stored and every hostile URL stored with its reason, and the worker never crashing."""

from __future__ import annotations

import gzip
import sqlite3
import time
import zlib
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import brotli
import redis

from crawler import jobs
from crawler.config.settings import Settings
from crawler.testweb import TestWeb
from tests.conftest import Workers, wait_done
from tests.web import handlers as hw

MB = 1_000_000


def _hang(h: BaseHTTPRequestHandler) -> None:
    time.sleep(30)  # accepted, never answered


def _calendar(month: int) -> hw.Handler:
    return hw.body(hw.html(f"month {month}", [f"/cal/{month + 1}"]))


def _session(h: BaseHTTPRequestHandler) -> None:
    sid = time.monotonic_ns()
    hw.body(hw.html("session", [f"/sid?s={sid}"]))(h)


def test_mixed_healthy_and_hostile_web(make_web: Callable[..., TestWeb], workers: Workers, r: redis.Redis,
                                       tmp_path: Path) -> None:
    healthy = make_web(3, 30)
    bad = make_web(1, 1, base_ip="127.0.2.")
    outside = make_web(1, 1, base_ip="127.0.9.")  # loopback, but not an allowed network
    scope_other = make_web(1, 1, base_ip="127.0.4.")  # allowed network, other domain
    o = bad.origin(0)
    expect: dict[str, str | None] = {
        "/loop-a": "redirect_loop", "/chain/0": "too_many_redirects", "/out": "out_of_scope",
        "/to-private": "robots", "/private/x": "robots", "/blocked": "blocked_network", "/huge": "too_large",
        "/gzip-bomb": "too_large", "/deflate-bomb": "too_large", "/br-bomb": "too_large",
        "/trickle": "timeout", "/hang": "timeout", "/doc.pdf": "not_html", "/server-error": "http_5xx",
        "/gone": "http_4xx", "/broken.html": None, "/after-broken.html": None, "/meta-charset.html": None,
        "/bom.html": None, "/bad-hrefs.html": None,
    }
    routes: dict[str, hw.Handler] = {
        "/robots.txt": hw.body(b"User-agent: *\nDisallow: /private/\n", ctype="text/plain"),
        "/loop-a": hw.redirect("/loop-b"), "/loop-b": hw.redirect("/loop-a"),
        "/out": hw.redirect(scope_other.url(0, "/"), 302),
        "/to-private": hw.redirect("/private/y", 302),
        "/private/y": hw.body(hw.html("never")),
        "/blocked": hw.redirect(outside.url(0, "/"), 302),
        "/huge": hw.body(b"<html>" + b"a" * (3 * MB)),
        "/gzip-bomb": hw.body(gzip.compress(b" " * (50 * MB)), headers={"Content-Encoding": "gzip"}),
        "/deflate-bomb": hw.body(zlib.compress(b" " * (50 * MB)), headers={"Content-Encoding": "deflate"}),
        "/br-bomb": hw.body(brotli.compress(b" " * (50 * MB)), headers={"Content-Encoding": "br"}),
        "/trickle": hw.trickle(), "/hang": _hang,
        "/doc.pdf": hw.body(b"%PDF-1.4 " + b"z" * 10_000, ctype="application/pdf"),
        "/server-error": hw.body(b"oops", 500), "/gone": hw.body(b"gone", 410),
        "/broken.html": hw.body(b"<html><title>Bro\x00ken</title><body><div><a href='/after-broken.html'>n"
                                b"<table><tr><td>\x00\x00<p"),
        "/after-broken.html": hw.body(hw.html("after")),
        "/meta-charset.html": hw.body('<html><head><meta charset="windows-1251"><title>Привет</title>'
                                      '</head></html>'.encode("cp1251"), ctype="text/html"),
        "/bom.html": hw.body("<html><head><title>Grüße</title></head></html>".encode("utf-16"), ctype="text/html"),
        "/bad-hrefs.html": hw.body(b"".join(f'<a href="{h}">x</a>'.encode() for h in [
            "javascript:alert(1)", "mailto:a@b.c", "data:text/html,x", "ftp://x.org/", "http://[::1",
            "http://%zz/", "/" + "q" * 3000, "  /after-broken.html  "])),
        "/cal/1": _calendar(1), "/a/": hw.body(hw.html("a", ["a/"])), "/sid": _session,
    }
    for i in range(12):
        routes[f"/chain/{i}"] = hw.redirect(f"/chain/{i + 1}")
    for month in range(2, 400):
        routes[f"/cal/{month}"] = _calendar(month)
    for depth in range(2, 12):
        routes["/a" * depth + "/"] = hw.body(hw.html("a", ["a/"]))
    for path, handler in routes.items():
        bad.route(0, path, handler)
    index_links = [*expect, "/cal/1", "/a/", "/sid?s=0"]
    bad.route(0, "/", hw.body(hw.html("hostile index", index_links)))
    bad.route(0, "/sid?s=0", _session)

    workers.start("w0", "shard-0,shard-1,shard-2,shard-3")
    workers.start("w1", "shard-0,shard-1,shard-2,shard-3")
    settings = Settings.from_env(store=f"sqlite:///{tmp_path}/c.db", max_body=MB, request_deadline=2.0,
                                 read_timeout=5.0, max_attempts=2, retry_base=0.2, max_pages_per_host=60,
                                 max_repeated_segments=3, per_host=4, autothrottle=False,
                                 # the forbidden address is in scope: only the network guard stops it
                                 allow_domains=[*healthy.ips, bad.ips[0], outside.ips[0]])
    start = time.monotonic()
    job_id = jobs.submit(r, settings, [*healthy.seeds(), bad.url(0, "/")])
    st = wait_done(r, job_id, timeout=120)
    took = time.monotonic() - start
    conn = sqlite3.connect(tmp_path / "c.db")
    conn.row_factory = sqlite3.Row
    rows = {row["url"]: dict(row) for row in conn.execute("SELECT * FROM pages")}

    for url in healthy.reachable_urls():
        assert url in rows and rows[url]["error"] in (None, "http_4xx"), url
    for path, reason in expect.items():
        row = rows.get(o + path)
        assert row is not None, path
        assert row["error"] == reason, (path, row["error"], row["status"])
    assert rows[o + "/broken.html"]["title"] == "Broken"
    assert rows[o + "/meta-charset.html"]["title"] == "Привет"
    assert rows[o + "/bom.html"]["title"] == "Grüße"
    assert rows[o + "/huge"]["content_length"] == MB
    assert outside.hits() == [] and scope_other.hits() == []
    assert not [h for h in bad.hits() if h.path.startswith("/private/")]

    hostile_pages = [u for u in rows if u.startswith(o)]
    assert len(hostile_pages) == 60  # the per-host budget, exactly, ended the calendar and session traps
    assert not [u for u in rows if u.count("/a") > 3]  # the repeated-segment rule ended /a/a/a/...
    c = st["counters"]
    assert c["dropped_host_budget"] > 0 and c["dropped_trap"] > 0 and c["bad_url"] >= 3
    assert c["links_not_http"] >= 4  # javascript:, mailto:, data:, ftp: are not broken URLs
    print(f"mixed hostile crawl: {len(rows)} rows in {took:.1f}s; counters {c}")
    assert took < 90
