"""URLs with any characters survive the frontier intact through a real Redis: admission, dispatch,
the lease records the scripts parse, retries, expiry and release all see the URL that went in."""

from __future__ import annotations

import random
import string
import time

import redis

from crawler import jobs
from crawler.errors import BadURL
from crawler.frontier import Entry, Fetched, Frontier
from crawler.state import keys
from crawler.urls import canonicalize, host_key

JOB = "job-enc"
HOSTS = ["a.com", "b.example.org:8080", "127.0.1.1", "[::1]:81"]
# Printable ASCII and a few characters that need encoding: what a page's links may hold.
PIECES = [*(string.ascii_letters + string.digits + string.punctuation + " "), "é", "\u3000", "%20", "%0A"]


def _generated(n: int, seed: int) -> list[Entry]:
    """Canonical URLs built from random characters, plus raw ones holding spaces and line
    breaks (which canonicalisation refuses) to show the encoding itself cannot be confused."""
    rng = random.Random(seed)
    out: dict[str, Entry] = {}
    while len(out) < n:
        host = rng.choice(HOSTS)
        tail = "".join(rng.choice(PIECES) for _ in range(rng.randint(1, 20)))
        if rng.random() < 0.25:
            url = f"http://{host}/raw {tail}\n{tail}\r"
        else:
            try:
                url = canonicalize(f"http://{host}/{tail}")
            except BadURL:
                continue
        out[url] = Entry(url, rng.randint(0, 3), f"http://{host}/ref {tail}")
    return list(out.values())


def _start(r: redis.Redis) -> Frontier:
    r.hset(keys.meta(JOB), mapping={"status": "running"})
    r.sadd(keys.JOBS, JOB)
    return Frontier(r)


def test_generated_urls_round_trip_through_admit_dispatch_and_leases(r: redis.Redis) -> None:
    f = _start(r)
    entries = _generated(300, seed=13)
    by_url = {e.url: e for e in entries}
    assert sorted(f.admit(JOB, entries, 1)) == sorted(by_url)
    assert r.hlen(keys.prefix(JOB) + "seen") == len(entries)

    now = time.time()
    got: dict[str, tuple[Entry, str]] = {}
    while len(got) < len(entries):
        d = f.dispatch(JOB, 0, max_urls=1000, per_host=1000, delay=0, lease_timeout=60, concurrency=1000, now=now)
        assert d.items, "dispatch stalled: a lease or queue entry was misread"
        for e, host in d.items:
            got[e.url] = (e, d.token)
            assert host == host_key(e.url)
    assert {u: e for u, (e, _) in got.items()} == by_url  # depth, referrer and URL intact
    # The lease records hold the entries: the scripts must find each by its URL and parse it.
    assert f.confirm(JOB, [(u, t) for u, (_, t) in got.items()], 60) == [True] * len(got)

    # Half retry (FETCHED parses the lease, PROMOTE the retry record), half go on to be stored.
    urls = sorted(got)
    retry, keep = urls[::2], urls[1::2]
    f.fetched(JOB, [Fetched(u, got[u][1], retry_at=now + 1 if u in retry else 0.0) for u in urls],
              lease_timeout=60, delay=0)
    assert f.release(JOB, [(u, got[u][1]) for u in keep], delay=0, max_depth=5) == len(keep)
    f.promote(JOB, now=now + 2)
    again = f.dispatch(JOB, 0, max_urls=1000, per_host=1000, delay=0, lease_timeout=5, concurrency=1000,
                       now=now + 2)
    assert {e.url: e._replace(attempts=0) for e, _ in again.items} == {u: by_url[u] for u in retry}
    assert {e.attempts for e, _ in again.items} == {1}

    # Their leases expire; with attempts spent, REAP hands each entry back whole.
    reaped = f.reap(JOB, delay=0, max_attempts=2, now=now + 10)
    assert {e.url: (e.referrer, e.depth) for e, _ in reaped.abandoned} == \
        {u: (by_url[u].referrer, by_url[u].depth) for u in retry}
    assert f.release(JOB, [(e.url, reaped.token) for e, _ in reaped.abandoned], delay=0) == len(retry)
    st = jobs.status(r, JOB)
    assert st["status"] == "done" and st["counters"]["open"] == 0 and st["counters"]["stored"] == len(entries)


def test_older_entries_left_in_redis_still_dispatch(r: redis.Redis) -> None:
    f = _start(r)
    f.admit(JOB, [Entry("http://a.com/new")], 1)
    # An entry queued by the previous version, which had no URL length.
    r.rpush(keys.host_queue(JOB, "a.com"), "0 0 http://a.com/old http://a.com/")
    r.hset(keys.prefix(JOB) + "seen", "http://a.com/old", 0)
    d = f.dispatch(JOB, 0, max_urls=10, per_host=10, delay=0, lease_timeout=60, concurrency=10, now=time.time())
    assert [e.url for e, _ in d.items] == ["http://a.com/new", "http://a.com/old"]
    assert r.hexists(keys.prefix(JOB) + "lease", "http://a.com/old")
