"""Pages whose fetch ended at another URL: what they claim of the job's seen-set (``parse``
claims, ``store`` lets the claims go)."""

from __future__ import annotations

from collections.abc import Sequence

from crawler.config.settings import Settings
from crawler.dedup import Claim
from crawler.errors import BadURL
from crawler.spiders.request import MARK
from crawler.stages.messages import FetchedPage
from crawler.urls import canonicalize


def redirect_claims(pages: Sequence[FetchedPage], s: Settings) -> list[Claim]:
    """The pages whose fetch ended at another URL than their own, with that URL."""
    return [Claim(p.url, target, p.depth) for p in pages if (target := redirect_target(p.url, p.final_url, s))]


def redirect_target(url: str, final_url: str, s: Settings) -> str | None:
    """The canonical URL a fetch of ``url`` ended at, if not ``url`` itself. A request key with
    a marker (another method, a body, ``dont_filter``) has none, as Scrapy's duplicate filter
    lets such a request's redirects through."""
    if not final_url or final_url == url or MARK in url:
        return None
    try:
        target = canonicalize(final_url, s.max_url_length, s.dropped_params)
    except BadURL:
        return None
    return target if target != url else None
