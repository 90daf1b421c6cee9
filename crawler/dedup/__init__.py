"""Seen-sets: the exact set (in the frontier's admit script), the Redis Bloom filter, and the
per-process cache in front of them. ``admit_links`` is the one way URLs enter a job."""

from __future__ import annotations

from collections.abc import Sequence

from redis import Redis

from crawler.dedup.bloom import BloomSeen
from crawler.dedup.cache import SeenCache
from crawler.frontier import Entry, Frontier
from crawler.settings import Settings

__all__ = ["ADMIT_CHUNK", "BloomSeen", "SeenCache", "admit_links"]

# URLs per admission script call at most: a call blocks Redis while it runs (measured here: a
# few ms for 1,000 URLs, 2 s for 100,000), and a page of anchors once made one call of 312,500.
ADMIT_CHUNK = 1000


def bloom_for(redis: Redis, job_id: str, settings: Settings) -> BloomSeen:
    return BloomSeen(redis, job_id, capacity=settings.bloom_capacity, p=settings.bloom_error_rate)


def admit_links(redis: Redis, frontier: Frontier, job_id: str, settings: Settings, entries: Sequence[Entry],
                token: str = "", cache: SeenCache | None = None,
                bloom: BloomSeen | None = None, cache_space: str = "",
                chunk: int = ADMIT_CHUNK) -> tuple[list[str], int]:
    """Queue the canonical entries this job has not seen. Returns (URLs queued, cache hits).

    With the Bloom filter, the filter decides what is new (memoised by ``token``, so a
    redelivered batch gets the same answer) and the frontier queues those; otherwise the
    frontier's exact seen hash decides, atomically with the queueing. The local cache, when
    given, answers for URLs this process already knows are seen in ``cache_space`` (default:
    the job). At most ``chunk`` entries go to Redis in one script call; the parts are cut from
    ``entries`` before the cache filters them, so a redelivered batch is cut the same way
    whichever process admits it."""
    if len(entries) <= chunk:
        return _admit(redis, frontier, job_id, settings, entries, token, cache, bloom, cache_space)
    queued: list[str] = []
    hits = 0
    parts = range(0, len(entries), chunk)
    for k, start in enumerate(parts):
        got, h = _admit(redis, frontier, job_id, settings, entries[start:start + chunk], token, cache, bloom,
                        cache_space, part=k, last=k == len(parts) - 1)
        queued += got
        hits += h
    return queued, hits


def _admit(redis: Redis, frontier: Frontier, job_id: str, settings: Settings, entries: Sequence[Entry],
           token: str, cache: SeenCache | None, bloom: BloomSeen | None, cache_space: str,
           part: int | None = None, last: bool = True) -> tuple[list[str], int]:
    hits = 0
    space = cache_space or job_id
    if cache is not None:
        fresh = [e for e in entries if not cache.seen(f"{space} {e.url}")]
        hits = len(entries) - len(fresh)
        entries = fresh
    budget = dict(budget=settings.max_pages, max_depth=settings.max_depth, host_budget=settings.max_pages_per_host)
    if settings.uses_bloom:
        if token and not frontier.pending(job_id, token):
            # Admission would ignore this batch (admitted already, or from before a Redis loss
            # and `recover`); its URLs must not reach the filter either, or they would count as
            # seen with nothing queued.
            return [], hits
        bloom = bloom or bloom_for(redis, job_id, settings)
        by_url = {e.url: e for e in entries}
        new = set(bloom.add_many(list(by_url), token=token)) if by_url else set()
        queued = frontier.admit(job_id, [e for e in entries if e.url in new], settings.shards, token=token,
                                trusted=True, part=part, last=last, **budget)
        duplicates = hits + len(entries) - len(new)
    else:
        queued = frontier.admit(job_id, entries, settings.shards, token=token, part=part, last=last, **budget)
        duplicates = hits  # the admit script counts the exact set's own duplicates
    frontier.count(job_id, duplicates=duplicates)
    if cache is not None:
        for e in entries:
            cache.add(f"{space} {e.url}")
    return queued, hits
