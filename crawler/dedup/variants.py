"""The cap on query-string variants: the trap a session id or nonce in links sets.

A page that links to itself under a fresh token (``/s?state=8f3a...``) makes a new URL on every
visit, and tiny pages never trip the near-duplicate rule. Such links are grouped by their host,
path and query with the token values blanked (``urls.token_shape``); only links found on a page
that itself carries a token on the same host count against the group (list pages linking to
items by opaque id are not the trap: their items stay uncapped; a page that is itself a
variant of the link's path and parameters counts too). Each group admits ``cap``
distinct URLs, remembered by digest, so a batch delivered twice gets the same answer; a link
refused here is not marked seen and may still be admitted from a page without a token.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

from redis import Redis

from crawler import keys
from crawler.urls import host_key, token_shape

# What it takes and returns: scripts/variants_admit.lua.
_ADMIT = (Path(__file__).resolve().parent / "scripts" / "variants_admit.lua").read_text()


def _digest(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def _names(url: str) -> tuple[str, list[str]]:
    """A URL's path and its query's parameter names: what variants of one page share."""
    head, _, query = url.partition("?")
    return head, sorted(p.split("=", 1)[0] for p in query.split("&")) if query else []


def trap_candidates(links: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """(url, shape) of the (url, referrer) pairs that count against a group: the URL has token
    values, and its referrer, on the same host, has some too or is a variant of the same path
    and parameters (a token that passed for a word there must not let its page's links go
    uncounted)."""
    out = []
    for url, referrer in links:
        shape = token_shape(url)
        if shape is None or not referrer or host_key(referrer) != host_key(url):
            continue
        if token_shape(referrer) is None and _names(referrer) != _names(url):
            continue
        out.append((url, shape))
    return out


class QueryVariants:
    def __init__(self, redis: Redis) -> None:
        self._script = redis.register_script(_ADMIT)

    def over_cap(self, job: str, links: Iterable[tuple[str, str]], cap: int) -> set[str]:
        """The URLs of ``links`` ((url, referrer) pairs, canonical) refused by the cap."""
        found = trap_candidates(links)
        if not found or cap <= 0:
            return set()
        got = self._script(keys=[keys.query_variants(job, _digest(shape)) for _, shape in found],
                           args=[cap, *(_digest(url) for url, _ in found)])
        return {url for (url, _), ok in zip(found, got, strict=True) if not int(ok)}
