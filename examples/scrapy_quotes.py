"""Scrapy's tutorial spiders, written for Scrapy and run unchanged by the crawler.

Run them with the crawler (``pip install crawler[scrapy]``) on the quotes test site or any site
shaped like https://quotes.toscrape.com:

    crawler crawl --spider examples/scrapy_quotes.py:QuotesSpider --spider-arg base=http://127.0.0.1:8000 \\
        --out quotes

or with Scrapy itself: in a project (``scrapy crawl quotes -a base=... -O quotes.jsonl``), or
``scrapy runspider`` on a file holding one of them. Nothing here imports the crawler.

On the built-in quotes site, served on loopback:

    crawler demo --quotes --spider examples/scrapy_quotes.py:QuotesSpider
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import scrapy
from itemloaders.processors import MapCompose, TakeFirst
from scrapy.loader import ItemLoader


def _start(base: str, path: str = "/") -> list[str]:
    return [base.rstrip("/") + path]


class QuotesSpider(scrapy.Spider):
    """Every quote, joined with its author's details: the quote travels to the author's page in
    ``cb_kwargs`` and the item is yielded there."""

    name = "quotes"

    def __init__(self, base: str = "http://127.0.0.1:8000", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.start_urls = _start(base)

    def parse(self, response: Any) -> Iterator[Any]:
        for quote in response.css("div.quote"):
            item = {"text": quote.css("span.text::text").get(),
                    "author": quote.css("small.author::text").get(),
                    "tags": quote.css("div.tags a.tag::text").getall()}
            # Several quotes share an author: each visit carries its own quote, so it must not
            # be filtered as a duplicate.
            yield response.follow(quote.css("span a::attr(href)").get(""), callback=self.parse_author,
                                  cb_kwargs={"quote": item}, dont_filter=True)
        yield from response.follow_all(css="li.next a", callback=self.parse)

    def parse_author(self, response: Any, quote: dict[str, Any]) -> Iterator[dict[str, Any]]:
        yield {**quote,
               "born_date": response.css(".author-born-date::text").get(),
               "born_location": response.css(".author-born-location::text").get(),
               "bio": response.css(".author-description::text").get(default="").strip()}


class AuthorItem(scrapy.Item):
    name = scrapy.Field()
    born_date = scrapy.Field()
    born_location = scrapy.Field()
    bio = scrapy.Field()


class AuthorLoader(ItemLoader):
    default_input_processor = MapCompose(str.strip)
    default_output_processor = TakeFirst()


class AuthorSpider(scrapy.Spider):
    """The tutorial's author spider: ``follow_all`` to each author page once (duplicates are
    filtered), items built by an ``ItemLoader`` into a ``scrapy.Item``."""

    name = "author"
    custom_settings = {"DOWNLOAD_DELAY": 0, "CONCURRENT_REQUESTS_PER_DOMAIN": 4}

    def __init__(self, base: str = "http://127.0.0.1:8000", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.start_urls = _start(base)

    def parse(self, response: Any) -> Iterator[Any]:
        yield from response.follow_all(css=".author + a", callback=self.parse_author)
        yield from response.follow_all(css="li.next a", callback=self.parse)

    def parse_author(self, response: Any) -> Any:
        loader = AuthorLoader(item=AuthorItem(), response=response)
        loader.add_css("name", "h3.author-title::text")
        loader.add_css("born_date", ".author-born-date::text")
        loader.add_css("born_location", ".author-born-location::text")
        loader.add_css("bio", ".author-description::text")
        return loader.load_item()


@dataclass
class TaggedQuote:
    tag: str
    text: str


class TagSpider(scrapy.Spider):
    """Tag pages through their own pagination, dataclass items, and an errback that turns a
    missing tag page into an item of its own."""

    name = "tags"

    def __init__(self, base: str = "http://127.0.0.1:8000", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.base = base.rstrip("/")

    async def start(self) -> Any:
        yield scrapy.Request(self.base + "/", callback=self.parse)
        yield scrapy.Request(self.base + "/tag/no-such-tag/page/1/", callback=self.parse_tag,
                             errback=self.tag_missing, cb_kwargs={"tag": "no-such-tag"})

    def parse(self, response: Any) -> Iterator[Any]:
        for tag in response.css(".tags-box a.tag::text").getall():
            yield response.follow(f"/tag/{tag}/page/1/", callback=self.parse_tag, cb_kwargs={"tag": tag})

    def parse_tag(self, response: Any, tag: str) -> Iterator[Any]:
        for text in response.css("div.quote span.text::text").getall():
            yield TaggedQuote(tag=tag, text=text)
        for next_page in response.css("li.next a"):
            yield response.follow(next_page, callback=self.parse_tag, cb_kwargs={"tag": tag})

    def tag_missing(self, failure: Any) -> Iterator[dict[str, Any]]:
        response = getattr(failure.value, "response", None)
        yield {"missing": failure.request.cb_kwargs["tag"], "status": response.status if response else None}
