"""A host's run: several of its URLs leased under its one slot and fetched by one task, one
request after another, its delay apart (``host_run``). What a run may take, what its leases hold,
how a run cut short hands its rest back, and whole crawls whose requests are timed at the server."""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from crawler import jobs
from crawler.config.settings import Settings
from crawler.frontier import Entry, Fetched, Frontier
from crawler.frontier.core import UNTRIED_AT, Readiness, RunPace, merged_batches, new_token
from crawler.frontier.dispatcher import BATCH_WINDOW, RUN_WAIT, Dispatcher
from crawler.frontier.lua import PARKED
from crawler.frontier.records import Lease
from crawler.stages.context import Context
from crawler.stages.fetch import fetch_stage
from crawler.state import keys, nodes
from crawler.testweb import TestWeb
from crawler.testweb.login import LoginSite
from tests.conftest import Workers, rows_by_url, wait_done
from tests.integration.test_session import _login_job
from tests.web import handlers as hw

JOB = "job-runs"
ALL = "shard-0,shard-1,shard-2,shard-3"


def _start(r: redis.Redis) -> Frontier:
    r.hset(keys.meta(JOB), mapping={"status": "running"})
    r.sadd(keys.JOBS, JOB)
    return Frontier(r)


def _dispatch(f: Frontier, **kw: object) -> object:
    args: dict[str, object] = {"max_urls": 64, "per_host": 1, "delay": 0.0, "lease_timeout": 60,
                               "concurrency": 64, "batch": 32, "run": 8, "run_wait": RUN_WAIT}
    args.update(kw)
    return f.dispatch(JOB, 0, **args)  # type: ignore[arg-type]


def _leases(r: redis.Redis) -> dict[str, Lease]:
    return {k.decode(): Lease.decode(v) for k, v in r.hgetall(keys.leases(JOB)).items()}


def _counters(r: redis.Redis) -> dict[str, int]:
    return {k.decode(): int(v) for k, v in r.hgetall(keys.counters(JOB)).items()}


def _queue(r: redis.Redis, host: str) -> list[str]:
    return [Entry.decode(e).url for e in r.lrange(keys.host_queue(JOB, host), 0, -1)]


def test_a_lone_host_gives_a_run_under_its_one_slot(r: redis.Redis) -> None:
    f = _start(r)
    urls = [f"http://a.test/{i}" for i in range(10)]
    f.admit(JOB, [Entry(u) for u in urls], 1, trusted=True)
    d = _dispatch(f)
    assert [e.url for e, _ in d.items] == urls[:8]  # type: ignore[attr-defined]
    leases = _leases(r)
    # The run's last URL holds the host's slot; those before it ride on it.
    assert [leases[u].stage for u in urls[:8]] == ["r"] * 7 + ["f"]
    assert r.hget(keys.host_inflight(JOB), "a.test") == b"1"
    assert r.zscore(keys.ready(JOB, 0), "a.test") == PARKED
    c = _counters(r)
    assert (c["inflight"], c["queued"]) == (8, 2)
    # The fetch stage learns which URLs are a run's, and the host's own delay (none yet).
    r.hset(keys.host_delays(JOB), "a.test", "0.25")
    ((token, _),) = d.batches()  # type: ignore[attr-defined]
    held = f.confirm(JOB, [(u, token) for u in urls[:8]], 60)
    assert held == [True] * 8 and held.runs == dict.fromkeys(range(7), RunPace(0.25, None))
    # And an operator's delay for the host, below which its run's waits never go.
    r.hset(keys.host_overrides(JOB), "a.test", "0.3 -")
    assert f.confirm(JOB, [(urls[0], token)], 60).runs == {0: RunPace(0.25, 0.3)}
    # The run over: the slot is freed once, and the host goes again after its delay.
    now = time.time()
    f.fetched(JOB, [Fetched(u, token) for u in urls[:8]], lease_timeout=60, delay=0)
    assert r.hget(keys.host_inflight(JOB), "a.test") is None
    assert now + 0.2 < r.zscore(keys.ready(JOB, 0), "a.test") < PARKED  # type: ignore[operator]
    c = _counters(r)
    assert (c["inflight"], c["held"]) == (0, 8)
    assert r.hget(keys.host_fetched(JOB), "a.test") == b"8"


def test_a_run_cut_short_hands_its_rest_back_untried(r: redis.Redis) -> None:
    f = _start(r)
    urls = [f"http://a.test/{i}" for i in range(10)]
    f.admit(JOB, [Entry(u) for u in urls], 1, trusted=True)
    d = _dispatch(f, run=5)
    ((token, _),) = d.batches()  # type: ignore[attr-defined]
    # Two fetched, the third answered 503 (a retry, later), the last two never asked.
    f.fetched(JOB, [Fetched(urls[0], token), Fetched(urls[1], token), Fetched(urls[2], token, time.time() + 30),
                    Fetched(urls[3], token, UNTRIED_AT), Fetched(urls[4], token, UNTRIED_AT)],
              lease_timeout=60, delay=0, delays={"a.test": 0.5})
    # Back at the head of the queue, in their order, no attempt spent.
    assert _queue(r, "a.test") == [urls[3], urls[4], *urls[5:]]
    assert all(Entry.decode(e).attempts == 0 for e in r.lrange(keys.host_queue(JOB, "a.test"), 0, 1))
    assert set(_leases(r)) == {urls[0], urls[1]}  # held for parse and store
    assert r.zcard(keys.retries(JOB)) == 1
    c = _counters(r)
    assert (c["inflight"], c["queued"], c["held"], c["retried"], c["run_returned"]) == (0, 7, 2, 1, 2)
    assert r.hget(keys.host_fetched(JOB), "a.test") == b"2"
    # The slot went with the run's last URL: the host waits out the 503's delay, then goes on.
    assert r.hget(keys.host_inflight(JOB), "a.test") is None
    assert time.time() < r.zscore(keys.ready(JOB, 0), "a.test") < PARKED  # type: ignore[operator]


def test_an_expired_run_goes_back_and_frees_its_slot_once(r: redis.Redis) -> None:
    f = _start(r)
    urls = [f"http://a.test/{i}" for i in range(4)]
    f.admit(JOB, [Entry(u) for u in urls], 1, trusted=True)
    _dispatch(f, lease_timeout=0.01)
    time.sleep(0.05)
    reaped = f.reap(JOB, delay=0, max_attempts=3)
    assert reaped.returned == 4 and not reaped.abandoned
    assert sorted(_queue(r, "a.test")) == sorted(urls)
    assert r.hget(keys.host_inflight(JOB), "a.test") is None
    assert _counters(r)["inflight"] == 0 and r.hlen(keys.leases(JOB)) == 0


def test_runs_take_only_the_slots_due_hosts_leave_idle(r: redis.Redis) -> None:
    f = _start(r)
    # 40 hosts due for 64 slots: a URL each, as without runs.
    f.admit(JOB, [Entry(f"http://h{h}.test/{i}") for h in range(40) for i in range(4)], 1, trusted=True)
    d = _dispatch(f)
    assert len(d.items) == 40 and {s.stage for s in _leases(r).values()} == {"f"}  # type: ignore[attr-defined]
    r.flushdb()
    f = _start(r)
    # 20 hosts: three slots each, so runs of three.
    f.admit(JOB, [Entry(f"http://h{h}.test/{i}") for h in range(20) for i in range(4)], 1, trusted=True)
    d = _dispatch(f)
    assert len(d.items) == 60  # type: ignore[attr-defined]
    # A host with a delay gives what half a second of it allows.
    r.flushdb()
    f = _start(r)
    f.admit(JOB, [Entry(f"http://slow.test/{i}") for i in range(8)], 1, trusted=True)
    r.hset(keys.host_delays(JOB), "slow.test", "0.2")
    d = _dispatch(f)
    assert len(d.items) == 3  # type: ignore[attr-defined]
    # per_host 2: two requests at once, no runs.
    r.flushdb()
    f = _start(r)
    f.admit(JOB, [Entry(f"http://two.test/{i}") for i in range(8)], 1, trusted=True)
    d = _dispatch(f, per_host=2)
    assert len(d.items) == 2 and {s.stage for s in _leases(r).values()} == {"f"}  # type: ignore[attr-defined]


def test_runs_go_without_waiting_for_min_free_slots_when_every_due_host_has_one(r: redis.Redis) -> None:
    f = _start(r)
    f.admit(JOB, [Entry(f"http://h{h}.test/{i}") for h in range(4) for i in range(8)], 1, trusted=True)
    r.hset(keys.counters(JOB), "held", 40)  # pages of earlier runs waiting for parse and store
    # 24 slots free, fewer than min_free: without runs nothing goes (a task would be small) ...
    assert not _dispatch(f, run=1, min_free=32).items  # type: ignore[attr-defined]
    # ... with runs, the four due hosts share them.
    d = _dispatch(f, min_free=32)
    assert len(d.items) == 24 and len({e.url.split("/")[2] for e, _ in d.items}) == 4  # type: ignore[attr-defined]
    # A due host whose delay allows no run waits for min_free slots as before: its one URL alone
    # would be a task of its own.
    r.flushdb()
    f = _start(r)
    f.admit(JOB, [Entry(f"http://slow.test/{i}") for i in range(8)], 1, trusted=True)
    r.hset(keys.counters(JOB), "held", 40)
    r.hset(keys.host_delays(JOB), "slow.test", "1.0")
    assert not _dispatch(f, min_free=32).items  # type: ignore[attr-defined]


def test_a_runs_length_keeps_to_an_operators_delay_for_its_host(r: redis.Redis) -> None:
    f = _start(r)
    f.admit(JOB, [Entry(f"http://a.test/{i}") for i in range(8)], 1, trusted=True)
    r.hset(keys.host_delays(JOB), "a.test", "0.01")
    r.hset(keys.host_overrides(JOB), "a.test", "0.45 -")
    # Half a second of waits at 0.45 s: one wait, two URLs.
    assert len(_dispatch(f).items) == 2  # type: ignore[attr-defined]


def test_the_batch_window_counts_what_a_due_host_gives_at_the_jobs_delay(r: redis.Redis) -> None:
    d = Dispatcher(r, [0], lambda *a: None, lambda *a: None)
    now = time.time()
    d._last_dispatch["j"] = now
    ready = {0: Readiness(due=4, live=100, earliest=None)}
    # At a delay of 1 s a due host gives one URL: 4 of 32 wanted, so the window holds ...
    assert d._hold_for_batch("j", ready, 40, 1, 1.0, False, 32, now, run=8) == now + BATCH_WINDOW
    # ... and at 0.05 s a run of 8 each: 32, a full batch, goes now.
    assert d._hold_for_batch("j", ready, 40, 1, 0.05, False, 32, now, run=8) is None


def test_a_run_counts_as_one_request_of_its_fetch_task(r: redis.Redis) -> None:
    f = _start(r)
    f.admit(JOB, [Entry(f"http://h{h}.test/{i}") for h in range(3) for i in range(4)], 1, trusted=True)
    f.admit(JOB, [Entry(f"http://x{h}.test/") for h in range(2)], 1, trusted=True)
    d = _dispatch(f, batch=2)
    tasks = d.batches()  # type: ignore[attr-defined]
    # Five hosts, two requests a task: three tasks, and a run is never split between two.
    assert len(tasks) == 3 and sum(len(es) for _, es in tasks) == 14
    leases = _leases(r)
    for token, entries in tasks:
        assert {leases[e.url].token for e in entries} == {token}
        assert len({e.url.split("/")[2] for e in entries}) <= 2
    # Another shard's dispatch under the same token numbers its tasks on from the first's.
    r.hset(keys.meta(JOB), "status", "running")
    f.admit(JOB, [Entry(f"http://y{h}.test/{i}") for h in range(2) for i in range(3)], 1, trusted=True)
    more = _dispatch(f, batch=2, token=d.token, offset=d.leased)  # type: ignore[attr-defined]
    merged = merged_batches(d.token, 2, [(0, d), (1, more)])  # type: ignore[arg-type, attr-defined]
    assert [t for _, t, _ in merged] == [f"{d.token}.{k}" for k in range(4)]  # type: ignore[attr-defined]
    leases = _leases(r)
    for _, token, entries in merged:
        assert {leases[e.url].token for e in entries} == {token}


def test_runs_wait_until_every_worker_takes_them(r: redis.Redis, tmp_path: Path) -> None:
    job_id = jobs.submit(r, Settings.from_env(store=f"sqlite:///{tmp_path}/c.db", shards=1), ["http://lone.test/"])
    Frontier(r).admit(job_id, [Entry(f"http://lone.test/{i}") for i in range(5)], 1)
    # A worker from before runs, still up in a rolling upgrade, would fetch a run all at once.
    old = {"node": "old@h", "shards": [0], "last": time.time(), "interval": 2.0, "offline": False}
    r.hset(keys.NODES, "old@h", json.dumps(old))
    sent: list[tuple[str, int, str, list[str]]] = []
    Dispatcher(r, [0], lambda *a: sent.append(a), lambda *a: None).tick()
    assert [len(entries) for *_, entries in sent] == [1]
    # Gone (or upgraded): runs go.
    nodes.mark_offline(r, "old@h")
    Frontier(r).fetched(job_id, [Fetched(Entry.decode(sent[0][3][0]).url, sent[0][2])], lease_timeout=60, delay=0)
    Dispatcher(r, [0], lambda *a: sent.append(a), lambda *a: None).tick()
    assert [len(entries) for *_, entries in sent] == [1, 5]


def _spans(web: TestWeb, site: int) -> list[tuple[float, float]]:
    return sorted((h.start, h.end) for h in web.hits() if h.site == site and h.path != "/robots.txt")


def test_a_crawl_fetches_each_hosts_runs_one_request_at_a_time_its_delay_apart(
        make_web: Callable[..., TestWeb], workers: Workers, r: redis.Redis, tmp_path: Path) -> None:
    web = make_web(2, 40)
    workers.start("w0", ALL)
    workers.start("w1", ALL)
    db = tmp_path / "c.db"
    job_id = jobs.submit(r, Settings.from_env(store=f"sqlite:///{db}", delay=0.05, autothrottle=False), web.seeds())
    st = wait_done(r, job_id, timeout=90)
    rows = rows_by_url(db)
    assert set(rows) == web.reachable_urls()
    for site in (0, 1):
        spans = _spans(web, site)
        assert len(spans) == len({u for u in rows if u.startswith(web.origin(site))})  # each page once
        # One request at a time, and the delay between the end of one and the start of the next
        # (as the server saw them: the crawler's end of a request comes a little later still).
        assert min(b[0] - a[1] for a, b in itertools.pairwise(spans)) >= 0.05 - 0.002
    # The pages went in runs: far fewer fetch tasks than pages (a URL per host, two a task, before).
    assert st["counters"]["fetch_tasks"] * 5 <= st["counters"]["fetched"] * 2, st["counters"]


def test_a_run_stopped_by_a_503_hands_the_rest_back_and_each_is_asked_once(
        make_web: Callable[..., TestWeb], workers: Workers, r: redis.Redis, tmp_path: Path) -> None:
    web = make_web(1, 1)
    web.route(0, "/", hw.body(hw.html("index", [f"/n/{i}" for i in range(16)])))
    for i in range(16):
        web.route(0, f"/n/{i}", hw.body(hw.html(f"n{i}")))
    web.route(0, "/n/2", hw.sequence(hw.body(b"busy", 503), hw.body(hw.html("n2"))))
    workers.start("w", ALL)
    db = tmp_path / "c.db"
    job_id = jobs.submit(r, Settings.from_env(store=f"sqlite:///{db}", retry_base=0.2), web.seeds())
    st = wait_done(r, job_id, timeout=60)
    rows = rows_by_url(db)
    assert len(rows) == 17 and all(row["status"] == 200 for row in rows.values())
    asked = Counter(h.path for h in web.hits() if h.path != "/robots.txt")
    assert asked.pop("/n/2") == 2 and set(asked.values()) == {1}  # the rest of the run was never sent
    assert st["counters"]["run_returned"] >= 1 and st["counters"]["retry:http_5xx"] == 1



def test_a_first_run_keeps_to_the_crawl_delay_its_robots_txt_asks(
        make_web: Callable[..., TestWeb], workers: Workers, r: redis.Redis, tmp_path: Path) -> None:
    # Six seeds of one host: its first run goes before any page of it taught the frontier the
    # host's Crawl-delay, which the fetch stage reads from robots.txt itself.
    web = make_web(1, 1)
    web.route(0, "/robots.txt", hw.body(b"User-agent: *\nCrawl-delay: 0.2\n", ctype="text/plain"))
    for i in range(6):
        web.route(0, f"/s/{i}", hw.body(hw.html(f"s{i}")))
    workers.start("w", ALL)
    db = tmp_path / "c.db"
    job_id = jobs.submit(r, Settings.from_env(store=f"sqlite:///{db}"), [web.url(0, f"/s/{i}") for i in range(6)])
    st = wait_done(r, job_id, timeout=60)
    assert len(rows_by_url(db)) == 6
    spans = _spans(web, 0)
    assert len(spans) == 6 and min(b[0] - a[1] for a, b in itertools.pairwise(spans)) >= 0.2 - 0.002
    # The first run stopped where its waits would have passed half a second in all (the rest
    # went back untried); the next runs were sized by the delay the host then had.
    assert st["counters"]["run_returned"] == 3 and st["counters"]["fetch_tasks"] == 2


def _one_task(ctx: Context, job_id: str, token: str | None = None) -> tuple[str, list[Entry]]:
    """Dispatch the job's one shard once, as the dispatcher would with runs on: its one task."""
    d = ctx.frontier.dispatch(job_id, 0, max_urls=16, per_host=1, delay=0, lease_timeout=60, concurrency=16,
                              batch=32, run=8, run_wait=0.5, token=token)
    ((tok, entries),) = d.batches()
    return tok, entries


def test_a_run_whose_last_url_robots_txt_blocks_frees_its_host_with_the_run_not_the_task(
        make_web: Callable[..., TestWeb], r: redis.Redis, tmp_path: Path) -> None:
    # The run's last URL (whose lease holds the host's slot) is never sent; a slow page of another
    # host is in the same task. The host goes free when its run's requests end, not with the task.
    web = make_web(2, 1)
    web.route(0, "/robots.txt", hw.body(b"User-agent: *\nDisallow: /n/3\n", ctype="text/plain"))
    for i in range(4):
        web.route(0, f"/n/{i}", hw.body(hw.html(f"n{i}")))
    web.route(1, "/slow", hw.slow(3.0, hw.body(hw.html("slow"))))
    job_id = jobs.submit(r, Settings.from_env(store=f"sqlite:///{tmp_path}/c.db", shards=1, autothrottle=False),
                         [web.url(1, "/slow")])
    ctx = Context.default(r)
    ctx.frontier.admit(job_id, [Entry(web.url(0, f"/n/{i}")) for i in range(4)], 1, trusted=True)
    token, entries = _one_task(ctx, job_id)
    assert len(entries) == 5
    host = web.url(0, "/")[len("http://"):-1]
    task = threading.Thread(target=fetch_stage, args=(ctx, jobs.load(r, job_id, max_age=0), token,
                                                      [e.encode() for e in entries]))
    start = time.monotonic()
    task.start()
    while r.hget(keys.host_inflight(job_id), host) is not None and task.is_alive():
        time.sleep(0.02)
    freed = time.monotonic() - start
    task.join()
    assert freed < 2.0, freed  # the slow page took 3 s
    assert r.hget(keys.host_inflight(job_id), host) is None


def test_a_task_that_waited_in_its_queue_still_fetches_its_runs_whole(
        make_web: Callable[..., TestWeb], r: redis.Redis, tmp_path: Path) -> None:
    # Dispatched 20 s before a worker took it (a backlog): the confirmation renewed its leases,
    # and the run's time counts from then.
    web = make_web(1, 1)
    for i in range(8):
        web.route(0, f"/n/{i}", hw.body(hw.html(f"n{i}")))
    job_id = jobs.submit(r, Settings.from_env(store=f"sqlite:///{tmp_path}/c.db", shards=1, autothrottle=False,
                                              obey_robots=False), [web.url(0, "/n/0")])
    ctx = Context.default(r)
    ctx.frontier.admit(job_id, [Entry(web.url(0, f"/n/{i}")) for i in range(1, 8)], 1, trusted=True)
    token, entries = _one_task(ctx, job_id, token=new_token(time.time() - 20))
    pages = fetch_stage(ctx, jobs.load(r, job_id, max_age=0), token, [e.encode() for e in entries])
    assert len(entries) == len(pages) == 8
    assert not jobs.status(r, job_id)["counters"].get("run_returned")


def test_a_run_stops_where_the_site_ends_its_login_session(
        make_web: Callable[..., TestWeb], r: redis.Redis, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    web = make_web(1, 1)
    site = LoginSite(records=8)
    site.mount(web, 0)
    monkeypatch.setenv("CRAWLER_SECRET_LOGIN_USER", site.user)
    monkeypatch.setenv("CRAWLER_SECRET_LOGIN_PASSWORD", site.password)
    job_id = _login_job(r, web, tmp_path)
    ctx = Context.default(r)
    token, entries = _one_task(ctx, job_id)
    fetch_stage(ctx, jobs.load(r, job_id, max_age=0), token, [e.encode() for e in entries])  # the seed: a login
    assert site.logins == 1
    ctx.frontier.admit(job_id, [Entry(web.url(0, site.record_path(i)), 1) for i in range(8)], 1, trusted=True)
    ctx.frontier.release(job_id, [(e.url, token) for e in entries], delay=0)
    site.expire_all()
    token, entries = _one_task(ctx, job_id)
    assert len(entries) == 8
    asked = sum(1 for h in web.hits() if h.path.startswith("/members/"))
    fetch_stage(ctx, jobs.load(r, job_id, max_age=0), token, [e.encode() for e in entries])
    # The first answer said the session was over: the rest of the run was never sent with it.
    assert sum(1 for h in web.hits() if h.path.startswith("/members/")) - asked == 1
    c = jobs.status(r, job_id)["counters"]
    assert c["session_refetch"] == 1 and c["run_returned"] == 7
