"""``Page``: what a spider's hooks see of one response.

Selectors are parsel's (Scrapy's selector library) over the lxml tree the parse stage already
built, so ``css``/``xpath`` cost no second parse; the BeautifulSoup tree and the decoded text
are built only when a hook asks for them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from functools import cached_property
from typing import Any
from urllib.parse import urljoin

from parsel import Selector, SelectorList
from w3lib.encoding import html_to_unicode

from crawler.parse.html import ParsedPage, is_html, parse_html
from crawler.spiders.forms import from_page
from crawler.spiders.request import Request, request, strip_mark


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


class NotJSON(ValueError):
    """``page.json()`` of a body that is not JSON."""


def is_xml(content_type: str) -> bool:
    """XML, RSS, Atom, sitemaps: ``text/xml``, ``application/xml``, ``application/*+xml``
    (XHTML is HTML here, as browsers read it)."""
    ct = content_type.split(";", 1)[0].strip().lower()
    return ct in ("text/xml", "application/xml") or (ct.endswith("+xml") and ct != "application/xhtml+xml")


def _href(value: Any) -> str:
    """A URL from what ``follow`` accepts: a string, a parsel Selector of an ``<a>``/``<link>``
    (its href) or of an attribute or text (its value), or anything with a ``url``."""
    if isinstance(value, str):
        return value
    if isinstance(value, Selector):
        root = value.root
        if isinstance(root, str):
            return root
        tag = getattr(root, "tag", None)
        if tag in ("a", "link", "area"):
            href = root.get("href")
            if href is None:
                raise ValueError(f"<{tag}> element has no href attribute: {value}")
            return str(href)
        raise ValueError(f"only <a>, <link> and <area> selectors (or their href) can be followed, not {value}")
    url = getattr(value, "url", None)
    if isinstance(url, str):
        return url
    raise TypeError(f"cannot follow a {type(value).__name__}: give a URL, a Selector or a Request")


class Page:
    """One response: ``url`` (as requested), ``final_url`` (after redirects), ``status``,
    ``headers``, ``body`` (bytes), ``text`` (decoded), ``json()``, ``error`` (a reason code, or
    None), ``depth``, ``referrer``; ``request`` (the ``Request`` it answers: its ``callback``,
    ``cb_kwargs``, ``meta``...), ``meta``, ``cb_kwargs``; ``css``/``xpath`` selectors (HTML, or
    XML for XML, RSS, Atom and sitemaps), ``soup``, ``follow``, ``follow_all``, ``urljoin``;
    ``links``, the links the crawler extracted (HTML pages only); ``protocol``, ``latency`` (the
    fetch's seconds), ``attempts`` and ``redirects`` (how many were followed)."""

    def __init__(self, url: str, *, final_url: str = "", status: int | None = None,
                 headers: Sequence[tuple[str, str]] = (), body: bytes = b"", content_type: str = "",
                 error: str | None = None, depth: int = 0, referrer: str = "",
                 parsed: ParsedPage | None = None, request: Request | None = None, protocol: str = "",
                 latency: float = 0.0, attempts: int = 1, redirects: int = 0) -> None:
        url = strip_mark(url)
        self.protocol = protocol  # "HTTP/1.1", "HTTP/2"; "" for a page never fetched
        self.latency = latency  # seconds the fetch took
        self.attempts = attempts  # this fetch's number: 2 after one retry
        self.redirects = redirects  # redirects followed to ``final_url``
        self.url = url
        self.request = request if request is not None else Request(url)
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
    def meta(self) -> Mapping[str, Any]:
        """The request's ``meta`` (as Scrapy's ``response.meta``)."""
        return self.request.meta

    @property
    def cb_kwargs(self) -> Mapping[str, Any]:
        """The request's ``cb_kwargs`` (they are also the callback's keyword arguments)."""
        return self.request.cb_kwargs

    @property
    def is_html(self) -> bool:
        return is_html(self.content_type)

    @property
    def is_xml(self) -> bool:
        return is_xml(self.content_type)

    def json(self) -> Any:
        """The body parsed as JSON; ``NotJSON`` (a ``ValueError``) naming the page if it is not."""
        try:
            return json.loads(self.body)
        except (ValueError, UnicodeDecodeError) as exc:
            raise NotJSON(f"{self.final_url} ({self.content_type or 'no content type'}, {len(self.body)} bytes) "
                          f"is not JSON: {exc}") from None

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
        if self.is_xml:
            try:
                return Selector(body=self.body, type="xml", base_url=self.final_url)
            except Exception:  # not well-formed: selectors that find nothing, as for an empty page
                return Selector(text="<empty/>", type="xml", base_url=self.final_url)
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
        """The links the crawler extracted (absolute, in document order; none but from HTML)."""
        if self._parsed is None and not self.is_html:
            return []
        return list(self.parsed.links)

    @property
    def base_url(self) -> str:
        if self._parsed is None and not self.is_html:
            return self.final_url
        return self.parsed.base if self._parsed is not None or self.body else self.final_url

    def urljoin(self, href: str) -> str:
        return urljoin(self.base_url, href.strip())

    def follow(self, href: Any, callback: Any = None, **kwargs: Any) -> Request:
        """A ``Request`` resolved against the page (its ``<base href>`` if any), as Scrapy's
        ``response.follow``: ``href`` is a URL, a Selector of an ``<a>``/``<link>`` or of its
        href, or a Request (re-based on this page); ``callback`` a method or its name; the rest
        are ``Request``'s fields (``cb_kwargs``, ``meta``, ``method``, ``headers``, ``body``,
        ``priority``, ``dont_filter``, ``errback``)."""
        if isinstance(href, Request):
            changes = dict(kwargs, url=self.urljoin(href.url))
            if callback is not None:
                changes["callback"] = callback
            return href.replace(**changes)
        return request(self.urljoin(_href(href)), callback, **kwargs)

    def follow_all(self, urls: Iterable[Any] | None = None, callback: Any = None, *, css: str | None = None,
                   xpath: str | None = None, **kwargs: Any) -> list[Request]:
        """``follow`` for each of ``urls`` (URLs or Selectors), or for each element ``css`` or
        ``xpath`` selects (``<a>``/``<link>``, or their href); elements without an href are
        skipped, as Scrapy does."""
        if sum(x is not None for x in (urls, css, xpath)) != 1:
            raise ValueError("follow_all takes exactly one of urls, css or xpath")
        if urls is not None:
            return [self.follow(u, callback, **kwargs) for u in urls]
        selected = self.css(css) if css is not None else self.xpath(xpath or "")
        out = []
        for sel in selected:
            try:
                out.append(self.follow(sel, callback, **kwargs))
            except ValueError:
                continue
        return out

    def form_request(self, formdata: Any = None, **kwargs: Any) -> Request:
        """The request that submits a form of this page, as Scrapy's ``FormRequest.from_response``:
        ``formcss``/``formxpath``/``formname``/``formid``/``formnumber`` pick the form,
        ``formdata`` replaces or adds fields, ``clickdata``/``dont_click`` the button; then
        ``callback`` and the Request's own arguments (``crawler.spiders.forms.from_page``)."""
        return from_page(self, formdata, **kwargs)
