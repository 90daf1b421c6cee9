"""``Request``: user values in one normal form, the compact spec that travels with a frontier
entry, keys and fingerprints as Scrapy dedups them, and ``page.follow``/``follow_all``/``json``
and XML selectors."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest
from parsel import Selector

from crawler.config.settings import Settings
from crawler.frontier.entry import Entry
from crawler.spiders import Follow, Page, Request, Spider
from crawler.spiders.page import NotJSON
from crawler.spiders.request import (
    bad_header,
    fingerprint,
    from_spec,
    is_unfiltered,
    origin_of,
    request,
    request_key,
    strip_mark,
    to_spec,
    urgent_spec,
)
from crawler.spiders.run import json_item, request_spec, run_page_hook
from crawler.stages.messages import FetchedPage, LinkGroup
from crawler.stages.parse import _outlinks


class S(Spider):
    def parse(self, page: Page) -> Any:
        yield page.follow("/d", callback=self.parse_detail, cb_kwargs={"a": 1})

    def parse_detail(self, page: Page, a: int) -> Any:
        yield {"a": a, "m": page.meta.get("m")}

    async def parse_async(self, page: Page) -> Any:
        yield {"async": True}
        yield page.follow("/x")


def test_user_values_take_one_normal_form() -> None:
    s = S()
    req = Request("http://h/a", callback=s.parse_detail, method="post", body="é",
                  headers=[("X-A", b"1")], errback=s.parse)
    assert req.callback == "parse_detail" and req.errback == "parse"
    assert req.method == "POST" and req.body == "é".encode()
    assert req.headers == {"X-A": "1"}
    assert request("http://h/a", s.parse_detail, body="x", method=None) == Request(  # type: ignore[arg-type]
        "http://h/a", "parse_detail", body=b"x")
    assert Follow("http://h/") == Request("http://h/") and Request("http://h/").plain
    assert not Request("http://h/", meta={"a": 1}).plain
    assert hash(Request("http://h/", meta={"a": 1})) == hash(Request("http://h/", meta={"a": 1}))
    assert req.replace(url="http://h/b").url == "http://h/b"


def test_the_spec_keeps_only_what_differs_and_round_trips() -> None:
    assert to_spec(Request("http://h/")) == "{}"
    full = Request("http://h/a", "cb", "PUT", {"H": "v"}, b"\xff\x00binary", {"k": [1, 2]}, {"m": {"x": None}}, 5,
                   True, "eb")
    spec = to_spec(full)
    assert "http://h/a" not in spec  # the key carries the URL
    assert from_spec(spec, "http://h/a#~u1234") == full
    assert from_spec(to_spec(full, with_url=True)) == full
    text = Request("http://h/a", body="q=1")
    assert json.loads(to_spec(text)) == {"m": "GET", "b": "q=1"} or json.loads(to_spec(text)) == {"b": "q=1"}
    assert urgent_spec(to_spec(full)) and not urgent_spec(to_spec(Request("u", priority=-1)))
    with pytest.raises(TypeError):
        to_spec(Request("http://h/", cb_kwargs={"x": object()}))


def test_keys_dedup_by_method_url_and_body() -> None:
    u = "http://h/search"
    assert request_key(Request(u, "cb", meta={"a": 1}), u) == u  # a GET is its URL: links dedup with it
    a1 = request_key(Request(u, method="POST", body=b"q=a"), u)
    a2 = request_key(Request(u, "other", method="POST", body=b"q=a", cb_kwargs={"z": 1}), u)
    b = request_key(Request(u, method="POST", body=b"q=b"), u)
    assert a1 == a2 != b and a1.startswith(u + "#~") and strip_mark(a1) == u
    assert request_key(Request(u, body=b"x"), u) != request_key(Request(u, method="PUT", body=b"x"), u)
    assert fingerprint("post", u, b"q=a") == fingerprint("POST", u, b"q=a")
    d1, d2 = (request_key(Request(u, dont_filter=True), u, origin_of("http://h/", 0, i)) for i in range(2))
    assert d1 != d2 and is_unfiltered(d1) and not is_unfiltered(a1)


def test_dont_filter_keys_are_the_same_when_the_same_fetch_is_parsed_again() -> None:
    """A redelivered parse (or an expired lease) must not multiply dont_filter requests: their
    keys come from the parent, its fetch and their position, so dedup drops the repeat; the
    next cycle's fetch of the parent (a periodic revisit) gives new ones."""
    u = "http://h/child"
    reqs = [Request(u, "child", cb_kwargs={"i": i}, dont_filter=True) for i in range(3)]

    def keys(parent: str, cycle: int) -> list[str]:
        return [request_key(r, u, origin_of(parent, cycle, n)) for n, r in enumerate(reqs)]

    first = keys("http://h/", 0)
    assert len(set(first)) == 3 and all(is_unfiltered(k) and strip_mark(k) == u for k in first)
    assert keys("http://h/", 0) == first  # parsed again: the same keys, dropped by dedup
    assert not set(keys("http://h/", 1)) & set(first)  # revisited next cycle: fetched again
    assert not set(keys("http://h/other", 0)) & set(first)  # another parent: its own
    # Two different requests at the same place (a callback that is not deterministic) differ.
    assert request_key(Request(u, method="POST", body=b"x", dont_filter=True), u, "o") != request_key(
        Request(u, method="POST", body=b"y", dont_filter=True), u, "o")


def test_parse_gives_dont_filter_requests_the_same_keys_on_a_repeat_parse() -> None:
    class DF(Spider):
        def parse(self, page: Page) -> Any:
            for i in range(3):
                yield page.follow("/c", callback="child", cb_kwargs={"i": i}, dont_filter=True)

    spider = DF()
    page = FetchedPage("http://h/", status=200, content_type="text/html", cycle=2)
    got = run_page_hook(spider, "parse", Page("http://h/", body=b"<html></html>", content_type="text/html"),
                        100, 10_000)
    s = Settings()

    def outlinks() -> list[str]:
        return _outlinks(spider, page, got, [], s, s.dropped_params, Counter())[0]

    once = outlinks()
    assert len(once) == 3 and once == outlinks()


def test_an_entry_carries_its_spec_and_old_entries_read_as_before() -> None:
    spec = to_spec(Request("http://h/a", "cb", cb_kwargs={"s": "a b\nc \x1e"}, priority=3))
    e = Entry("http://h/a#~abc", 2, "http://h/", 1, spec, True)
    assert Entry.decode(e.encode()) == e
    assert "\x1d" in e.encode()  # urgent: the admit script puts it at the head of its host queue
    assert Entry.decode("1 0 10 http://h/a http://h/") == Entry("http://h/a", 1, "http://h/")
    plain = Entry("http://h/a", 1, "http://h/")
    assert plain.encode() == "1 0 10 http://h/a http://h/"


def test_messages_carry_specs_and_read_without_them() -> None:
    g = LinkGroup("http://h/", 1, ("http://h/a", "http://h/b#~x"), (("http://h/b#~x", "{}"),))
    assert LinkGroup.from_json(g.to_json()) == g
    assert "specs" not in LinkGroup("http://h/", 1, ("http://h/a",)).to_json()
    p = FetchedPage("http://h/a", request='{"cb":"x"}', requests=(("k", "{}"),))
    assert FetchedPage.from_json(json.loads(json.dumps(p.to_json()))) == p
    assert "request" not in FetchedPage("http://h/a").to_json()


def test_oversized_and_unjsonable_requests_are_counted_errors() -> None:
    counts: Counter[str] = Counter()
    assert request_spec(Request("http://h/", cb_kwargs={"x": "y" * 70_000}), 65536, counts, S(), "u") is None
    assert request_spec(Request("http://h/", meta={"x": {1, 2}}), 65536, counts, S(), "u") is None
    assert counts == {"spider_error": 2, "spider_error:request_too_large": 1, "spider_error:request_not_json": 1}
    assert request_spec(Request("http://h/", "cb"), 65536, counts, S(), "u") == '{"cb":"cb"}'


def test_a_lone_surrogate_is_a_counted_error_not_a_crash() -> None:
    """Text decoded with surrogateescape holds lone surrogates: JSON takes them, UTF-8 (Redis,
    the store) does not. Refused here, costing the request or item only."""
    counts: Counter[str] = Counter()
    assert request_spec(Request("http://h/", cb_kwargs={"t": "x\udc80"}), 65536, counts, S(), "u") is None
    assert request_spec(Request("http://h/", meta={"k\ud800": 1}), 65536, counts, S(), "u") is None
    assert counts == {"spider_error": 2, "spider_error:request_not_json": 2}
    assert request_spec(Request("http://h/", cb_kwargs={"t": "5€"}), 65536, counts, S(), "u") == '{"kw":{"t":"5€"}}'
    assert json_item({"bad": "x\udc80"}) is None and json_item({"ok": "5€"}) == '{"ok": "5€"}'

    class Items(Spider):
        def parse(self, page: Page) -> Any:
            yield {"bad": "x\udc80"}
            yield {"good": 1}

    got = run_page_hook(Items(), "parse", Page("http://h/", body=b"<html></html>"), 100, 10_000)
    assert got.items == [{"good": 1}] and got.counts == {"spider_error": 1, "spider_error:item_not_json": 1}


@pytest.mark.parametrize("headers", [
    {"X-A": "a\r\nInjected: 1"}, {"X-A": "a\nb"}, {"X-A": "a\x00b"}, {"Bad Name:": "v"}, {"": "v"},
    {"X-Ä": "v"}, {"Content-Length": "3"}, {"transfer-encoding": "chunked"}, {"X-A": "v" * 9000},
    {f"X-{i}": "v" for i in range(65)},
])
def test_headers_that_cannot_be_sent_are_refused_when_yielded(headers: dict[str, str],
                                                              caplog: pytest.LogCaptureFixture) -> None:
    counts: Counter[str] = Counter()
    assert request_spec(Request("http://h/", "cb", headers=headers), 65536, counts, S(), "http://h/p") is None
    assert counts == {"spider_error": 1, "spider_error:request_bad_header": 1}
    assert len(caplog.records) == 1 and "http://h/" in caplog.text
    if len(headers) == 1:
        assert repr(next(iter(headers)))[:20] in caplog.text  # the field is named


def test_headers_that_can_be_sent_pass() -> None:
    ok = {"User-Agent": "MyUA/1", "X-Tab": "a\tb", "X-E": "5€", "Accept": "application/json"}
    assert bad_header(ok) is None
    assert json.loads(request_spec(Request("http://h/", headers=ok), 65536, Counter(), S(), "u") or "")["h"] == ok


def test_callbacks_get_cb_kwargs_and_missing_ones_are_counted() -> None:
    page = Page("http://h/a", body=b"<html></html>", request=Request("http://h/a", "parse_detail", meta={"m": 7},
                                                                     cb_kwargs={"a": 3}))
    got = run_page_hook(S(), "parse_detail", page, 100, 10_000, page.cb_kwargs)
    assert got.items == [{"a": 3, "m": 7}]
    got = run_page_hook(S(), "parse", page, 100, 10_000)
    assert got.requests == [Request("http://h/d", "parse_detail", cb_kwargs={"a": 1})] and not got.links
    missing = run_page_hook(S(), "nope", page, 100, 10_000)
    assert missing.counts == {"spider_error": 1, "spider_error:no_callback": 1}
    assert run_page_hook(S(), "_private", page, 100, 10_000).counts["spider_error:no_callback"] == 1
    agen = run_page_hook(S(), "parse_async", page, 100, 10_000)
    assert agen.items == [{"async": True}] and agen.links == ["http://h/x"]


def test_follow_takes_urls_selectors_and_requests() -> None:
    html = b"""<html><head><base href="http://h/dir/"></head><body>
      <a class="n" href="next">n</a><a class="n">no href</a><link rel="x" href="/l"><p class="n">p</p></body></html>"""
    page = Page("http://h/dir/x#~abcd", body=html, content_type="text/html")
    assert page.url == "http://h/dir/x"
    assert page.request == Request("http://h/dir/x") and page.meta == {} and page.cb_kwargs == {}
    assert page.follow("c.html") == Follow("http://h/dir/c.html")
    a = page.css("a.n")[0]
    assert page.follow(a, callback="cb", meta={"k": 1}) == Request("http://h/dir/next", "cb", meta={"k": 1})
    assert page.follow(page.css("a.n::attr(href)")[0]).url == "http://h/dir/next"
    assert page.follow(page.css("link")[0]).url == "http://h/l"
    with pytest.raises(ValueError):
        page.follow(page.css("p")[0])
    with pytest.raises(ValueError):
        page.follow(page.css("a.n")[1])
    assert page.follow(Request("rel", "cb")) == Request("http://h/dir/rel", "cb")
    assert [r.url for r in page.follow_all(css="a.n")] == ["http://h/dir/next"]  # no href: skipped
    assert [r.url for r in page.follow_all(xpath="//link")] == ["http://h/l"]
    assert [r.callback for r in page.follow_all(["a", "b"], "cb")] == ["cb", "cb"]
    with pytest.raises(ValueError):
        page.follow_all(["a"], css="a")
    assert isinstance(page.css("a")[0], Selector)


def test_json_xml_text_and_binary_pages() -> None:
    j = Page("http://h/api", body=b'{"a": [1, 2]}', content_type="application/json")
    assert j.json() == {"a": [1, 2]} and j.links == [] and j.text == '{"a": [1, 2]}'
    with pytest.raises(NotJSON, match=r"http://h/x .*is not JSON"):
        Page("http://h/x", body=b"<html>", content_type="text/html").json()
    rss = Page("http://h/f", body=b'<?xml version="1.0" encoding="UTF-8"?><rss><channel><item><title>t</title>'
                                   b"<link>http://h/p</link></item></channel></rss>", content_type="text/xml")
    assert rss.xpath("//item/title/text()").getall() == ["t"] and rss.css("item link::text").get() == "http://h/p"
    atom = Page("http://h/a", body=b'<feed xmlns="http://www.w3.org/2005/Atom"><entry><title>x</title></entry>'
                                   b"</feed>", content_type="application/atom+xml")
    assert atom.xpath("//a:entry/a:title/text()", namespaces={"a": "http://www.w3.org/2005/Atom"}).get() == "x"
    broken = Page("http://h/b", body=b"<rss><unclosed>", content_type="application/rss+xml")
    assert broken.xpath("//item").getall() == []
    binary = Page("http://h/p.pdf", body=b"%PDF-\x00\xff", content_type="application/pdf")
    assert binary.body == b"%PDF-\x00\xff" and binary.links == []


def test_warc_request_records_say_the_method_and_body_a_spider_asked_for() -> None:
    from crawler.store.base import PageRecord
    from crawler.store.warc import _method_and_body

    post = to_spec(Request("http://h/s", "cb", method="POST", body=b"q=a"))
    assert _method_and_body(PageRecord("http://h/s#~x", "j", "f", request=post)) == ("POST", b"q=a")
    binary = to_spec(Request("http://h/s", method="PUT", body=b"\xff\x00"))
    assert _method_and_body(PageRecord("http://h/s#~y", "j", "f", request=binary)) == ("PUT", b"\xff\x00")
    # Redirected: the last hop of a POST was a GET; a plain page is a GET.
    assert _method_and_body(PageRecord("u", "j", "f", request=post, redirects=[[302, "u"]])) == ("GET", b"")
    assert _method_and_body(PageRecord("u", "j", "f")) == ("GET", b"")


def test_a_spec_keeps_tuples_and_keys_that_json_alone_would_change() -> None:
    from crawler.spiders.request import from_spec, request, to_spec

    given = {"t": (1, (2, "x")), "d": {1: "one", (2, 3): [4, (5,)]}, "plain": {"a": [1]}, "tag": {"__tuple__": 1}}
    back = from_spec(to_spec(request("http://e.com/", "cb", cb_kwargs=given, meta={"m": (1,)})), "http://e.com/")
    assert back.cb_kwargs == given and back.meta == {"m": (1,)}
    assert isinstance(back.cb_kwargs["t"], tuple) and isinstance(back.cb_kwargs["t"][1], tuple)
    loop: dict[str, Any] = {}
    loop["self"] = loop
    with pytest.raises(ValueError, match="Circular"):  # counted request_not_json, as json.dumps had it
        to_spec(request("http://e.com/", "cb", meta={"ctx": loop}))
    plain = to_spec(request("http://e.com/", "cb", cb_kwargs={"a": [1, {"b": 2}]}))
    assert plain == '{"cb":"cb","kw":{"a":[1,{"b":2}]}}'
