"""What counts as a redirect loop: the same request sent again, not the same URL. A POST answered
by a 303 to its own URL (Post/Redirect/Get) and a cookie gate that sets its cookie and sends the
client back to the page are followed as browsers, curl and Scrapy follow them; a request that
would go out exactly as before is still a loop."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler

from crawler.fetch.client import FetchResult, Hops, RequestSpec, runtime
from crawler.testweb import TestWeb
from tests.integration.test_fetch import CFG
from tests.web import handlers as hw


class CookieHops:
    """The smallest session a hop can have: the cookies each response set, sent on the next hops."""

    def __init__(self) -> None:
        self.cookies: dict[str, str] = {}

    def headers(self, url: str) -> Sequence[tuple[str, str]]:
        return [("Cookie", "; ".join(f"{k}={v}" for k, v in sorted(self.cookies.items())))] if self.cookies else []

    def received(self, url: str, headers: Sequence[tuple[str, str]]) -> None:
        for k, v in headers:
            if k.lower() == "set-cookie":
                name, _, rest = v.partition("=")
                self.cookies[name.strip()] = rest.split(";", 1)[0]


def _fetch(urls: list[str], hops: Hops | None = None,
           requests: Sequence[RequestSpec | None] | None = None) -> list[FetchResult]:
    rt = runtime()
    return rt.run(rt.fetcher(CFG).fetch_many(urls, CFG, None, hops=hops, requests=requests))


def _gate(h: BaseHTTPRequestHandler) -> None:
    if "seen=1" in (h.headers.get("Cookie") or ""):
        hw.body(b"<html><title>inside</title></html>")(h)
    else:
        hw.body(b"", 302, headers={"Location": "/gate", "Set-Cookie": "seen=1; Path=/"})(h)


def _post_comment(h: BaseHTTPRequestHandler) -> None:
    h.rfile.read(int(h.headers.get("Content-Length") or 0))
    hw.redirect("/comments", 303)(h)


def test_post_redirect_get_to_the_same_url_is_followed(make_web: Callable[..., TestWeb]) -> None:
    web = make_web(1, 2)
    web.route(0, "/comments", _post_comment, method="POST")
    web.route(0, "/comments", hw.body(b"<html><title>comments</title><p>c=hello</p></html>"))
    (res,) = _fetch([web.url(0, "/comments")], requests=[("POST", b"c=hello", ())])
    assert (res.error, res.status) == (None, 200), res
    assert b"c=hello" in res.body and res.redirects == [(303, web.url(0, "/comments"))]


def test_a_cookie_gate_that_sends_the_client_back_is_followed(make_web: Callable[..., TestWeb]) -> None:
    web = make_web(1, 2)
    web.route(0, "/gate", _gate)
    (res,) = _fetch([web.url(0, "/gate")], hops=CookieHops())
    assert (res.error, res.status, res.final_url) == (None, 200, web.url(0, "/gate")), res
    assert b"inside" in res.body


def test_the_same_request_sent_again_is_still_a_loop(make_web: Callable[..., TestWeb]) -> None:
    web = make_web(1, 2)
    web.route(0, "/self", hw.redirect("/self", 302))
    # A gate whose cookie never satisfies it: the second request repeats the first with the cookie.
    web.route(0, "/stuck", hw.body(b"", 302, headers={"Location": "/stuck", "Set-Cookie": "x=1"}))
    # Each with a session of its own: sharing one, /stuck's cookie could land between /self's
    # two requests and make them differ (the two are fetched at the same time).
    (plain,) = _fetch([web.url(0, "/self")], hops=CookieHops())
    (stuck,) = _fetch([web.url(0, "/stuck")], hops=CookieHops())
    assert plain.error == "redirect_loop" and len(plain.redirects) == 1, plain
    assert stuck.error == "redirect_loop" and len(stuck.redirects) == 2, stuck
