"""One seen-set interface, two kinds chosen by the job's settings."""

from __future__ import annotations

import pytest
import redis

from crawler import jobs
from crawler.config.settings import Settings
from crawler.dedup.seenset import BloomSeenSet, Claim, ExactSeen, seen_kind, seen_set
from crawler.frontier import Entry, Frontier
from crawler.state import keys

A = "http://a.example/"


@pytest.mark.parametrize("dedup, kind", [("set", ExactSeen), ("bloom", BloomSeenSet)])
def test_each_kind_admits_once_skips_marked_urls_and_forgets_on_reset(r: redis.Redis, dedup: str,
                                                                       kind: type) -> None:
    settings = Settings.from_env(dedup=dedup, shards=1)
    job_id = jobs.submit(r, settings, [A])
    seen = seen_set(r, Frontier(r), job_id, settings)
    assert isinstance(seen, kind) and seen_kind(settings) == seen.name
    assert seen.admit([Entry(A + "1", 1)]).queued == [A + "1"]
    assert seen.admit([Entry(A + "1", 1)]).queued == []
    seen.mark_skipped([A + "2"])
    seen.mark_stored([(A + "3", 1)])
    assert seen.admit([Entry(A + "2", 1), Entry(A + "3", 1)]).queued == []
    seen.reset()
    assert A + "2" in seen.admit([Entry(A + "2", 1)]).queued


@pytest.mark.parametrize("dedup", ["set", "bloom"])
def test_a_redirect_target_is_claimed_once_and_its_claimer_gets_the_same_answer_until_stored(
        r: redis.Redis, dedup: str) -> None:
    settings = Settings.from_env(dedup=dedup, shards=1)
    job_id = jobs.submit(r, settings, [A])
    seen = seen_set(r, Frontier(r), job_id, settings)
    old, older, target = Claim(A + "old", A + "new", 1), Claim(A + "older", A + "new", 2), Claim(A + "x", A + "y", 1)
    # Two pages of one batch redirected to the same new page: the first has it.
    assert seen.claim_targets([old, older, target]) == [True, False, True]
    # Asked again (a redelivered parse, a rendered page parsed apart): the same answers.
    assert seen.claim_targets([older, old]) == [False, True]
    # The target is seen: a link to it queues nothing.
    assert seen.admit([Entry(A + "new", 3), Entry(A + "y", 3)]).queued == []
    # A target the job had queued already is seen by whoever claims it.
    seen.admit([Entry(A + "linked", 1)])
    assert seen.claim_targets([Claim(A + "moved", A + "linked", 2)]) == [False]
    # Once stored, the answer is let go: nothing asks again, and memory stays bounded.
    seen.forget_claims([old, older, target, Claim(A + "moved", A + "linked", 2)])
    assert not r.exists(keys.redirect_claims(job_id), keys.bloom_memo(job_id, keys.REDIRECTS))
    assert seen.claim_targets([old]) == [False]
    assert seen.claim_targets([]) == []


@pytest.mark.parametrize("dedup", ["set", "bloom"])
def test_a_redirect_target_a_page_budget_dropped_is_the_claimers(r: redis.Redis, dedup: str) -> None:
    # Dropped by max_pages, the target is never fetched: the page that redirected there, fetched
    # and paid for, was stored as its duplicate with its items and links lost.
    settings = Settings.from_env(dedup=dedup, shards=1, max_pages=1)
    job_id = jobs.submit(r, settings, [A])
    seen = seen_set(r, Frontier(r), job_id, settings)
    assert seen.admit([Entry(A + "t", 1)]).queued == []  # over the budget
    assert seen.claim_targets([Claim(A, A + "t", 0)]) == [True]


def test_a_redirect_is_a_shorter_path_as_a_link_would_be(r: redis.Redis) -> None:
    settings = Settings.from_env(dedup="set", shards=1, max_depth=2)
    job_id = jobs.submit(r, settings, [A])
    seen = seen_set(r, Frontier(r), job_id, settings)
    # Stored at the depth limit (its links cut): a page one hop up that redirects there is its
    # fetch at the shorter depth, as a link from there would have queued it again.
    seen.mark_stored([(A + "deep", 2)])
    assert seen.claim_targets([Claim(A + "x", A + "deep", 1)]) == [True]
    assert r.hget(keys.seen(job_id), A + "deep") == b"x1"
    # Queued deeper: it stays the queue's, at the shorter depth.
    seen.admit([Entry(A + "queued", 2)])
    assert seen.claim_targets([Claim(A + "y", A + "queued", 1)]) == [False]
    assert r.hget(keys.seen(job_id), A + "queued") == b"1"
