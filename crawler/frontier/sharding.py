"""Domain -> shard, by rendezvous (highest-random-weight) hashing.

Each domain ranks every shard by a hash of (domain, shard id) and goes to the top one; the
runner-up is its backup. When the shard count changes only the domains whose top shard changed
move (about 1/N of them) and the load stays even, unlike plain XOR distance to one id per shard.
The hash is mmh3, stable across processes (Python's ``hash()`` is salted per process).

``down`` names shards taken over (every worker silent, ``crawler.frontier.takeover``): their domains go to
the next shard in their own ranking that is not down, so only those domains move.
"""

from __future__ import annotations

from functools import lru_cache

import mmh3

from crawler.urls import domain_of, registered_domain


def _weight(domain: str, shard: int) -> int:
    return mmh3.hash64(f"{shard}\x00{domain}", signed=False)[0]


def ranked_shards(domain: str, shards: int) -> list[int]:
    """All shard ids, best first (index 0 owns the domain, index 1 is its backup)."""
    return sorted(range(shards), key=lambda s: _weight(domain, s), reverse=True)


@lru_cache(maxsize=100_000)
def shard_of_domain(domain: str, shards: int) -> int:
    return max(range(shards), key=lambda s: _weight(domain, s))


def owner(domain: str, shards: int, down: frozenset[int] = frozenset()) -> int:
    """The shard serving ``domain``: its top shard, or while that is down its best live backup
    (the top shard again if every shard is down: nobody else could serve it either)."""
    top = shard_of_domain(domain, shards)
    if top not in down:
        return top
    return next((s for s in ranked_shards(domain, shards) if s not in down), top)


def shard_of_url(url: str, shards: int, down: frozenset[int] = frozenset()) -> int:
    return owner(domain_of(url), shards, down)


def shard_of_host(host: str, shards: int, down: frozenset[int] = frozenset()) -> int:
    """The shard of a politeness host key (``host[:port]``)."""
    return owner(registered_domain(host), shards, down)


def standby(shard: int, shards: int, down: frozenset[int] = frozenset()) -> int:
    """The queue that serves task messages meant for ``shard`` when it is down or beyond the
    count: the next live shard after it, or from its place modulo the count (any worker may run
    any task; leases decide). A split frontier's part (``keys.frontier_part``) is dispatched by
    the shard this gives for its number: its own, or after the job's shard count went down, one
    of those left, the parts spread over them."""
    if shard < shards and shard not in down:
        return shard
    start = shard + 1 if shard < shards else shard % shards
    for i in range(shards):
        s = (start + i) % shards
        if s not in down:
            return s
    return shard if shard < shards else 0


def queue_name(shard: int) -> str:
    return f"shard-{shard}"


# Parse and store need no host locality (politeness, robots.txt and connections are fetch's), so
# they go to one queue that every shard worker also consumes: a worker whose shard has run dry
# parses and stores for the others instead of idling while one shard finishes alone.
SHARED_QUEUE = "shared"
# Pages a browser renders: served by workers started with ``-Q render`` (crawler.stages.render).
RENDER_QUEUE = "render"


def shard_of_queue(name: str) -> int | None:
    prefix, _, num = name.partition("-")
    return int(num) if prefix == "shard" and num.isdigit() else None
