"""Scrapy spiders whose item pipelines are built with ``from_crawler``, for
tests/integration/test_pipelines.py: ``FromCrawler`` has the shape of Scrapy's own MongoPipeline
example (a setting read from ``crawler.settings``); ``NeedsSignals`` asks for what does not exist
here (``crawler.signals``), so its job must stop, saying why."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import scrapy


class FromCrawler:
    def __init__(self, uri: str, bot: str) -> None:
        self.uri, self.bot = uri, bot

    @classmethod
    def from_crawler(cls, crawler: Any) -> FromCrawler:
        return cls(crawler.settings.get("MONGO_URI"), crawler.settings.get("BOT_NAME"))

    def process_item(self, item: dict[str, Any]) -> dict[str, Any]:
        return {**item, "uri": self.uri, "bot": self.bot}


class NeedsSignals:
    @classmethod
    def from_crawler(cls, crawler: Any) -> NeedsSignals:
        crawler.signals.connect(print, signal=object())
        return cls()

    def process_item(self, item: dict[str, Any]) -> dict[str, Any]:
        return item


class Stamped(scrapy.Spider):
    name = "stamped"
    custom_settings = {"MONGO_URI": "mongodb://127.0.0.1:1/shop",
                       "ITEM_PIPELINES": {"scrapy_pipeline_spiders.FromCrawler": 100}}

    def parse(self, response: Any) -> Iterator[Any]:
        yield {"url": response.url}
        yield from response.follow_all(css="a")


class Unbuildable(Stamped):
    name = "unbuildable"
    custom_settings = {"ITEM_PIPELINES": {"scrapy_pipeline_spiders.NeedsSignals": 100}}
