"""A Scrapy spider reading a paged JSON API (``/api/quotes?page=N`` answering
``{"quotes": [...], "has_next": true, "page": N}``), written for Scrapy and run unchanged by the
crawler:

    scrapy runspider examples/scrapy_quotes_api.py -a base=http://127.0.0.1:8000 -O quotes.jsonl
    crawler crawl --spider examples/scrapy_quotes_api.py:QuotesApiSpider \\
        --spider-arg base=http://127.0.0.1:8000 --out quotes

On the built-in quotes site, served on loopback:

    crawler demo --quotes --spider examples/scrapy_quotes_api.py:QuotesApiSpider
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import attrs
import scrapy
from itemadapter import ItemAdapter
from scrapy.exceptions import DropItem


@attrs.define
class ApiQuote:
    text: str
    author: str
    tags: list[str]


class TaggedOnly:
    """An item pipeline: quotes without tags are dropped, the rest get their tag count."""

    def process_item(self, item: Any) -> dict[str, Any]:
        adapter = ItemAdapter(item)
        if not adapter.get("tags"):
            raise DropItem("untagged")
        return {**adapter.asdict(), "tag_count": len(adapter["tags"])}


class QuotesApiSpider(scrapy.Spider):
    name = "quotes-api"
    # The pipeline by its module's name: this file's directory is on the path where it runs
    # (scrapy runspider, or CRAWLER_SPIDER_PATHS for the crawler).
    custom_settings = {"ROBOTSTXT_OBEY": True, "ITEM_PIPELINES": {"scrapy_quotes_api.TaggedOnly": 300}}

    def __init__(self, base: str = "http://127.0.0.1:8000", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.base = base.rstrip("/")

    async def start(self) -> AsyncIterator[Any]:  # Scrapy 2.13 and later
        for request in self.start_requests():
            yield request

    def start_requests(self) -> Iterator[scrapy.Request]:  # older Scrapy
        yield scrapy.Request(f"{self.base}/api/quotes?page=1", meta={"page": 1},
                             headers={"Accept": "application/json"})

    def parse(self, response: Any) -> Iterator[Any]:
        data = response.json()
        for quote in data["quotes"]:
            yield ApiQuote(text=quote["text"], author=quote["author"]["name"], tags=quote["tags"])
        if data["has_next"]:
            page = response.meta["page"] + 1
            yield scrapy.Request(response.urljoin(f"/api/quotes?page={page}"), meta={"page": page},
                                 headers={"Accept": "application/json"})
