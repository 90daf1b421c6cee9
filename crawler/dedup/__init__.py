"""Seen-sets (``seenset``: the exact set in the frontier's admit script, or the Redis Bloom
filter) and the per-process cache in front of them. ``admit_links`` is the one way URLs enter
a job."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from redis import Redis

from crawler.config.settings import Settings
from crawler.dedup.bloom import BloomSeen
from crawler.dedup.cache import SeenCache
from crawler.dedup.seenset import Claim, SeenSet, plus_counts, seen_set
from crawler.frontier import Entry, Frontier
from crawler.frontier.core import Admitted

__all__ = ["ADMIT_CHUNK", "BloomSeen", "Claim", "SeenCache", "SeenSet", "admit_links", "seen_set"]

# URLs per admission script call at most: a call blocks Redis while it runs (measured here: a
# few ms for 1,000 URLs, 2 s for 100,000), and a page of anchors once made one call of 312,500.
ADMIT_CHUNK = 1000


def admit_links(redis: Redis, frontier: Frontier, job_id: str, settings: Settings, entries: Sequence[Entry],
                token: str = "", cache: SeenCache | None = None,
                seen: SeenSet | None = None, cache_space: str = "",
                chunk: int = ADMIT_CHUNK, counts: Mapping[str, int] | None = None) -> tuple[Admitted, int]:
    """Queue the canonical entries this job has not seen. Returns (URLs queued, cache hits).

    ``seen`` (default: the one the job's settings name) decides what is new: see
    ``crawler.dedup.seenset``. The local cache, when given, answers for URLs this process
    already knows are seen in ``cache_space`` (default: the job). At most ``chunk`` entries go
    to Redis in one script call; the parts are cut from ``entries`` before the cache filters
    them, so a redelivered batch is cut the same way whichever process admits it. ``counts``:
    to add to the job's counters with the batch's last part, with the cache's hits (as
    ``duplicates`` and ``cache_hits``), unless the batch was admitted before."""
    seen = seen or seen_set(redis, frontier, job_id, settings)
    if len(entries) <= chunk:
        return _admit(frontier, job_id, entries, token, cache, seen, cache_space, counts=counts)
    queued = Admitted()
    hits = 0
    parts = range(0, len(entries), chunk)
    for k, start in enumerate(parts):
        got, h = _admit(frontier, job_id, entries[start:start + chunk], token, cache, seen,
                        cache_space, part=k, last=k == len(parts) - 1,
                        counts=counts if k == len(parts) - 1 else None)
        queued += got
        queued.spilled += got.spilled
        hits += h
    return queued, hits


def _admit(frontier: Frontier, job_id: str, entries: Sequence[Entry], token: str, cache: SeenCache | None,
           seen: SeenSet, cache_space: str, part: int | None = None, last: bool = True,
           counts: Mapping[str, int] | None = None) -> tuple[Admitted, int]:
    hits = 0
    space = cache_space or job_id
    if cache is not None and token and seen.answered(token):
        # An earlier run of this batch set the filter's bits and died before queueing: another
        # batch here may since have found those URLs "seen" and cached them, but only this
        # batch's memo says they are still to be queued.
        cache = None
    if cache is not None:
        fresh = [e for e in entries if not cache.seen(f"{space} {e.url}")]
        hits = len(entries) - len(fresh)
        entries = fresh
    mine = plus_counts(counts, duplicates=hits, cache_hits=hits) if cache is not None else counts
    admission = seen.admit(entries, token=token, part=part, last=last, counts=mine)
    if admission.ignored:
        return Admitted(), hits
    if admission.duplicates:
        frontier.count(job_id, duplicates=admission.duplicates)
    if cache is not None:
        for e in entries:
            cache.add(f"{space} {e.url}")
    return admission.queued, hits
