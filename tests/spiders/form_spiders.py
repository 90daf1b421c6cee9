"""A spider that fills a page's search forms (a GET one and a POST one with a CSRF token), for
tests/integration/test_forms.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from crawler.spiders import Page, Spider


class SearchSpider(Spider):
    version = "forms-1"
    follow_links = False

    def parse(self, page: Page) -> Iterator[Any]:
        yield page.form_request(formid="by-get", formdata={"q": "ada"}, callback=self.results, cb_kwargs={"via": "get"})
        yield page.form_request(formcss="#by-post input[name=q]", formdata={"q": "grace hopper"},
                                callback=self.results, cb_kwargs={"via": "post"})

    def results(self, page: Page, via: str) -> Iterator[dict[str, Any]]:
        yield {"via": via, "method": page.css("#method::text").get(), "fields": page.css("#fields::text").get()}
