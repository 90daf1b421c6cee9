"""Bounded Redis memory: host queues capped in Redis, the overflow in the store's frontier table,
brought back in order, each URL once, whatever step dies (``crawler.frontier.spill``)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import redis

from crawler import jobs, stages
from crawler.config.settings import Settings
from crawler.frontier import Entry, Fetched, Frontier, spill
from crawler.stages.messages import LinkGroup
from crawler.state import keys
from crawler.store import open_store
from crawler.testweb import TestWeb
from tests.conftest import Workers, rows_by_url
from tests.integration.test_crawl import cli, page_hits

HOST = "127.0.9.9"
SEED = f"http://{HOST}/"
BIG = 50_000
CAP = 1_000


def _settings(tmp_path: Path, cap: int, **kw: object) -> Settings:
    return Settings.from_env(store=f"sqlite:///{tmp_path}/crawl.db", shards=1, host_queue_cap=cap,
                             local_cache_size=0, **kw)


def _frontier_bytes(r: redis.Redis, job_id: str) -> int:
    """Bytes Redis spends on the job's frontier: every key of the job but the Bloom filter's
    (fixed in size, whatever the number of URLs queued)."""
    total = 0
    for k in r.scan_iter(keys.job_pattern(job_id), count=1000):
        name = k.decode()
        if name.startswith(keys.role_prefix(job_id, keys.BLOOM)):
            continue
        total += int(r.memory_usage(k, samples=0) or 0)
    return total


def _admit_all(ctx: stages.Context, job_id: str, urls: list[str], sample: Callable[[], None]) -> None:
    job = jobs.load(ctx.redis, job_id)
    for i in range(0, len(urls), 1000):
        stages.dedup_stage(ctx, job, "", [LinkGroup.single(u, 1, SEED) for u in urls[i:i + 1000]])
        sample()


def test_a_host_of_50000_urls_under_a_cap_of_1000_is_crawled_once_each_in_order_in_bounded_memory(
        r: redis.Redis, tmp_path: Path) -> None:
    settings = _settings(tmp_path, CAP)
    job_id = jobs.submit(r, settings, [SEED])
    ctx = stages.Context.default(r)
    urls = [f"http://{HOST}/p{i}" for i in range(BIG)]
    peak = [0]

    def sample() -> None:
        peak[0] = max(peak[0], _frontier_bytes(r, job_id))

    _admit_all(ctx, job_id, urls, sample)
    st = jobs.status(r, job_id)
    assert st["queued_in_redis"] == CAP == r.llen(keys.host_queue(job_id, HOST))
    assert st["queued_in_store"] == BIG + 1 - CAP
    assert jobs.hosts(r, job_id)[0]["queued_in_store"] == BIG + 1 - CAP

    # Crawl it as dispatch, fetch and store would, the refill task running whenever a
    # dispatcher would send it (URLs in the store).
    f, store = ctx.frontier, ctx.page_store(settings.store)
    order: list[str] = []
    deadline = time.monotonic() + 120
    while jobs.status(r, job_id)["status"] != "done":
        assert time.monotonic() < deadline, jobs.status(r, job_id)
        d = f.dispatch(job_id, 0, max_urls=500, per_host=500, delay=0.0, lease_timeout=60,
                       concurrency=500)
        got = [(e.url, d.token) for e, _ in d.items]
        order += [u for u, _ in got]
        f.fetched(job_id, [Fetched(u, t) for u, t in got], lease_timeout=60, delay=0.0)
        f.release(job_id, got, delay=0.0)
        if f.spill_counts(job_id)[1] > 0:
            spill.maintain(f, store, job_id, CAP, 1)
        sample()
    assert order == [SEED, *urls]  # each once, and in the order they were found
    st = jobs.status(r, job_id)
    assert st["queued_in_redis"] == 0 and st["queued_in_store"] == 0
    assert st["counters"]["spilled"] == st["counters"]["refilled"] == BIG + 1 - CAP
    assert store.spill_take(job_id, HOST, 0, 10) == []

    # The stated bound: the job's frontier never held more than 400 KB in Redis (a capped queue
    # of 1,000 entries, the per-host and job records). Without the cap the same admissions
    # take many times that.
    assert peak[0] < 400_000, peak[0]
    uncapped = jobs.submit(r, _settings(tmp_path / "u", 0), [SEED])
    _admit_all(ctx, uncapped, urls, lambda: None)
    assert r.llen(keys.host_queue(uncapped, HOST)) == BIG + 1
    assert _frontier_bytes(r, uncapped) > 8 * peak[0]
    print(f"\nfrontier bytes in Redis: capped at {CAP}: peak {peak[0]:,}; "
          f"uncapped: {_frontier_bytes(r, uncapped):,} for {BIG + 1:,} queued URLs")
    ctx.close()


def _staged_job(r: redis.Redis, tmp_path: Path, n: int, cap: int) -> tuple[str, Frontier, list[str]]:
    job_id = jobs.submit(r, _settings(tmp_path, cap), [SEED])
    f = Frontier(r)
    urls = [f"http://{HOST}/s{i}" for i in range(n)]
    # Admission alone, as a dedup task killed before its flush leaves it.
    got = f.admit(job_id, [Entry(u, 1) for u in urls], 1, queue_cap=cap, trusted=True)
    assert got.spilled == n + 1 - cap
    return job_id, f, urls


def test_urls_a_killed_dedup_task_left_staged_reach_the_store_and_come_back(r: redis.Redis,
                                                                             tmp_path: Path) -> None:
    job_id, f, _ = _staged_job(r, tmp_path, 30, 10)
    store = open_store(f"sqlite:///{tmp_path}/crawl.db")
    assert len(f.staged(job_id)) == 21 and store.spill_take(job_id, HOST, 0, 100) == []
    # The refill task writes them to the store; the host's queue (10) is not low yet.
    assert spill.maintain(f, store, job_id, 10, 1) == (21, 0)
    assert f.staged(job_id) == [] and len(store.spill_take(job_id, HOST, 0, 100)) == 21
    # Writing them twice (a flush that died before unstaging) changes nothing.
    store.spill_put(job_id, [(HOST, 1, "dup")])
    assert store.spill_take(job_id, HOST, 0, 1)[0][1] != "dup"
    store.close()


def test_a_repeated_refill_queues_nothing_twice_and_a_gap_waits(r: redis.Redis, tmp_path: Path) -> None:
    job_id, f, urls = _staged_job(r, tmp_path, 30, 10)
    store = open_store(f"sqlite:///{tmp_path}/crawl.db")
    spill.flush(f, store, job_id)
    rows = store.spill_take(job_id, HOST, 0, 100)
    qkey = keys.host_queue(job_id, HOST)
    # Rows 1-5 and 7: row 6 still staged somewhere. The refill stops before the gap.
    partial = [row for row in rows if row[0] in (1, 2, 3, 4, 5, 7)]
    assert f.refill(job_id, HOST, 0, partial) == 5
    assert r.llen(qkey) == 15
    # The same rows again (a refill task that died before deleting them): nothing queued twice.
    assert f.refill(job_id, HOST, 0, partial) == 5
    assert r.llen(qkey) == 15
    assert f.refill(job_id, HOST, 0, rows) == 21
    queued = [e.decode() for e in r.lrange(qkey, 0, -1)]
    assert [Entry.decode(e).url for e in queued] == [SEED, *urls]
    assert jobs.status(r, job_id)["queued_in_store"] == 0
    store.close()


def test_the_store_being_down_keeps_urls_staged_not_lost(r: redis.Redis, tmp_path: Path) -> None:
    settings = _settings(tmp_path, 5)
    job_id = jobs.submit(r, settings, [SEED])
    ctx = stages.Context.default(r)

    class Down:
        def spill_put(self, *a: object) -> None:
            from crawler.store import StoreUnavailable
            raise StoreUnavailable("store down for the test")

    ctx._stores.put(settings.store, Down())  # type: ignore[arg-type]
    job = jobs.load(r, job_id)
    stages.dedup_stage(ctx, job, "", [LinkGroup.single(f"http://{HOST}/d{i}", 1, SEED) for i in range(20)])
    assert len(ctx.frontier.staged(job_id)) == 16  # 21 URLs, 5 queued
    assert jobs.status(r, job_id)["queued_in_store"] == 16


def test_workers_crawl_the_reachable_set_once_under_a_small_cap(
        make_web: Callable[..., TestWeb], workers: Workers, redis_url: str, r: redis.Redis, tmp_path: Path) -> None:
    web = make_web(2, 300)
    workers.start("w0", "shard-0", env={"CRAWLER_SHARDS": "1"})
    db = tmp_path / "crawl.db"
    env = {**os.environ, "CRAWLER_REDIS_URL": redis_url, "CRAWLER_SHARDS": "1"}
    sub = cli("submit", *web.seeds(), "--store", f"sqlite:///{db}", "--host-queue-cap", "50", "--per-host", "4",
              env=env)
    assert sub.returncode == 0, sub.stderr
    job_id = sub.stdout.strip()
    seen_in_store = 0
    deadline = time.monotonic() + 90
    while (st := jobs.status(r, job_id))["status"] not in jobs.FINISHED:
        assert time.monotonic() < deadline, st
        seen_in_store = max(seen_in_store, st["queued_in_store"])
        assert st["queued_in_redis"] <= 2 * 50 + 8  # two hosts' capped queues, and leases that expire back
        time.sleep(0.1)
    assert st["status"] == "done"
    c = st["counters"]
    assert seen_in_store > 0 and c["spilled"] == c["refilled"] > 0
    assert st["queued_in_redis"] == st["queued_in_store"] == 0
    assert set(rows_by_url(db)) == set(web.reachable_urls())
    hits = page_hits(web)
    assert max(hits.values()) == 1, [u for u, n in hits.items() if n > 1][:5]
    out = cli("status", job_id, "--hosts", env=env)
    assert "queued: 0 in Redis, 0 in the store" in out.stdout and "in store" in out.stdout
