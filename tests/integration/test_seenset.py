"""One seen-set interface, two kinds chosen by the job's settings."""

from __future__ import annotations

import pytest
import redis

from crawler import jobs
from crawler.config.settings import Settings
from crawler.dedup.seenset import BloomSeenSet, ExactSeen, seen_kind, seen_set
from crawler.frontier import Entry, Frontier

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
