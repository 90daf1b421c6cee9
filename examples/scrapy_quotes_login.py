"""A Scrapy spider that logs in through a form with a hidden CSRF token
(``FormRequest.from_response`` fills it in), then reads a page only a signed-in reader sees;
written for Scrapy and run unchanged by the crawler:

    scrapy runspider examples/scrapy_quotes_login.py -a base=http://127.0.0.1:8000 -a password=... -O fav.jsonl
    crawler crawl --spider examples/scrapy_quotes_login.py:QuotesLoginSpider \\
        --spider-arg base=http://127.0.0.1:8000 --spider-arg password=... --out fav

(Spider arguments travel with a distributed job: a real password belongs in a secret, see
docs/spiders.md; this one is the test site's.)

On the built-in quotes site, served on loopback:

    crawler demo --quotes --spider examples/scrapy_quotes_login.py:QuotesLoginSpider
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import scrapy


class QuotesLoginSpider(scrapy.Spider):
    name = "quotes-login"

    def __init__(self, base: str = "http://127.0.0.1:8000", user: str = "reader", password: str = "quotes-pw",
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.start_urls = [base.rstrip("/") + "/login"]
        self.user, self.password = user, password

    def parse(self, response: Any) -> Any:
        return scrapy.FormRequest.from_response(response, formdata={"username": self.user, "password": self.password},
                                                callback=self.after_login)

    def after_login(self, response: Any) -> Iterator[Any]:
        if response.css("p.error"):
            self.logger.error("login refused")
            return
        yield response.follow("/favourites/", callback=self.parse_favourites)

    def parse_favourites(self, response: Any) -> Iterator[dict[str, Any]]:
        user = response.css("span.user::text").get()
        for row in response.css("li.favourite"):
            yield {"user": user, "text": row.css("span.text::text").get(),
                   "author": row.css("small.author::text").get()}
