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
    """The pages whose fetch ended at another URL than their own, with that URL: a request key
    with a marker (another method, a body, ``dont_filter``) is never one, as Scrapy's duplicate
    filter lets such a request's redirects through."""
    out = []
    for p in pages:
        if not p.final_url or p.final_url == p.url or MARK in p.url:
            continue
        try:
            target = canonicalize(p.final_url, s.max_url_length, s.dropped_params)
        except BadURL:
            continue
        if target != p.url:
            out.append(Claim(p.url, target, p.depth))
    return out
