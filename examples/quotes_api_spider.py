"""A paged JSON API (``/api/quotes?page=N`` answering ``{"quotes": [...], "has_next": true,
"page": N}``), read from ``start_requests``: the first request carries its page number in
``meta``, each response's callback asks for the next page while ``has_next`` says so.

    crawler crawl --spider examples/quotes_api_spider.py:QuotesApiSpider \\
        --spider-arg base=http://127.0.0.1:8000 --allow-domain 127.0.0.1 --out quotes

Its items go through an item pipeline (``pipelines``) that drops untagged quotes.
``examples/scrapy_quotes_api.py`` is the same spider written for Scrapy.

On the built-in quotes site, served on loopback:

    crawler demo --quotes --spider examples/quotes_api_spider.py:QuotesApiSpider
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from crawler.spiders import DropItem, Page, Request, Spider


class TaggedOnly:
    """An item pipeline: quotes without tags are dropped, the rest get their tag count."""

    def process_item(self, item: dict[str, Any], spider: Spider) -> dict[str, Any]:
        if not item.get("tags"):
            raise DropItem("untagged")
        return {**item, "tag_count": len(item["tags"])}


class QuotesApiSpider(Spider):
    name = "quotes-api"
    version = "1"
    follow_links = False
    base = "http://127.0.0.1:8000"  # --spider-arg base=...
    pipelines = [TaggedOnly]

    def start_requests(self) -> Iterator[Request]:
        yield Request(f"{self.base.rstrip('/')}/api/quotes?page=1", callback="parse_api", meta={"page": 1},
                      headers={"Accept": "application/json"})

    def parse_api(self, page: Page) -> Iterator[Any]:
        data = page.json()
        for quote in data["quotes"]:
            yield {"text": quote["text"], "author": quote["author"]["name"], "tags": quote["tags"]}
        if data["has_next"]:
            n = page.meta["page"] + 1
            yield page.follow(f"/api/quotes?page={n}", callback=self.parse_api, meta={"page": n},
                              headers={"Accept": "application/json"})
