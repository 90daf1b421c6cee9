"""Two savings the dispatcher makes on Redis, checked against a real Redis: it asks for due retries
(the promote script) at most once a second, or sooner when the first retry it knows of is due,
and a Bloom job's dispatch looks up no depths in the exact seen hash, which such a job never
fills. Each test fails if its saving is taken out: a promote on every tick, a retry left waiting
past its due time, a seen hash read (or not read) against the job's dedup."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from crawler import jobs
from crawler.config.settings import Settings
from crawler.frontier import Entry, Fetched, Frontier
from crawler.frontier.dispatcher import PROMOTE_EVERY, UNRECORDED_GRACE, Dispatcher
from crawler.local.redis_server import RedisServer
from crawler.state import keys

JOB = "job-th"
# IP literals on loopback: nothing here is fetched or resolved, but no name is ever looked up.
SEED = "http://127.0.1.1/"


def _submit(r: redis.Redis, tmp_path: Path, seed: str, **settings: Any) -> str:
    """A job as ``crawl`` submits it (its settings are what the dispatcher reads), seed queued."""
    s = Settings.from_env(store=f"sqlite:///{tmp_path}/{seed.split('/')[2]}.db", shards=1, **settings)
    return jobs.submit(r, s, [seed])


def _dispatcher(r: redis.Redis, sent: list[tuple[str, int, str, list[str]]]) -> Dispatcher:
    return Dispatcher(r, [0], lambda *a: sent.append(a), lambda *a: None)


def test_retries_are_asked_for_once_a_second_or_when_the_first_is_due(
        r: redis.Redis, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    job_id = _submit(r, tmp_path, SEED)
    f = Frontier(r)
    t0 = time.time()
    d = f.dispatch(job_id, 0, max_urls=10, per_host=1, delay=0, lease_timeout=60, concurrency=10, now=t0)
    (entry, _host), = d.items
    # The request failed and backs off: it waits in the retry set until ``due``.
    due = t0 + 0.4
    f.fetched(job_id, [Fetched(entry.url, d.token, retry_at=due)], lease_timeout=60, delay=0)
    assert r.zcard(keys.retries(job_id)) == 1

    sent: list[tuple[str, int, str, list[str]]] = []
    disp = _dispatcher(r, sent)
    looks: list[float] = []  # the ``now`` of each call of the promote script
    real_promote = disp.frontier.promote

    def promote(job: str, *, now: float | None = None, limit: int = 1000) -> float | None:
        assert now is not None
        looks.append(now)
        return real_promote(job, now=now, limit=limit)

    monkeypatch.setattr(disp.frontier, "promote", promote)

    # The first tick asks, and learns when the retry is due; the run loop is told to wake by then.
    wait = disp.tick(t0)
    assert looks == [t0]
    assert wait <= due - t0
    # Every tick before then (the loop ticks on every wake: admissions, completions) asks nothing.
    for k in range(1, 40):
        disp.tick(t0 + k * 0.01)
    assert looks == [t0]
    assert r.zcard(keys.retries(job_id)) == 1 and sent == []
    # At its due time, less than PROMOTE_EVERY after the last look, the tick asks and the retry
    # goes back to its host queue, to be leased by that same tick (one attempt counted).
    disp.tick(due)
    assert looks == [t0, due]
    assert r.zcard(keys.retries(job_id)) == 0
    (_job, _shard, token, (raw,)), = sent
    again = Entry.decode(raw)
    assert (again.url, again.attempts) == (entry.url, 1)

    # No retry is known now: the next look is a second on, however often the loop ticks, and it
    # finds a retry that came in meanwhile (it fails again, due half a second on).
    f.fetched(job_id, [Fetched(again.url, token, retry_at=due + 0.5)], lease_timeout=60, delay=0)
    for k in range(1, 100):
        disp.tick(due + k * 0.01)
    assert looks == [t0, due]
    disp.tick(due + PROMOTE_EVERY)
    assert looks == [t0, due, due + PROMOTE_EVERY]
    assert r.zcard(keys.retries(job_id)) == 0
    assert [Entry.decode(e).attempts for *_, es in sent[1:] for e in es] == [2]


@pytest.fixture
def own() -> Iterator[redis.Redis]:
    """A Redis of this test's own: its command counts are this test's alone (a dispatcher thread
    another test left behind would add to those of the session's shared server)."""
    with RedisServer() as server:
        client = redis.Redis.from_url(server.url)
        yield client
        client.close()


def _hmget_calls(r: redis.Redis) -> int:
    # Commands a script runs count in commandstats as the client's own do.
    return int(r.info("commandstats").get("cmdstat_hmget", {}).get("calls", 0))


def test_a_dispatch_without_depths_leaves_the_seen_hash_alone(own: redis.Redis) -> None:
    r = own
    # Two jobs alike: a URL queued at depth 3, then found again by a shorter path (depth 1). The
    # exact seen hash keeps the shorter depth, and dispatch applies it to the entry it leases.
    url = "http://127.0.1.2/deep"
    depth_of: dict[bool, int] = {}
    hmgets: dict[bool, int] = {}
    for depths in (True, False):
        job = f"{JOB}-{int(depths)}"
        r.hset(keys.meta(job), mapping={"status": "running"})
        f = Frontier(r)
        f.admit(job, [Entry(url, depth=3)], 1, max_depth=3)
        f.admit(job, [Entry(url, depth=1)], 1, max_depth=3)
        assert r.hget(keys.seen(job), url) == b"1"
        assert r.llen(keys.host_queue(job, "127.0.1.2")) == 1  # the queued entry still says 3
        before = _hmget_calls(r)
        d = f.dispatch(job, 0, max_urls=10, per_host=1, delay=0, lease_timeout=60, concurrency=10,
                       depths=depths)
        hmgets[depths] = _hmget_calls(r) - before
        (entry, _host), = d.items
        depth_of[depths] = entry.depth
        # The lease holds the entry as dispatched: the fetch and a lease's expiry see the same.
        assert r.hget(keys.leases(job), url).decode().endswith(entry.encode())  # type: ignore[union-attr]
    # Depths on: the seen hash's shorter depth is applied. Off: the entry's own depth stands.
    assert depth_of == {True: 1, False: 3}
    # Off saves exactly one command, the seen hash's HMGET; everything else read is the same.
    assert hmgets[True] == hmgets[False] + 1, hmgets


def test_the_dispatcher_looks_up_depths_for_exact_seen_sets_only(
        r: redis.Redis, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Without --max-depth a job dedups with a Bloom filter (dedup auto), which keeps no depths;
    # with it, or with dedup set, it keeps the exact hash whose depths dispatch applies.
    bloom = _submit(r, tmp_path, "http://127.0.1.3/")
    exact = _submit(r, tmp_path, "http://127.0.1.4/", max_depth=3)
    forced = _submit(r, tmp_path, "http://127.0.1.5/", dedup="set")
    sent: list[tuple[str, int, str, list[str]]] = []
    disp = _dispatcher(r, sent)
    asked: dict[str, bool] = {}
    real_dispatch = disp.frontier.dispatch

    def dispatch(job: str, shard: int, **kw: Any) -> Any:
        asked[job] = kw.get("depths", True)  # Frontier.dispatch's default when not given
        return real_dispatch(job, shard, **kw)

    monkeypatch.setattr(disp.frontier, "dispatch", dispatch)
    disp.tick(time.time())
    assert asked == {bloom: False, exact: True, forced: True}
    assert sorted(job for job, *_ in sent) == sorted(asked)  # each seed went, whatever the flag


def test_a_listed_job_with_no_record_is_taken_off_the_list_after_a_grace(r: redis.Redis, tmp_path: Path) -> None:
    # Its record lost with a master (or purged behind the dispatcher's back): listed for ever,
    # every tick of every dispatcher would look at it.
    real = _submit(r, tmp_path, SEED)
    r.sadd(keys.JOBS, "ghost")
    sent: list[tuple[str, int, str, list[str]]] = []
    d = _dispatcher(r, sent)
    t0 = time.time()
    d.tick(now=t0)
    d.tick(now=t0 + UNRECORDED_GRACE - 1)
    assert r.sismember(keys.JOBS, "ghost")  # a cluster's pipeline may list a job before its record lands
    d.tick(now=t0 + UNRECORDED_GRACE)
    assert not r.sismember(keys.JOBS, "ghost") and r.sismember(keys.JOBS, real)
    # A record that lands within the grace keeps the job listed.
    r.sadd(keys.JOBS, "late")
    d.tick(now=t0 + 100)
    r.hset(keys.meta("late"), mapping={"id": "late", "status": "running", "settings": "{}"})
    d.tick(now=t0 + 100 + UNRECORDED_GRACE)
    assert r.sismember(keys.JOBS, "late")
