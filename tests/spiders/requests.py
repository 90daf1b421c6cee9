"""Spiders written the callback way, for tests/integration/test_requests.py: list -> detail with
cb_kwargs and meta, a paged JSON API, an RSS feed and a sitemap, POST requests, and requests
that must each cost only themselves (1 MB of cb_kwargs, a callback that does not exist, garbage)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from crawler.spiders import Page, Request, Spider


class CallbackSpider(Spider):
    """The site (``tests/integration/test_requests.py``'s ``shop``): ``/`` lists quotes, each
    linking to its author; ``/api?page=N`` a paged JSON API; ``/feed.xml`` RSS; ``/sitemap.xml``;
    ``/search`` answers POSTs."""

    version = "callbacks-1"
    follow_links = False

    def parse(self, page: Page) -> Iterator[Any]:
        for i, q in enumerate(page.css("div.quote")):
            text = q.css("span.text::text").get()
            yield page.follow(q.css("a.author")[0], callback=self.parse_author, cb_kwargs={"quote": text},
                              meta={"n": i})
        yield page.follow("/api?page=1", callback="parse_api", meta={"pages": 1})
        yield page.follow("/feed.xml", self.parse_feed)
        yield page.follow("/sitemap.xml", self.parse_sitemap)
        for q in ("a", "b", "a"):
            yield Request(page.urljoin("/search"), callback="parse_search", method="POST", body=f"q={q}",
                          headers={"Content-Type": "application/x-www-form-urlencoded"}, cb_kwargs={"q": q})
        yield Request(page.urljoin("/search"), callback="parse_search", method="POST", body="q=a",
                      headers={"Content-Type": "application/x-www-form-urlencoded"}, cb_kwargs={"q": "again"},
                      dont_filter=True)
        # Each of these costs itself only.
        yield page.follow("/big", self.parse_author, cb_kwargs={"quote": "x" * 1_000_000})
        yield page.follow("/nocallback", callback="no_such_method")
        yield page.follow("/notjson", callback="parse_author", cb_kwargs={"quote": object()})
        yield 42
        yield {"kind": "home", "url": page.url}
        yield page.follow("/missing", callback=self.parse_author, errback=self.on_fail, cb_kwargs={"quote": "lost"})
        yield page.follow("/doc.pdf", callback=self.parse_binary, cb_kwargs={"name": "doc"})
        yield page.follow("/img.png", callback=self.parse_binary, cb_kwargs={"name": "img"})  # refused
        yield page.follow("/notes.txt", callback=self.parse_text)

    def parse_author(self, page: Page, quote: str) -> Iterator[Any]:
        yield {"kind": "quote", "quote": quote, "author": page.css("h1::text").get(), "n": page.meta["n"],
               "url": page.url}

    def parse_api(self, page: Page) -> Iterator[Any]:
        data = page.json()
        for row in data["items"]:
            yield {"kind": "api", **row}
        if data["has_next"]:
            n = data["page"] + 1
            yield page.follow(f"/api?page={n}", callback=self.parse_api, meta={"pages": page.meta["pages"] + 1})
        else:
            yield {"kind": "api_done", "pages": page.meta["pages"]}

    def parse_feed(self, page: Page) -> Iterator[Any]:
        for item in page.xpath("//item"):
            yield {"kind": "feed", "title": item.xpath("title/text()").get()}

    def parse_sitemap(self, page: Page) -> Iterator[Any]:
        page.selector.remove_namespaces()
        for loc in page.xpath("//loc/text()").getall():
            yield {"kind": "sitemap", "loc": loc}

    def parse_search(self, page: Page, q: str) -> Iterator[Any]:
        yield {"kind": "search", "q": q, "answer": page.text, "method": page.request.method}

    def parse_binary(self, page: Page, name: str) -> Iterator[Any]:
        yield {"kind": "binary", "name": name, "size": len(page.body), "head": page.body[:5].decode("latin-1"),
               "type": page.content_type}

    def parse_text(self, page: Page) -> Iterator[Any]:
        yield {"kind": "text", "text": page.text, "links": page.links}

    def on_fail(self, page: Page) -> Iterator[Any]:
        yield {"kind": "failed", "status": page.status, "error": page.error, "quote": page.cb_kwargs["quote"],
               "body": page.text, "callback": page.request.callback}

    def on_error(self, page: Page) -> Iterator[Any]:
        yield {"kind": "on_error", "url": page.url, "error": page.error}


class SpreadSpider(Spider):
    """The list on one site, its details on others (``spider_args``: ``details``, comma-separated
    origins): each detail request carries its quote (cb_kwargs), its number (meta) and, for
    POSTs, a body, to whichever shard owns the detail's host. Used by the two-shard and the
    recovery tests; ``n`` quotes per origin."""

    version = "spread-1"
    follow_links = False
    details = ""
    n = "10"

    def parse(self, page: Page) -> Iterator[Any]:
        for origin in self.details.split(","):
            for i in range(int(self.n)):
                yield Request(f"{origin}/author/{i}", callback="parse_author", cb_kwargs={"quote": f"q{i}"},
                              meta={"n": i, "origin": origin})
            for i in range(3):
                yield Request(f"{origin}/search", callback="parse_search", method="POST", body=f"q={i}",
                              cb_kwargs={"q": i}, meta={"origin": origin}, priority=1)

    def parse_author(self, page: Page, quote: str) -> Iterator[Any]:
        assert page.meta["origin"] + f"/author/{page.meta['n']}" == page.url
        yield {"kind": "quote", "quote": quote, "n": page.meta["n"], "author": page.css("h1::text").get(),
               "url": page.url}

    def parse_search(self, page: Page, q: int) -> Iterator[Any]:
        yield {"kind": "search", "q": q, "answer": page.text, "origin": page.meta["origin"]}
