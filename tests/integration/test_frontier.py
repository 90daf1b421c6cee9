"""The frontier's scripts against a real Redis: admission, politeness, leases, completion."""

from __future__ import annotations

import multiprocessing
import time

import redis

from crawler import jobs
from crawler.config.settings import Settings
from crawler.frontier import Entry, Fetched, Frontier
from crawler.state import keys

JOB = "job-t"


def _start(r: redis.Redis, job: str = JOB) -> Frontier:
    r.hset(keys.meta(job), mapping={"status": "running"})
    r.sadd(keys.JOBS, job)
    return Frontier(r)


def _urls(host: str, n: int) -> list[Entry]:
    return [Entry(f"http://{host}/p{i}") for i in range(n)]


def _dispatch(f: Frontier, now: float, **kw: object) -> list[str]:
    args = {"max_urls": 100, "per_host": 1, "delay": 0.0, "lease_timeout": 60.0, "concurrency": 100, **kw}
    d = f.dispatch(JOB, 0, now=now, **args)
    return [e.url for e, _ in d.items]


def test_admit_is_once_per_url(r: redis.Redis) -> None:
    f = _start(r)
    new = f.admit(JOB, _urls("a.com", 3), 1)
    assert len(new) == 3
    assert f.admit(JOB, _urls("a.com", 5), 1) == ["http://a.com/p3", "http://a.com/p4"]
    assert r.llen(keys.host_queue(JOB, "a.com")) == 5
    assert jobs.status(r, JOB)["counters"]["duplicates"] == 3


def test_budget_caps_admissions_exactly(r: redis.Redis) -> None:
    f = _start(r)
    assert len(f.admit(JOB, _urls("a.com", 10), 1, budget=4)) == 4
    assert f.admit(JOB, _urls("b.com", 10), 1, budget=4) == []
    assert jobs.status(r, JOB)["counters"]["dropped_max_pages"] == 16


def test_per_host_budget_and_parking(r: redis.Redis) -> None:
    f = _start(r)
    f.admit(JOB, _urls("a.com", 5) + _urls("b.com", 5), 1)
    now = time.time()
    first = _dispatch(f, now, per_host=2)
    assert sorted(first) == ["http://a.com/p0", "http://a.com/p1", "http://b.com/p0", "http://b.com/p1"]
    assert _dispatch(f, now + 1, per_host=2) == []  # both hosts at their budget: parked
    f.fetched(JOB, [Fetched("http://a.com/p0", _token_of(r, "http://a.com/p0"))], lease_timeout=60, delay=0)
    assert _dispatch(f, time.time(), per_host=2) == ["http://a.com/p2"]


def test_delay_spaces_requests_to_one_host(r: redis.Redis) -> None:
    f = _start(r)
    f.admit(JOB, _urls("a.com", 3), 1)
    now = time.time()
    (u0,) = _dispatch(f, now, delay=0.5)
    f.fetched(JOB, [Fetched(u0, _token_of(r, u0))], lease_timeout=60, delay=0.5)
    done = time.time()
    assert _dispatch(f, done + 0.4, delay=0.5) == []  # still waiting out the delay
    d = f.dispatch(JOB, 0, max_urls=10, per_host=1, delay=0.5, lease_timeout=60, concurrency=10, now=done + 0.4)
    assert d.next_due is not None and done + 0.45 <= d.next_due <= done + 0.6
    assert _dispatch(f, done + 0.6, delay=0.5) == ["http://a.com/p1"]


def test_delay_holds_when_host_queue_refills_after_emptying(r: redis.Redis) -> None:
    f = _start(r)
    f.admit(JOB, _urls("a.com", 1), 1)
    (u0,) = _dispatch(f, time.time(), delay=0.5)  # the queue is empty now: the host leaves the ready set
    f.fetched(JOB, [Fetched(u0, _token_of(r, u0))], lease_timeout=60, delay=0.5)
    done = time.time()
    f.admit(JOB, [Entry("http://a.com/new")], 1)  # links found on that page arrive
    assert _dispatch(f, time.time(), delay=0.5) == []
    assert _dispatch(f, done + 0.55, delay=0.5) == ["http://a.com/new"]


def test_job_concurrency_caps_all_hosts(r: redis.Redis) -> None:
    f = _start(r)
    for h in range(10):
        f.admit(JOB, _urls(f"h{h}.com", 2), 1)
    d = f.dispatch(JOB, 0, max_urls=100, per_host=1, delay=0, lease_timeout=60, concurrency=3, now=time.time())
    assert len(d.items) == 3 and d.saturated


def _token_of(r: redis.Redis, url: str) -> str:
    return r.hget(keys.prefix(JOB) + "lease", url).decode().split(" ")[0]


def test_expired_lease_returns_url_and_stale_holder_is_refused(r: redis.Redis) -> None:
    f = _start(r)
    f.admit(JOB, _urls("a.com", 1), 1)
    now = time.time()
    d = f.dispatch(JOB, 0, max_urls=10, per_host=1, delay=0, lease_timeout=5, concurrency=10, now=now)
    url, token = d.items[0][0].url, d.token
    assert f.reap(JOB, delay=0, max_attempts=3, now=now + 1).returned == 0
    assert f.reap(JOB, delay=0, max_attempts=3, now=now + 6).returned == 1
    again = f.dispatch(JOB, 0, max_urls=10, per_host=1, delay=0, lease_timeout=60, concurrency=10, now=now + 7)
    assert [e.url for e, _ in again.items] == [url]
    # The first holder's batch comes back late (a redelivery): it must not fetch.
    assert f.confirm(JOB, [(url, token)], 60) == [False]
    assert f.confirm(JOB, [(url, again.token)], 60) == [True]
    assert jobs.status(r, JOB)["counters"]["inflight"] == 1


def test_release_is_once_and_job_completes(r: redis.Redis) -> None:
    f = _start(r)
    f.admit(JOB, _urls("a.com", 2), 1)
    d = f.dispatch(JOB, 0, max_urls=10, per_host=2, delay=0, lease_timeout=60, concurrency=10, now=time.time())
    leases = [(e.url, d.token) for e, _ in d.items]
    f.fetched(JOB, [Fetched(u, t) for u, t in leases], lease_timeout=60, delay=0)
    f.expect(JOB, ["links-1"])
    assert f.release(JOB, leases, delay=0) == 2
    assert f.release(JOB, leases, delay=0) == 0  # a redelivered store ends nothing twice
    assert jobs.status(r, JOB)["status"] == "running"  # a link batch is still on its way
    assert f.admit(JOB, [], 1, token="links-1") == []
    st = jobs.status(r, JOB)
    assert st["status"] == "done" and st["counters"]["open"] == 0 and st["counters"]["stored"] == 2
    assert JOB.encode() not in r.smembers(keys.JOBS)


def test_redelivered_link_batch_admits_nothing(r: redis.Redis) -> None:
    f = _start(r)
    f.expect(JOB, ["t1"])
    assert len(f.admit(JOB, _urls("a.com", 2), 1, token="t1")) == 2
    f.expect(JOB, ["t1"])  # the parse that sent it ran again
    assert f.admit(JOB, _urls("a.com", 2), 1, token="t1") == []
    assert r.llen(keys.host_queue(JOB, "a.com")) == 2


def test_shorter_path_corrects_depth_before_dispatch(r: redis.Redis) -> None:
    f = _start(r)
    f.admit(JOB, [Entry("http://a.com/x", depth=3)], 1, max_depth=3)
    f.admit(JOB, [Entry("http://a.com/x", depth=1)], 1, max_depth=3)
    d = f.dispatch(JOB, 0, max_urls=10, per_host=1, delay=0, lease_timeout=60, concurrency=10, now=time.time())
    assert d.items[0][0].depth == 1


def test_page_expanded_too_deep_is_expanded_again_once(r: redis.Redis) -> None:
    f = _start(r)
    f.admit(JOB, [Entry("http://a.com/x", depth=2)], 1, max_depth=2)
    d = f.dispatch(JOB, 0, max_urls=10, per_host=1, delay=0, lease_timeout=60, concurrency=10, now=time.time())
    lease = [("http://a.com/x", d.token)]
    f.fetched(JOB, [Fetched(*lease[0])], lease_timeout=60, delay=0)
    f.expect(JOB, ["from-a-shallower-page"])  # as parse does before sending links on
    f.release(JOB, lease, delay=0, max_depth=2)
    assert f.admit(JOB, [Entry("http://a.com/x", depth=1)], 1, token="from-a-shallower-page", max_depth=2) == []
    d2 = f.dispatch(JOB, 0, max_urls=10, per_host=1, delay=0, lease_timeout=60, concurrency=10, now=time.time())
    assert [(e.url, e.depth) for e, _ in d2.items] == [("http://a.com/x", 1)]
    f.fetched(JOB, [Fetched("http://a.com/x", d2.token)], lease_timeout=60, delay=0)
    f.expect(JOB, ["later"])
    f.release(JOB, [("http://a.com/x", d2.token)], delay=0, max_depth=2)
    assert f.admit(JOB, [Entry("http://a.com/x", depth=0)], 1, token="later", max_depth=2) == []
    assert jobs.status(r, JOB)["counters"]["depth_requeued"] == 1


def _race(url: str, job: str, start: float, n: int, q: multiprocessing.Queue) -> None:
    client = redis.Redis.from_url(url)
    f = Frontier(client)
    while time.time() < start:
        pass
    won = []
    for i in range(n):
        won += f.admit(job, [Entry(f"http://race.com/{i}"), Entry(f"http://race.com/{i + 1}")], 2)
    q.put(won)


def test_racing_workers_enqueue_each_url_once(r: redis.Redis, redis_url: str) -> None:
    _start(r)
    # spawn, not fork: a child forked from a threaded test process can inherit a held lock.
    ctx = multiprocessing.get_context("spawn")
    q: multiprocessing.Queue = ctx.Queue()
    start = time.time() + 3.0  # spawned interpreters take a moment to start
    procs = [ctx.Process(target=_race, args=(redis_url, JOB, start, 300, q)) for _ in range(4)]
    for p in procs:
        p.start()
    won = [u for _ in procs for u in q.get(timeout=30)]
    for p in procs:
        p.join(10)
    assert sorted(won) == sorted(set(won)) and len(won) == 301
    assert r.llen(keys.host_queue(JOB, "race.com")) == 301


def test_submit_rejects_bad_seed_before_writing(r: redis.Redis) -> None:
    import pytest

    from crawler.errors import BadURL

    with pytest.raises(BadURL, match=r"seed 'ftp://x\.com/'"):
        jobs.submit(r, Settings.from_env({}), ["http://ok.com/", "ftp://x.com/"])
    assert r.dbsize() == 0


def test_dispatch_waits_for_a_batch_of_free_slots_while_requests_are_in_flight(r: redis.Redis) -> None:
    f = _start(r)
    f.admit(JOB, _urls("a.example", 20), 1)
    first = _dispatch(f, time.time(), per_host=20, concurrency=10, min_free=4)
    assert len(first) == 10
    # A slot frees when its page is stored (fetched and unstored pages still count).
    _fetch_and_store(f, r, first[:3])
    assert _dispatch(f, time.time(), per_host=20, concurrency=10, min_free=4) == []  # 3 free: not worth a task
    _fetch_and_store(f, r, first[3:4])
    assert len(_dispatch(f, time.time(), per_host=20, concurrency=10, min_free=4)) == 4


def _fetch_and_store(f: Frontier, r: redis.Redis, urls: list[str]) -> None:
    leases = [(u, _token_of(r, u)) for u in urls]
    f.fetched(JOB, [Fetched(u, t) for u, t in leases], lease_timeout=60, delay=0)
    f.release(JOB, leases, delay=0)


def test_pages_waiting_for_parse_and_store_count_against_the_job_concurrency(r: redis.Redis) -> None:
    """Backpressure: with the store down, fetched pages pile up as held, not as more fetches."""
    f = _start(r)
    f.admit(JOB, _urls("a.example", 20), 1)
    first = _dispatch(f, time.time(), per_host=20, concurrency=10)
    assert len(first) == 10
    leases = [(u, _token_of(r, u)) for u in first]
    f.fetched(JOB, [Fetched(u, t) for u, t in leases], lease_timeout=60, delay=0)
    counters = jobs.status(r, JOB)["counters"]
    assert (counters.get("inflight", 0), counters["held"]) == (0, 10)
    assert _dispatch(f, time.time(), per_host=20, concurrency=10) == []
    f.release(JOB, leases[:6], delay=0)
    assert jobs.status(r, JOB)["counters"]["held"] == 4
    assert len(_dispatch(f, time.time(), per_host=20, concurrency=10)) == 6
    # An expired held lease stops counting when it goes back to its queue.
    f.reap(JOB, delay=0, max_attempts=3, now=time.time() + 120)
    counters = jobs.status(r, JOB)["counters"]
    assert (counters.get("inflight", 0), counters["held"]) == (0, 0)


def test_renewal_keeps_fetched_pages_leased_and_only_for_their_holder(r: redis.Redis) -> None:
    f = _start(r)
    f.admit(JOB, _urls("a.example", 2), 1)
    urls = _dispatch(f, time.time(), per_host=20, concurrency=10, lease_timeout=1.0)
    leases = [(u, _token_of(r, u)) for u in urls]
    f.fetched(JOB, [Fetched(u, t) for u, t in leases], lease_timeout=1, delay=0)
    assert f.renew(JOB, leases, 1, extra=30) == 2
    assert f.renew(JOB, [(urls[0], "not-the-holder")], 1, extra=300) == 0
    assert f.renew(JOB, leases, 1) == 2  # a shorter renewal never shortens the lease
    assert f.reap(JOB, delay=0, max_attempts=3, now=time.time() + 10).returned == 0
    assert f.reap(JOB, delay=0, max_attempts=3, now=time.time() + 40).returned == 2


def test_batches_are_leased_under_tokens_of_their_own(r: redis.Redis) -> None:
    f = _start(r)
    f.admit(JOB, _urls("a.example", 5), 1)
    d = f.dispatch(JOB, 0, max_urls=10, per_host=10, delay=0.0, lease_timeout=60.0, concurrency=10,
                   now=time.time(), batch=2)
    tasks = d.batches()
    assert [len(e) for _, e in tasks] == [2, 2, 1]
    for token, entries in tasks:
        assert f.confirm(JOB, [(entries[0].url, d.token)], 60) == [False]
        assert f.confirm(JOB, [(e.url, token) for e in entries], 60) == [True] * len(entries)
