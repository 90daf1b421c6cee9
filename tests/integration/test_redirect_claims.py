"""A redirected page's claim on its target, through the real parse and store stages: it holds
for every fetch of the page until one of them is stored with its lease."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest
import redis

from crawler import jobs, stages
from crawler.config.settings import Settings
from crawler.frontier import Dispatched, Fetched
from crawler.stages.messages import FetchedPage
from crawler.state import keys
from crawler.store import open_store
from tests.integration.test_store import _page

OLD, NEW = "http://a.example/old", "http://a.example/new"


def _lease(ctx: stages.Context, job_id: str, now: float) -> Dispatched:
    d = ctx.frontier.dispatch(job_id, 0, max_urls=5, per_host=5, delay=0, lease_timeout=60, concurrency=5, now=now)
    assert d.items
    return d


def _fetched(ctx: stages.Context, r: redis.Redis, job_id: str, d: Dispatched) -> list[FetchedPage]:
    """The leased page, fetched: it redirected to NEW."""
    url = d.items[0][0].url
    ctx.frontier.fetched(job_id, [Fetched(url, d.token)], lease_timeout=60, delay=0)
    body = keys.body(job_id, d.token, url)
    r.set(body, b'<html><title>t</title><a href="/child">c</a></html>')
    return [dataclasses.replace(_page(url, body), final_url=NEW, outlinks=())]


@pytest.mark.parametrize("dedup", ["set", "bloom"])
def test_a_page_fetched_again_after_its_lease_expired_keeps_its_claim_on_its_target(
        r: redis.Redis, tmp_path: Path, dedup: str) -> None:
    # The first fetch's store comes late, after the lease expired and the page was leased and
    # fetched again. Its store let the claim go, so the second parse found the target seen and
    # stored the page as a duplicate of its own target: no row had the target's links.
    settings = Settings.from_env(store=f"sqlite:///{tmp_path}/c.db", obey_robots=False, shards=1,
                                 near_duplicates=False, dedup=dedup)
    job_id = jobs.submit(r, settings, [OLD])
    ctx = stages.Context.default(r)
    try:
        job = jobs.load(r, job_id)
        now = time.time()
        first = _lease(ctx, job_id, now)
        parsed, _ = stages.parse_stage(ctx, job, first.token, _fetched(ctx, r, job_id, first))
        assert parsed[0].near_duplicate_of is None and parsed[0].outlinks
        ctx.frontier.reap(job_id, delay=0, max_attempts=5, now=now + 10_000)  # the lease expired
        second = _lease(ctx, job_id, now + 10_001)
        stages.store_stage(ctx, job, first.token, parsed)  # late: its lease is another's now
        again, _ = stages.parse_stage(ctx, job, second.token, _fetched(ctx, r, job_id, second))
        assert again[0].near_duplicate_of is None and again[0].outlinks
        stages.store_stage(ctx, job, second.token, again)
    finally:
        ctx.close()
    store = open_store(settings.store)
    try:
        [row] = list(store.pages())
    finally:
        store.close()
    assert (row["url"], row["near_duplicate_of"]) == (OLD, None) and row["outlinks"]
    # Stored with its lease: the claim is let go.
    assert not r.exists(keys.redirect_claims(job_id), keys.bloom_memo(job_id, keys.REDIRECTS))
