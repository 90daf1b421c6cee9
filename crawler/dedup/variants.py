"""The cap on query-string variants: the trap a session id or nonce in links sets.

A page that links to itself under a fresh token (``/s?state=8f3a...``) makes a new URL on every
visit, and tiny pages never trip the near-duplicate rule. Such links are grouped by host, path
and the query's parameter names (``/s?n&state``: a counter beside the token changes nothing).
A link counts against its group when it was found on a page of the same host and either the
link holds an opaque token (``urls.is_token``) and the page holds one too or is a variant of the
same path and names, or the link is such a variant of a page that holds one (a token that reads
as a word must not let a trap through). List pages linking to items by opaque id are not the
trap: links from pages without a token never count. Each group admits ``cap`` distinct URLs,
remembered by digest, so a batch delivered twice gets the same answer; a link refused here is
not marked seen and may still be admitted from a page without a token.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from pathlib import Path

from redis import Redis

from crawler.state import keys
from crawler.urls import host_key, token_shape

# What it takes and returns: scripts/variants_admit.lua.
_ADMIT = (Path(__file__).resolve().parent / "scripts" / "variants_admit.lua").read_text()


def _digest(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def _names(url: str) -> str:
    """A URL's scheme, host and path, and its query's parameter names: what variants of one page
    share (``http://h/s?n&state``)."""
    head, _, query = url.partition("?")
    return head + "?" + "&".join(sorted(p.split("=", 1)[0] for p in query.split("&"))) if query else head


def trap_candidates(links: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """(url, group) of the (url, referrer) pairs that count against a group (see the module)."""
    out = []
    # A page's links share their referrer: read it once per batch, not once per link.
    pages: dict[str, tuple[str, str, bool]] = {}
    for url, referrer in links:
        if "?" not in url or not referrer:
            continue
        page = pages.get(referrer)
        if page is None:
            page = pages[referrer] = (host_key(referrer), _names(referrer), token_shape(referrer) is not None)
        page_host, page_names, page_token = page
        if page_host != host_key(url):
            continue
        group = _names(url)
        same = page_names == group
        link_token = token_shape(url) is not None
        if (link_token and (page_token or same)) or (same and (page_token or _opaque(url) or _opaque(referrer))):
            out.append((url, group))
    return out


# Between variants of one path a looser test: a value of 16+ token characters with letters and
# digits both. About 1 random base64 id in 70 passes for a word under ``is_token``; two such in
# a row (a link and the page it is on) would otherwise let a trap's link through uncounted.
_OPAQUE_RE = re.compile(r"=(?=[A-Za-z0-9_.~+/=-]*[0-9])(?=[A-Za-z0-9_.~+/=-]*[A-Za-z])[A-Za-z0-9_.~+/=-]{16,}(?:&|$)")


def _opaque(url: str) -> bool:
    return _OPAQUE_RE.search(url.partition("?")[2]) is not None


class QueryVariants:
    def __init__(self, redis: Redis) -> None:
        self._script = redis.register_script(_ADMIT)

    def over_cap(self, job: str, links: Iterable[tuple[str, str]], cap: int) -> set[str]:
        """The URLs of ``links`` ((url, referrer) pairs, canonical) refused by the cap."""
        return self._refused(job, trap_candidates(links), cap)

    def pages_over_cap(self, job: str, pages: Iterable[tuple[str, str]], cap: int) -> set[str]:
        """The URLs of ``pages`` ((url, kind) pairs: near-duplicates that are query variants of
        an earlier page, ``kind`` saying why their links may still be followed) whose group of
        that kind (host, path and parameter names) already holds ``cap`` other pages. An endless
        "next" or a spider following a session-id trap stops there."""
        return self._refused(job, [(url, f"{kind} {_names(url)}") for url, kind in pages], cap)

    def _refused(self, job: str, found: list[tuple[str, str]], cap: int) -> set[str]:
        """The URLs of ``found`` ((url, group) pairs) that their groups, full at ``cap``, refuse."""
        if not found or cap <= 0:
            return set()
        got = self._script(keys=[keys.query_variants(job, _digest(group)) for _, group in found],
                           args=[cap, *(_digest(url) for url, _ in found)])
        return {url for (url, _), ok in zip(found, got, strict=True) if not int(ok)}

    @staticmethod
    def forget(redis: Redis, job: str) -> int:
        """Drop every group's record (a periodic job's new cycle, ``reset-seen``). Returns keys deleted."""
        doomed = list(redis.scan_iter(keys.query_variants(job, "*"), count=1000))
        return int(redis.delete(*doomed)) if doomed else 0
