"""A spider that turns a paginated shop catalogue into product records.

Run it on the loopback catalogue the tests use (``make example-catalogue``), or on your own shop:

    crawler crawl http://shop.example/ --spider examples/catalogue_spider.py:CatalogueSpider --out shop
    crawler export shop --items --format csv > products.csv
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from crawler.spiders import Page, Spider

RATINGS = {"One": 1, "Two": 2, "Three": 3, "Four": 4, "Five": 5}


class CatalogueSpider(Spider):
    name = "catalogue"
    version = "1"
    # Only what parse yields is followed: listings, their next pages and the products on them,
    # not every link of every page (breadcrumbs, "you may also like").
    follow_links = False

    def parse(self, page: Page) -> Iterator[Any]:
        if page.css("div.product_main"):
            yield self.product(page)
            return
        yield from (page.follow(href) for href in page.css("ul.nav a::attr(href)").getall())
        yield from (page.follow(href) for href in page.css("article.product_pod h3 a::attr(href)").getall())
        next_page = page.css("li.next a::attr(href)").get()
        if next_page:
            yield page.follow(next_page)

    def product(self, page: Page) -> dict[str, Any]:
        price = page.css("div.product_main p.price_color::text").get("")
        availability = " ".join(page.css("p.availability::text").getall()).strip()
        stock = re.search(r"\((\d+) available\)", availability)
        rating = page.css("p.star-rating::attr(class)").get("").split()
        return {
            "sku": page.xpath("//th[text()='SKU']/following-sibling::td/text()").get(),
            "name": page.css("div.product_main h1::text").get(),
            "price": float(price.lstrip("€").strip() or "nan"),
            "currency": "EUR" if price.startswith("€") else None,
            "stock": int(stock.group(1)) if stock else 0,
            "in_stock": availability.startswith("In stock"),
            "rating": RATINGS.get(rating[-1], 0) if rating else 0,
            "category": page.xpath("//th[text()='Category']/following-sibling::td/text()").get(),
            "tags": page.css("ul.tags li::text").getall(),
            "url": page.url,
        }

    def check_item(self, item: dict[str, Any], page: Page) -> dict[str, Any] | None:
        # A product page without a SKU is a broken page, not a product.
        return item if item.get("sku") else None
