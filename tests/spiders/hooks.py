"""A spider using the request and error hooks: a header on every request, an item per failed page."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from crawler.spiders import Page, Spider


class HooksSpider(Spider):
    version = "hooks-1"

    def headers(self, url: str) -> Mapping[str, str]:
        return {"X-Crawl-Test": "hooks"}

    def on_error(self, page: Page) -> Iterator[Any]:
        yield {"missing": page.url, "status": page.status, "error": page.error, "from": page.referrer}
