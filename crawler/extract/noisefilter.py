"""The parse stage's noise-link filter (job setting ``noise_links``): which of a page's outlinks
are not followed because they sit in noise blocks or in a site's known-noise URL clusters.

The cluster state is one :class:`UrlClusters` per (job, host), in a bounded per-process LRU:
domains are sharded, so one host's pages reach the same shard's workers and their clusters
learn from many pages; a process that never saw a host starts it fresh (it then relies on the
block rule alone until the clusters fill), which costs recall, never a content link's block.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urljoin, urlsplit

from crawler.errors import BadURL
from crawler.extract.noise import UrlClusters, mark_noise, noise_blocks
from crawler.lru import LRU
from crawler.urls import canonicalize

# Hosts whose clusters a worker process keeps (each at most 64 patterns and 100k memo entries;
# the memo is capped lower here so the LRU stays a few tens of MB at worst).
MAX_HOSTS = 1024
MEMO_PER_HOST = 5_000


class Parsed(Protocol):
    """What the filter needs of a parsed page (``crawler.parse.ParsedPage`` has it)."""

    root: Any  # the lxml root, or None
    base: str  # the URL relative links resolve against


@dataclass(frozen=True)
class NoiseCounts:
    block: int = 0  # links skipped because every anchor to them sits in a noise block
    pattern: int = 0  # links skipped because their URL clusters with known noise


def new_cluster_cache(max_hosts: int = MAX_HOSTS) -> LRU[tuple[str, str], UrlClusters]:
    return LRU(max_hosts)


# This process's clusters, shared by its parse tasks (the LRU is thread-safe).
CLUSTERS = new_cluster_cache()


def filter_noise(parsed: Parsed, outlinks: list[str], job_id: str, clusters: LRU[tuple[str, str], UrlClusters],
                 max_url_length: int = 2048, drop: frozenset[str] = frozenset()) -> tuple[list[str], NoiseCounts]:
    """``outlinks`` (canonical, in page order) less the noise ones, and how many went by which
    rule. A link is in a noise block only when *every* anchor to it is: a content link that the
    nav repeats stays content. Never raises for a parsed page."""
    if parsed.root is None or not outlinks:
        return list(outlinks), NoiseCounts()
    noisy_anchors = noise_blocks(parsed.root)
    noise_urls: set[str] = set()
    content_urls: set[str] = set()
    for a in parsed.root.iter("a"):
        href = a.get("href")
        if href is None:
            continue
        try:
            url = canonicalize(urljoin(parsed.base, href.strip()).split("#", 1)[0], max_url_length, drop)
        except (BadURL, ValueError):
            continue
        (noise_urls if a in noisy_anchors else content_urls).add(url)
    in_block = [(u, u in noise_urls and u not in content_urls) for u in outlinks]
    by_host: dict[str, list[int]] = {}
    for i, u in enumerate(outlinks):
        by_host.setdefault(urlsplit(u).hostname or "", []).append(i)
    noise = [b for _u, b in in_block]
    for host, idx in by_host.items():
        key = (job_id, host)
        state = clusters.get(key)
        if state is None:
            state = UrlClusters(max_memo=MEMO_PER_HOST)
            clusters.put(key, state)
        for i, verdict in zip(idx, mark_noise([in_block[i] for i in idx], state), strict=True):
            noise[i] = verdict
    kept = [u for u, n in zip(outlinks, noise, strict=True) if not n]
    block = sum(1 for _u, b in in_block if b)
    return kept, NoiseCounts(block=block, pattern=len(outlinks) - len(kept) - block)
