"""A job running across the upgrade that gave the Bloom filter and the near-duplicate index hash
tags of their own (``keys.role_prefix``) keeps what it has seen and indexed: a job whose record
lacks ``keys.LAYOUT_FIELD`` was submitted before, and keeps them under its own tag for life,
resets included, whichever process asks first."""

from __future__ import annotations

import redis

from crawler import jobs
from crawler.config.settings import Settings
from crawler.dedup.bloom import BloomSeen
from crawler.dedup.neardup import NearDuplicates
from crawler.state import keys

OLD = "c:{old}:"  # where every key of a job was before the upgrade, spelled out


def _old_job(r: redis.Redis) -> None:
    r.hset(keys.meta("old"), mapping={"id": "old", "status": "running"})  # no layout field


def test_a_bloom_filter_made_before_the_upgrade_is_kept_through_resets(redis_url: str) -> None:
    r = redis.Redis.from_url(redis_url)
    _old_job(r)
    urls = [f"http://a.com/{i}" for i in range(500)]
    worker = BloomSeen(r, "old", capacity=10_000)  # a worker's, cached across tasks
    assert worker.legacy and len(worker.add_many(urls)) == 500
    assert r.exists(OLD + "bloom") and not list(r.scan_iter(keys.role_prefix("old", keys.BLOOM) + "*"))
    assert BloomSeen(r, "old", capacity=10_000).add_many(urls) == []  # another process: all seen
    # A periodic cycle's reset by another process; then a process that starts afterwards.
    assert BloomSeen(r, "old").reset() >= 2
    fresh = BloomSeen(r, "old", capacity=10_000)
    assert fresh.legacy and fresh.add_many(urls[:10]) == urls[:10]
    assert worker.add_many(urls[:10]) == []  # the same filter, not a second one
    assert BloomSeen(r, "old").reset() >= 2
    assert not r.exists(OLD + "bloom") and not list(r.scan_iter(OLD + "bf:*"))  # nothing left of it
    assert not list(r.scan_iter("c:{old~*"))  # nor a second filter under the new tag


def test_a_near_duplicate_index_made_before_the_upgrade_is_kept(redis_url: str) -> None:
    r = redis.Redis.from_url(redis_url)
    _old_job(r)
    h = 0x0123456789ABCDEF
    assert NearDuplicates(r).find_or_add("old", [("http://a.com/1", h)], 3, budget=0) == [None]
    assert r.exists(OLD + "shseq") and not list(r.scan_iter("c:{old~*"))
    # One bit away from the page indexed under the old layout: its near-duplicate.
    assert NearDuplicates(r).find_or_add("old", [("http://a.com/2", h ^ 1)], 3, budget=0) == ["http://a.com/1"]
    assert NearDuplicates(r).reset("old") >= 2 and not r.exists(OLD + "shseq")
    assert NearDuplicates(r).legacy("old")  # still: the job's record decides, not its keys


def test_a_job_submitted_now_has_its_parts_under_tags_of_their_own(redis_url: str) -> None:
    r = redis.Redis.from_url(redis_url)
    job_id = jobs.submit(r, Settings.from_env(), ["http://127.0.1.1:9/"])
    assert r.hget(keys.meta(job_id), keys.LAYOUT_FIELD) == keys.LAYOUT.encode()
    assert keys.LAYOUT_FIELD not in jobs.status(r, job_id)  # nothing an operator acts on
    assert not BloomSeen(r, job_id).legacy and not NearDuplicates(r).legacy(job_id)
    assert r.exists(keys.bloom_meta(job_id)) and not r.exists(keys.prefix(job_id) + "bloom")
