"""The dedup stage: link groups in, the URLs admitted to the frontier out."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from crawler import jobs
from crawler.dedup import admit_links
from crawler.errors import BadURL
from crawler.frontier import Entry, spill
from crawler.spiders.request import MARK, strip_mark, urgent_spec
from crawler.stages.context import Context
from crawler.stages.messages import LinkGroup
from crawler.state.jobconf import Job
from crawler.store import StoreUnavailable
from crawler.urls import canonicalize, repeated_segments

log = logging.getLogger(__name__)


def dedup_stage(ctx: Context, job: Job, token: str, links: Sequence[LinkGroup]) -> list[str]:
    """Canonicalise links and admit the ones this job has not seen; return those URLs."""
    s = job.settings
    best: dict[str, Entry] = {}
    bad = traps = 0
    drop = s.dropped_params
    for group in links:
        specs = dict(group.specs) if group.specs else None
        for url, depth, referrer in group.links():
            try:
                if MARK in url:  # a request key: its URL canonical, its marker kept
                    cut = url.index(MARK)
                    canon = canonicalize(url[:cut], s.max_url_length, drop) + url[cut:]
                else:
                    canon = canonicalize(url, s.max_url_length, drop)
            except BadURL:
                bad += 1
                continue
            # A URL with no more path segments than the limit cannot repeat one past it.
            if (s.max_repeated_segments and canon.count("/") - 2 > s.max_repeated_segments
                    and repeated_segments(canon) > s.max_repeated_segments):
                traps += 1
                continue
            spec = specs.get(url, "") if specs else ""
            prev = best.get(canon)
            # A request with a callback or data wins over a plain link to the same key.
            if prev is None or (depth < prev.depth and (spec or not prev.spec)) or (spec and not prev.spec):
                best[canon] = Entry(canon, depth, referrer, 0, spec, urgent_spec(spec)) if spec \
                    else Entry(canon, depth, referrer)
    # A request key's marker (``#~<fingerprint>``) would read as an opaque token: POSTs and
    # dont_filter requests are the spider's own choice, not a trap's links, and skip the cap.
    variants = ctx.variants.over_cap(job.id, [(e.url, strip_mark(e.referrer)) for e in best.values()
                                              if MARK not in e.url], s.max_query_variants)
    for url in variants:
        del best[url]
    # The cache may not answer for depth-limited jobs: a URL seen again by a shorter path must
    # reach the exact set, which keeps shortest depths.
    cache = ctx.cache if s.local_cache_size and not s.max_depth else None
    # KeyError if the job is gone (Redis lost it): nothing may be marked seen in a Bloom filter
    # until ``crawler recover`` has rebuilt the job. The cache answers only within one cycle and
    # one rebuild of the job: what this process saw before either is not seen after it.
    space = jobs.seen_space(ctx.redis, job.id)
    # Counted with the batch's admission, once: a redelivered batch counts nothing again.
    queued, _hits = admit_links(ctx.redis, ctx.frontier, job.id, s, list(best.values()), token=token, cache=cache,
                                seen=ctx.seen_set(job), cache_space=space,
                                counts={"bad_url": bad, "dropped_trap": traps,
                                        "cache_lookups": len(best) if cache is not None else 0,
                                        "dropped_trap:query_variants": len(variants)})
    if queued.spilled:
        flush_spill(ctx, job)
    return queued


def flush_spill(ctx: Context, job: Job) -> None:
    """Write the URLs admission staged for the store. With the store down they stay staged in
    Redis, where the job's refill task finds them (``crawler.frontier.spill``)."""
    try:
        spill.flush(ctx.frontier, ctx.page_store(job.settings.store), job.id)
    except StoreUnavailable as exc:
        log.warning("job %s: staged URLs wait for the store (%s)", job.id, exc)


def refill_stage(ctx: Context, job: Job) -> tuple[int, int]:
    """The refill task: staged URLs to the store, low hosts' queues refilled from it. Returns
    (URLs written to the store, URLs brought back)."""
    s = job.settings
    return spill.maintain(ctx.frontier, ctx.page_store(s.store), job.id, s.host_queue_cap, s.shards)
