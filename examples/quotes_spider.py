"""List page -> detail page, with data carried along: every quote of a quotes.toscrape.com-shaped
site, joined with its author's details. The quote travels to the author's page in ``cb_kwargs``
and the item is yielded there, by the request's own callback.

    crawler crawl http://127.0.0.1:8000/ --spider examples/quotes_spider.py:QuotesSpider --out quotes
    crawler export quotes --items

``crawler demo --quotes`` serves such a site on loopback and runs this spider on it.
``examples/scrapy_quotes.py`` is the same spider written for Scrapy, which the crawler also runs
unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from crawler.spiders import Page, Spider


class QuotesSpider(Spider):
    name = "quotes-callbacks"
    version = "1"
    follow_links = False  # only what the callbacks yield

    def parse(self, page: Page) -> Iterator[Any]:
        for quote in page.css("div.quote"):
            item = {"text": quote.css("span.text::text").get(),
                    "author": quote.css("small.author::text").get(),
                    "tags": quote.css("div.tags a.tag::text").getall()}
            # Several quotes share an author: each visit carries its own quote (dont_filter).
            yield page.follow(quote.css("span a::attr(href)").get(""), callback=self.parse_author,
                              cb_kwargs={"quote": item}, dont_filter=True)
        yield from page.follow_all(css="li.next a")

    def parse_author(self, page: Page, quote: dict[str, Any]) -> Iterator[dict[str, Any]]:
        yield {**quote,
               "born_date": page.css(".author-born-date::text").get(),
               "born_location": page.css(".author-born-location::text").get(),
               "bio": page.css(".author-description::text").get("").strip()}


class AuthorSpider(Spider):
    """Each author once (requests to a page already seen are filtered), with a callback per kind
    of page."""

    name = "authors-callbacks"
    version = "1"
    follow_links = False

    def parse(self, page: Page) -> Iterator[Any]:
        yield from page.follow_all(css=".author + a", callback=self.parse_author)
        yield from page.follow_all(css="li.next a")

    def parse_author(self, page: Page) -> Iterator[dict[str, Any]]:
        yield {"name": page.css("h3.author-title::text").get("").strip(),
               "born_date": page.css(".author-born-date::text").get(),
               "born_location": page.css(".author-born-location::text").get(),
               "bio": page.css(".author-description::text").get("").strip()}
