"""``Page``: what a spider's hooks see of one response.

Selectors are parsel's (Scrapy's selector library) over the lxml tree the parse stage already
built, so ``css``/``xpath`` cost no second parse; the BeautifulSoup tree and the decoded text
are built only when a hook asks for them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from functools import cached_property
from typing import Any
from urllib.parse import urljoin

from parsel import Selector, SelectorList
from w3lib.encoding import html_to_unicode

from crawler.parse.html import ParsedPage, parse_html
from crawler.spiders.base import Follow


class Headers(Mapping[str, str]):
    """Response headers by case-insensitive name; a repeated header's values joined by ", "
    (``getlist`` gives them apart)."""

    def __init__(self, pairs: Sequence[tuple[str, str]]) -> None:
        self._pairs = list(pairs)
        self._joined: dict[str, str] = {}
        for k, v in self._pairs:
            key = k.lower()
            self._joined[key] = f"{self._joined[key]}, {v}" if key in self._joined else v

    def __getitem__(self, name: str) -> str:
        return self._joined[name.lower()]

    def __iter__(self) -> Iterator[str]:
        return iter(self._joined)

    def __len__(self) -> int:
        return len(self._joined)

    def getlist(self, name: str) -> list[str]:
        key = name.lower()
        return [v for k, v in self._pairs if k.lower() == key]


class Page:
    """One response: ``url`` (as queued), ``final_url`` (after redirects), ``status``,
    ``headers``, ``body`` (bytes), ``text`` (decoded), ``error`` (a reason code, or None),
    ``depth``, ``referrer``; ``css``/``xpath`` selectors, ``soup``, ``follow``, ``urljoin``;
    ``links``, the links the crawler extracted."""

    def __init__(self, url: str, *, final_url: str = "", status: int | None = None,
                 headers: Sequence[tuple[str, str]] = (), body: bytes = b"", content_type: str = "",
                 error: str | None = None, depth: int = 0, referrer: str = "",
                 parsed: ParsedPage | None = None) -> None:
        self.url = url
        self.final_url = final_url or url
        self.status = status
        self.headers = Headers(headers)
        self.body = body
        self.content_type = content_type or self.headers.get("content-type", "")
        self.error = error
        self.depth = depth
        self.referrer = referrer
        self._parsed = parsed

    def __repr__(self) -> str:
        return f"<Page {self.status} {self.final_url}>"

    @property
    def parsed(self) -> ParsedPage:
        if self._parsed is None:
            self._parsed = parse_html(self.final_url, self.body, self.content_type)
        return self._parsed

    @cached_property
    def text(self) -> str:
        """The body decoded as the page declares (HTTP header, BOM, meta), as browsers do."""
        _, text = html_to_unicode(self.content_type, self.body)
        return str(text)

    @cached_property
    def selector(self) -> Selector:
        root = self.parsed.root
        if root is None:  # an empty or unparseable body: selectors that find nothing
            return Selector(text="<html></html>", type="html", base_url=self.final_url)
        return Selector(root=root, type="html", base_url=self.final_url)

    def css(self, query: str) -> SelectorList[Selector]:
        return self.selector.css(query)

    def xpath(self, query: str, **variables: Any) -> SelectorList[Selector]:
        return self.selector.xpath(query, **variables)

    @property
    def soup(self) -> Any:
        """A BeautifulSoup tree, built on first use."""
        return self.parsed.soup

    @property
    def links(self) -> list[str]:
        """The links the crawler extracted (absolute, in document order)."""
        return list(self.parsed.links)

    @property
    def base_url(self) -> str:
        return self.parsed.base if self._parsed is not None or self.body else self.final_url

    def urljoin(self, href: str) -> str:
        return urljoin(self.base_url, href.strip())

    def follow(self, href: str) -> Follow:
        """A link to follow, resolved against the page (its ``<base href>`` if any)."""
        return Follow(self.urljoin(href))
