"""Log in through a form with a hidden CSRF token, then read a page only a signed-in reader
sees. ``page.form_request`` fills the form as the page serves it (the token included), as
Scrapy's ``FormRequest.from_response`` does; the job keeps the cookies the site sets (``--cookies``).

    crawler crawl http://127.0.0.1:8000/login --spider examples/quotes_login_spider.py:QuotesLoginSpider \\
        --cookies --out favourites

The user name and password here are the test site's; a real one belongs in a secret and a
``login(session)`` hook (``examples/login_spider.py``), never in spider code or arguments.
``examples/scrapy_quotes_login.py`` is the same spider written for Scrapy.

On the built-in quotes site, served on loopback:

    crawler demo --quotes --path /login --spider examples/quotes_login_spider.py:QuotesLoginSpider
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from crawler.spiders import Page, Spider

log = logging.getLogger(__name__)


class QuotesLoginSpider(Spider):
    name = "quotes-login"
    version = "1"
    follow_links = False
    user = "reader"
    password = "quotes-pw"  # the test site's

    def parse(self, page: Page) -> Iterator[Any]:
        yield page.form_request(formdata={"username": self.user, "password": self.password},
                                callback=self.after_login)

    def after_login(self, page: Page) -> Iterator[Any]:
        if page.css("p.error"):
            log.error("login refused on %s", page.url)
            return
        yield page.follow("/favourites/", callback=self.parse_favourites)

    def parse_favourites(self, page: Page) -> Iterator[dict[str, Any]]:
        user = page.css("span.user::text").get()
        for row in page.css("li.favourite"):
            yield {"user": user, "text": row.css("span.text::text").get(),
                   "author": row.css("small.author::text").get()}
