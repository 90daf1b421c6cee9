"""Domain -> shard, by rendezvous (highest-random-weight) hashing.

Each domain ranks every shard by a hash of (domain, shard id) and goes to the top one; the
runner-up is its backup. When the shard count changes only the domains whose top shard changed
move (about 1/N of them) and the load stays even, unlike plain XOR distance to one id per shard.
The hash is mmh3, stable across processes (Python's ``hash()`` is salted per process).
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


def shard_of_url(url: str, shards: int) -> int:
    return shard_of_domain(domain_of(url), shards)


def shard_of_host(host: str, shards: int) -> int:
    """The shard of a politeness host key (``host[:port]``)."""
    return shard_of_domain(registered_domain(host), shards)


def queue_name(shard: int) -> str:
    return f"shard-{shard}"


def shard_of_queue(name: str) -> int | None:
    prefix, _, num = name.partition("-")
    return int(num) if prefix == "shard" and num.isdigit() else None
