"""The HTTP fetcher against real servers on loopback."""

from __future__ import annotations

import gzip
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler

from crawler.fetch import FetchConfig, fetch_batch
from crawler.testweb import TestWeb
from tests.conftest import TEST_NETWORKS
from tests.web import handlers as hw

CFG = FetchConfig(user_agent="test-agent/1", connect_timeout=2, read_timeout=2, deadline=3, max_redirects=3,
                  max_body=50_000, allow_networks=tuple(TEST_NETWORKS.split(",")))


def test_redirect_hops_recorded(make_web: Callable[..., TestWeb]) -> None:
    web = make_web(1, 5)
    web.route(0, "/r1", hw.redirect("/r2", 302))
    web.route(0, "/r2", hw.redirect(web.url(0, "/p/1.html")))
    (res,) = fetch_batch([web.url(0, "/r1")], CFG)
    assert res.error is None and res.status == 200
    assert res.final_url == web.url(0, "/p/1.html")
    assert res.redirects == [(302, web.url(0, "/r1")), (301, web.url(0, "/r2"))]
    assert ("User-Agent", "test-agent/1") in res.request_headers


def test_a_redirect_that_adds_a_session_id_is_followed_as_given(make_web: Callable[..., TestWeb]) -> None:
    # A servlet container without the client's cookie sends it to the URL with the session in it
    # (encodeRedirectURL); the page is there only. Canonically the two URLs are one, which is no
    # loop.
    web = make_web(1, 2)
    page = hw.body(b"<html><title>shop</title></html>")
    web.route(0, "/shop", hw.redirect("/shop;jsessionid=0A1B2C3D4E5F6A7B", 302))
    web.route(0, "/shop;jsessionid=0A1B2C3D4E5F6A7B", page)
    web.route(0, "/cart", hw.redirect("/cart?PHPSESSID=5f3e2c1b0a9d8e7f", 302))
    web.route(0, "/cart?PHPSESSID=5f3e2c1b0a9d8e7f", page)
    shop, cart = fetch_batch([web.url(0, "/shop"), web.url(0, "/cart")], CFG)
    assert (shop.error, shop.status, shop.final_url) == (None, 200, web.url(0, "/shop;jsessionid=0A1B2C3D4E5F6A7B"))
    assert (cart.error, cart.status, cart.final_url) == (None, 200, web.url(0, "/cart?PHPSESSID=5f3e2c1b0a9d8e7f"))


def test_redirect_loop_and_chain_over_cap(make_web: Callable[..., TestWeb]) -> None:
    web = make_web(1, 2)
    web.route(0, "/loop-a", hw.redirect("/loop-b"))
    web.route(0, "/loop-b", hw.redirect("/loop-a"))
    for i in range(10):
        web.route(0, f"/chain/{i}", hw.redirect(f"/chain/{i + 1}"))
    loop, chain = fetch_batch([web.url(0, "/loop-a"), web.url(0, "/chain/0")], CFG)
    assert loop.error == "redirect_loop"
    assert chain.error == "too_many_redirects" and len(chain.redirects) == CFG.max_redirects + 1


def test_status_codes_become_reasons(make_web: Callable[..., TestWeb]) -> None:
    web = make_web(1, 2)

    def status(code: int) -> Callable[[BaseHTTPRequestHandler], None]:
        def handler(h: BaseHTTPRequestHandler) -> None:
            h.send_response(code)
            h.send_header("Content-Length", "0")
            h.end_headers()
        return handler

    for code in (404, 429, 503):
        web.route(0, f"/s{code}", status(code))
    got = fetch_batch([web.url(0, f"/s{c}") for c in (404, 429, 503)], CFG)
    assert [(g.status, g.error) for g in got] == [(404, "http_4xx"), (429, "http_429"), (503, "http_5xx")]


def test_body_cut_at_cap_even_when_compressed(make_web: Callable[..., TestWeb]) -> None:
    web = make_web(1, 2)
    web.route(0, "/big", hw.body(b"a" * 500_000))
    bomb = gzip.compress(b"<html>" + b"b" * 5_000_000)
    web.route(0, "/bomb", hw.body(bomb, headers={"Content-Encoding": "gzip"}))
    big, zipped = fetch_batch([web.url(0, "/big"), web.url(0, "/bomb")], CFG)
    assert big.error == "too_large" and len(big.body) == CFG.max_body
    assert zipped.error == "too_large" and len(zipped.body) == CFG.max_body


def test_connection_refused_is_named_and_batch_goes_on(make_web: Callable[..., TestWeb]) -> None:
    web = make_web(1, 3)
    from crawler.local.redis_server import free_port

    closed = f"http://127.0.0.1:{free_port()}/"
    refused, ok = fetch_batch([closed, web.url(0, "/")], CFG)
    assert refused.error == "connect" and refused.status is None
    assert ok.error is None and ok.status == 200 and b"Site 0" in ok.body


def test_blocked_network_never_contacted_even_through_a_redirect(make_web: Callable[..., TestWeb]) -> None:
    web = make_web(1, 2)
    outside = make_web(1, 2, base_ip="127.0.9.")  # loopback, but not in the allowed networks
    web.route(0, "/jump", hw.redirect(outside.url(0, "/")))
    direct, jumped = fetch_batch([outside.url(0, "/"), web.url(0, "/jump")], CFG)
    assert direct.error == "blocked_network" and direct.status is None
    assert jumped.error == "blocked_network" and jumped.redirects == [(301, web.url(0, "/jump"))]
    assert outside.hits() == []
    named = FetchConfig(**{**CFG.__dict__, "resolve": (("evil.test", "127.0.9.1"),)})
    (by_name,) = fetch_batch([f"http://evil.test:{outside.ports[0]}/"], named)
    assert by_name.error == "blocked_network" and outside.hits() == []


def test_by_default_loopback_is_blocked(make_web: Callable[..., TestWeb]) -> None:
    web = make_web(1, 2)
    default = FetchConfig(user_agent="t", deadline=3)
    (res,) = fetch_batch([web.url(0, "/")], default)
    assert res.error == "blocked_network" and web.hits() == []


def test_trickling_and_silent_servers_end_at_the_deadline(make_web: Callable[..., TestWeb]) -> None:
    import socket
    import threading
    import time

    web = make_web(1, 3)

    web.route(0, "/trickle", hw.trickle(chunks=20, every=0.5))
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(5)  # accepts connections, never answers
    threading.Thread(target=lambda: [silent.accept() for _ in range(2)], daemon=True).start()
    cfg = FetchConfig(**{**CFG.__dict__, "deadline": 2.0, "read_timeout": 5.0})
    start = time.monotonic()
    slow, hang, ok = fetch_batch(
        [web.url(0, "/trickle"), f"http://127.0.0.1:{silent.getsockname()[1]}/", web.url(0, "/")], cfg)
    took = time.monotonic() - start
    silent.close()
    assert slow.error == "timeout" and hang.error == "timeout"
    assert ok.error is None and ok.status == 200  # the healthy host was not held up
    assert took < 3.5


def test_not_html_is_metadata_only(make_web: Callable[..., TestWeb]) -> None:
    web = make_web(1, 2)
    web.route(0, "/file.pdf", hw.body(b"%PDF-1.4" + b"x" * 40_000, headers={"Content-Type": "application/pdf"}))
    (res,) = fetch_batch([web.url(0, "/file.pdf")], CFG)
    assert res.status == 200 and res.error == "not_html" and res.body == b""
    assert res.content_type == "application/pdf"
