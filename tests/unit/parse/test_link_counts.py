"""Hrefs that are not links are told apart: an in-page anchor or a mailto: is not a broken URL."""

from __future__ import annotations

from crawler.parse import parse_html


def test_fragment_not_http_and_broken_hrefs_are_counted_apart() -> None:
    body = b'<a href="#x">x</a><a href="mailto:a@b.c">m</a><a href="http://[::1">b</a><a href="/ok">ok</a>'
    p = parse_html("http://e.com/", body, "text/html")
    assert p.links == ["http://e.com/ok"]
    assert (p.fragment_links, p.not_http_links, p.bad_links) == (1, 1, 1)
    assert p.skipped_links == 3
