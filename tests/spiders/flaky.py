"""The catalogue spider with hooks that fail on purpose, to show a failing hook costs only its
own page's items."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from crawler.spiders import Page
from examples.catalogue_spider import CatalogueSpider


def unlucky(sku: str) -> bool:
    return sku.endswith("3")


class FlakySpider(CatalogueSpider):
    version = "flaky-1"

    def parse(self, page: Page) -> Iterator[Any]:
        for value in super().parse(page):
            if isinstance(value, dict) and unlucky(str(value["sku"])):
                raise RuntimeError(f"cannot read {value['sku']}")
            yield value

    def allow(self, url: str) -> bool:
        return "/category/" not in url  # the listings lead to every product anyway

    def check_item(self, item: dict[str, Any], page: Page) -> dict[str, Any] | None:
        if item["stock"] == 0:
            return None  # dropped, counted
        item = dict(item)
        item["name"] = item["name"].upper()
        return item
