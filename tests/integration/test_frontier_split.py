"""A job's frontier split into one part per shard (``frontier_split``, ``keys.frontier_part``):
each part's host queues, leases, host records, seen hash and counters under a hash tag of its
own, every script called for one part. Against a real Redis and real workers: a crawl finds
exactly the reachable pages once each and ends by itself; the parts' figures sum to the job's;
the page budget is kept across parts; a link batch pending in any part keeps the job open."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest.mock import ANY

import pytest
import redis

from crawler import control, jobs
from crawler.config.settings import Settings
from crawler.control import periodic as cycles
from crawler.control.rebuild import recover
from crawler.dedup.neardup import NearDuplicates
from crawler.errors import ConfigError
from crawler.frontier import Entry, Fetched, Frontier, liveshards, lua
from crawler.frontier.dispatcher import Dispatcher
from crawler.frontier.sharding import shard_of_host
from crawler.local.redis_cluster import RedisCluster
from crawler.local.redis_server import RedisServer
from crawler.state import conn, jobconf, keys
from crawler.state.conn import connect, open_migrations
from crawler.store import PageRecord, open_store
from crawler.testweb import TestWeb
from tests.conftest import Workers, wait_done
from tests.integration.test_cycles import wait_status

JOB = "split-t"
SHARDS = 4


def _assert_stored_once(store_url: str, job_id: str, want: set[str]) -> None:
    rows = [p["url"] for p in open_store(store_url).pages(job_id)]
    assert len(rows) == len(set(rows)), "duplicate rows"
    assert set(rows) == want


def _failed(log_dir: Path, workers: Sequence[str] = ("w0", "w1")) -> list[str]:
    """Lines of the workers' logs saying a task or a dispatcher tick failed (a script that
    touched another part's or slot's keys fails so)."""
    return [line for n in workers for line in (log_dir / f"{n}.log").read_text().splitlines()
            if "raised unexpected" in line or "tick failed" in line or "Traceback" in line]


def _wait_stored(client: redis.Redis, job_id: str, n: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while jobs.status(client, job_id)["counters"].get("stored", 0) < n:
        assert time.monotonic() < deadline, jobs.status(client, job_id)
        time.sleep(0.05)


@contextmanager
def _on_cluster(cluster: RedisCluster, log_dir: Path,
                monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Workers, redis.Redis]]:
    """Two workers of six shards with the crawl's state on ``cluster`` and their queues on a
    Redis of their own, and a client of the cluster; the workers stopped after."""
    with RedisServer() as broker:
        for name, value in {"CRAWLER_REDIS_URL": cluster.url, "CRAWLER_BROKER_URL": broker.url}.items():
            monkeypatch.setenv(name, value)
        w = Workers(cluster.url, log_dir)
        w.start("w0", "shard-0,shard-1,shard-2,shared")
        w.start("w1", "shard-3,shard-4,shard-5,shared")
        try:
            yield w, connect(cluster.url)
        finally:
            w.stop()


def _hosts_per_shard(shards: int = SHARDS) -> dict[int, str]:
    """A host of each shard."""
    out: dict[int, str] = {}
    i = 0
    while len(out) < shards:
        host = f"h{i}.example"
        out.setdefault(shard_of_host(host, shards), host)
        i += 1
    return out


def _split_job(r: redis.Redis, job: str = JOB, shards: int = SHARDS) -> Frontier:
    """A running job whose frontier has ``shards`` parts, as ``jobs.submit`` makes one."""
    for p in range(shards):
        r.hset(keys.meta(keys.frontier_part(job, p)), mapping={"status": "running", keys.PART_FIELD: job})
    r.hset(keys.meta(job), mapping={"id": job, "status": "running", keys.PARTS_FIELD: shards})
    r.sadd(keys.JOBS, job)
    return Frontier(r)


def _dispatch_all(f: Frontier, job: str = JOB, shards: int = SHARDS) -> list[tuple[str, str]]:
    out = []
    for shard in range(shards):
        d = f.dispatch(job, shard, max_urls=100, per_host=4, delay=0.0, lease_timeout=60.0, concurrency=100)
        out += [(e.url, t) for t, entries in d.batches() for e in entries]
    return out


def test_each_part_holds_its_own_hosts_records_and_the_job_sums_them(r: redis.Redis) -> None:
    f = _split_job(r)
    hosts = _hosts_per_shard()
    entries = [Entry(f"http://{h}/p{i}") for h in hosts.values() for i in range(3)]
    assert len(f.admit(JOB, entries, SHARDS)) == 12
    for shard, host in hosts.items():
        part = keys.frontier_part(JOB, shard)
        assert r.llen(keys.host_queue(part, host)) == 3
        assert r.zscore(keys.ready(part, shard), host) is not None
        assert int(r.hget(keys.counters(part), "open") or 0) == 3
    assert not list(r.scan_iter(keys.host_queue_pattern(JOB)))  # nothing under the job's own tag
    st = jobs.status(r, JOB)
    assert st["counters"]["open"] == 12 and st["counters"]["admitted"] == 12, st
    assert keys.PARTS_FIELD not in st  # how its keys are laid out: nothing an operator acts on
    leased = _dispatch_all(f)
    assert sorted(u for u, _ in leased) == sorted(e.url for e in entries)
    # A task's leases span parts: each part confirms, renews, frees and ends its own.
    assert all(f.confirm(JOB, leased, 60.0))
    f.fetched(JOB, [Fetched(u, t) for u, t in leased], lease_timeout=60.0, delay=0.0)
    assert sorted(f.release_stored(JOB, leased, delay=0.0)) == sorted(u for u, _ in leased)
    st = jobs.status(r, JOB)
    assert st["status"] == "done", st
    assert st["counters"]["open"] == 0 and st["counters"]["inflight"] == 0, st
    assert JOB not in jobs.active(r)
    assert {h.host for h in f.host_stats(JOB)} == set(hosts.values())


def test_a_link_batch_pending_in_any_part_keeps_the_job_open(r: redis.Redis) -> None:
    f = _split_job(r)
    hosts = _hosts_per_shard()
    page = Entry(f"http://{hosts[0]}/")
    f.admit(JOB, [page], SHARDS)
    (url, token), = _dispatch_all(f)
    # The page's links are on their way to dedup when the page is stored.
    f.expect(JOB, {"links:1": [[f"http://{hosts[2]}/a", 1]]})
    f.release(JOB, [(url, token)], delay=0.0)
    assert jobs.status(r, JOB)["status"] == "running"
    assert f.pending(JOB, "links:1")
    assert f.overdue_links(JOB, 60.0, now=time.time() + 120) == [("links:1", [[f"http://{hosts[2]}/a", 1]])]
    # Admitted in parts: the part of the link's host queues it, and every part ends the batch.
    queued = f.admit(JOB, [Entry(f"http://{hosts[2]}/a")], SHARDS, token="links:1")
    assert queued == [f"http://{hosts[2]}/a"]
    assert not f.pending(JOB, "links:1")
    assert f.admit(JOB, [Entry(f"http://{hosts[2]}/a")], SHARDS, token="links:1") == []  # redelivered
    assert jobs.status(r, JOB)["status"] == "running"
    (url, token), = _dispatch_all(f)
    f.release(JOB, [(url, token)], delay=0.0)
    assert jobs.status(r, JOB)["status"] == "done"
    assert not r.hexists(keys.pending_link_bodies(JOB), "links:1")


def test_a_link_batch_of_one_shards_hosts_is_kept_and_ended_by_that_part_alone(r: redis.Redis) -> None:
    f = _split_job(r)
    hosts = _hosts_per_shard()
    link = f"http://{hosts[2]}/a"
    f.expect(JOB, {"t:2": [[link, 1]]}, shards={"t:2": 2})  # as parse cuts them: by shard
    assert [r.zscore(keys.pending_links(space), "t:2") is not None for space in f.spaces(JOB)] == \
        [False, False, True, False]
    called: list[str] = []
    real = f._call

    def spy(script: Any, job: str, *args: Any, space: str = "") -> Any:
        called.append(space)
        return real(script, job, *args, space=space)

    f._call = spy  # type: ignore[method-assign]
    assert f.admit(JOB, [Entry(link)], SHARDS, token="t:2") == [link]
    assert called == [keys.frontier_part(JOB, 2)]  # one part's script, not every part's
    assert not f.pending(JOB, "t:2")
    assert f.admit(JOB, [Entry(link)], SHARDS, token="t:2") == []  # redelivered


def test_the_page_budget_is_allotted_across_parts_and_never_exceeded(r: redis.Redis) -> None:
    f = _split_job(r)
    hosts = list(_hosts_per_shard().values())
    got = f.admit(JOB, [Entry(f"http://{h}/p{i}") for h in hosts for i in range(5)], SHARDS, budget=7)
    assert len(got) == 7
    # Duplicates use none of it: what a part did not admit goes back to the job.
    assert f.admit(JOB, [Entry(f"http://{hosts[3]}/p0")], SHARDS, budget=9) == []
    assert len(f.admit(JOB, [Entry(f"http://{h}/q") for h in hosts], SHARDS, budget=9)) == 2
    c = jobs.status(r, JOB)["counters"]
    assert c["admitted"] == 9 and c["allotted"] == 9, c
    assert c["dropped_max_pages"] == 20 - 7 + 2, c


def test_pause_resume_and_stop_reach_every_part(r: redis.Redis) -> None:
    f = _split_job(r)
    hosts = _hosts_per_shard()
    f.admit(JOB, [Entry(f"http://{h}/") for h in hosts.values()], SHARDS)
    assert f.pause(JOB) == "running"
    assert _dispatch_all(f) == []
    assert f.resume(JOB, SHARDS) == "paused"
    leased = _dispatch_all(f)
    assert len(leased) == SHARDS
    f.release(JOB, leased[:1], delay=0.0)
    jobs.stop(r, JOB)
    assert {r.hget(keys.meta(keys.frontier_part(JOB, p)), "status") for p in range(SHARDS)} == {b"stopped"}
    f.admit(JOB, [Entry(f"http://{hosts[1]}/more")], SHARDS)
    assert _dispatch_all(f) == []
    with pytest.raises(ConfigError, match=r"split into 4 parts .* may have 1 to 4 shards, not 5"):
        jobs.set_shards(r, JOB, 5)


def test_a_shard_count_above_a_split_jobs_parts_changes_no_job(r: redis.Redis) -> None:
    plain = jobs.submit(r, Settings.from_env(shards=2, obey_robots=False), ["http://a.example/"])
    split = jobs.submit(r, Settings.from_env(shards=SHARDS, frontier_split=True, obey_robots=False),
                        ["http://b.example/"])
    with pytest.raises(ConfigError, match="may have 1 to 4 shards, not 5"):
        control.set_shards(r, 5, [plain, split])
    assert jobs.load(r, plain, max_age=0).settings.shards == 2


def test_a_split_jobs_shard_count_going_down_gives_each_shard_left_its_parts(r: redis.Redis) -> None:
    hosts = _hosts_per_shard()
    job_id = jobs.submit(r, Settings.from_env(shards=SHARDS, frontier_split=True, obey_robots=False),
                         [f"http://{h}/" for h in hosts.values()])
    moved = jobs.set_shards(r, job_id, 2)
    assert (moved.hosts, moved.records) == (0, 0)  # its hosts stay in their parts
    assert jobs.load(r, job_id, max_age=0).settings.shards == 2
    sent: list[tuple[int, str]] = []

    def dispatcher(shards: list[int]) -> Dispatcher:
        return Dispatcher(r, shards, lambda job, shard, token, entries: sent.extend(
            (shard, Entry.decode(e).url) for e in entries), lambda *a: None)

    dispatcher([2, 3]).tick()  # shards beyond the count serve nothing
    assert sent == []
    dispatcher([0]).tick()  # parts 0 and 2
    dispatcher([1]).tick()  # parts 1 and 3
    assert sorted(sent) == sorted([(0, f"http://{hosts[0]}/"), (0, f"http://{hosts[2]}/"),
                                   (1, f"http://{hosts[1]}/"), (1, f"http://{hosts[3]}/")])
    # A part's new host wakes the shard serving the part, not the one of the part's number.
    other = next(h for h in _hosts_of(3, 2) if h != hosts[3])
    r.delete(*(keys.wake(s) for s in range(SHARDS)))
    Frontier(r).admit(job_id, [Entry(f"http://{other}/")], 2)
    assert [r.llen(keys.wake(s)) for s in range(SHARDS)] == [0, 1, 0, 0]
    # Back up to its part count: each part is its own shard's again.
    jobs.set_shards(r, job_id, SHARDS)
    sent.clear()
    dispatcher([3]).tick()
    assert sent == [(3, f"http://{other}/")]


def test_a_down_shards_part_is_dispatched_by_the_shard_standing_in_for_it(r: redis.Redis) -> None:
    hosts = _hosts_per_shard()
    job_id = jobs.submit(r, Settings.from_env(shards=SHARDS, frontier_split=True, obey_robots=False),
                         [f"http://{h}/" for h in hosts.values()])
    sent: list[tuple[int, str]] = []
    d = Dispatcher(r, [0], lambda job, shard, token, entries: sent.extend((shard, Entry.decode(e).url)
                                                                          for e in entries), lambda *a: None)
    d.tick()
    assert sent == [(0, f"http://{hosts[0]}/")]
    # Shard 3 taken over: its part stays where it is, and its hosts' tasks go to the queue of
    # the shard after it (``standby``), shard 0.
    assert liveshards.compare_and_set(r, liveshards.read(r), {3: time.time()}, now=time.time(), after=3)
    d._last_check = 0.0
    d.tick()
    assert sent[1:] == [(0, f"http://{hosts[3]}/")]
    assert r.hexists(keys.leases(keys.frontier_part(job_id, 3)), f"http://{hosts[3]}/")


def test_a_dispatcher_tick_before_the_seeds_are_in_does_not_end_the_job(r: redis.Redis,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # Found by review: between submit's records and its seeds' admission every part was idle,
    # and a dispatcher's look ended the job, its seeds then refused.
    real = jobs.admit_links
    d = Dispatcher(r, [0, 1, 2, 3], lambda *a: None, lambda *a: None)

    def racing(*a: Any, **kw: Any) -> Any:
        d.tick()
        return real(*a, **kw)

    monkeypatch.setattr(jobs, "admit_links", racing)
    hosts = _hosts_per_shard()
    job_id = jobs.submit(r, Settings.from_env(shards=SHARDS, frontier_split=True, obey_robots=False),
                         [f"http://{h}/" for h in hosts.values()])
    st = jobs.status(r, job_id)
    assert st["status"] == "running" and st["counters"]["open"] == SHARDS, st
    assert {r.hget(keys.meta(space), "status") for space in Frontier(r).spaces(job_id)} == {b"running"}


def test_a_page_budget_set_on_a_running_job_counts_what_was_admitted_before(r: redis.Redis) -> None:
    f = _split_job(r)
    hosts = list(_hosts_per_shard().values())
    assert len(f.admit(JOB, [Entry(f"http://{h}/a{i}") for h in hosts for i in range(2)], SHARDS)) == 8
    assert f.admit(JOB, [Entry(f"http://{h}/b{i}") for h in hosts for i in range(2)], SHARDS, budget=5) == []
    assert len(f.admit(JOB, [Entry(f"http://{h}/c{i}") for h in hosts for i in range(2)], SHARDS, budget=10)) == 2


def test_a_worker_told_to_split_still_loads_a_periodic_job_from_before_the_setting(
        r: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    values = Settings.from_env(every=3600.0).job_settings()
    values.pop("frontier_split")
    r.hset(keys.meta("old"), mapping={"id": "old", "status": "waiting", "settings": json.dumps(values)})
    monkeypatch.setenv("CRAWLER_FRONTIER_SPLIT", "1")
    assert not jobconf.load(r, "old", max_age=0).settings.frontier_split


def test_the_jobs_concurrency_goes_to_the_parts_with_hosts_due(r: redis.Redis) -> None:
    # Equal shares would give the part of four due hosts 1 of the job's 4 slots.
    crowded = [h for h in (f"c{i}.example" for i in range(200)) if shard_of_host(h, SHARDS) == 0][:4]
    lone = _hosts_per_shard()[1]
    job_id = jobs.submit(r, Settings.from_env(shards=SHARDS, frontier_split=True, obey_robots=False, concurrency=4),
                         [f"http://{h}/" for h in [*crowded, lone]])
    sent: list[tuple[int, str]] = []
    d = Dispatcher(r, [0, 1, 2, 3], lambda job, shard, token, entries: sent.extend((shard, Entry.decode(e).url)
                                                                                    for e in entries), lambda *a: None)
    d.tick()
    urls = [u for _, u in sent]
    assert len(urls) == 4 and f"http://{lone}/" in urls, sent  # 3 of the 4 due in part 0, and part 1's
    d.tick()  # the job's concurrency is spent: nothing more until a request ends
    assert len(sent) == 4
    assert sum(Frontier(r).part_busy(job_id)) == 4


def _hosts_of(shard: int, n: int) -> list[str]:
    return [h for h in (f"x{i}.example" for i in range(2000)) if shard_of_host(h, SHARDS) == shard][:n]


def test_dispatchers_of_other_shards_keep_the_job_within_its_concurrency(r: redis.Redis) -> None:
    # Found by review: each dispatcher shared the job's free slots out among its own parts, so
    # two dispatchers of different shards ticking together leased them twice (8 of 4).
    job_id = jobs.submit(r, Settings.from_env(shards=SHARDS, frontier_split=True, obey_robots=False, concurrency=4),
                         [f"http://{h}/" for h in _hosts_of(0, 4) + _hosts_of(1, 4)])
    d0 = Dispatcher(r, [0], lambda *a: None, lambda *a: None)
    d1 = Dispatcher(r, [1], lambda *a: None, lambda *a: None)
    real = d0.frontier.dispatch
    once: list[int] = []

    def between(*a: Any, **kw: Any) -> Any:
        if not once:
            once.append(1)
            d1.tick()  # after d0 read the parts' requests, before it leases
        return real(*a, **kw)

    d0.frontier.dispatch = between  # type: ignore[method-assign]
    d0.tick()
    assert once and 0 < sum(Frontier(r).part_busy(job_id)) <= 4


def test_duplicates_hold_none_of_the_page_budget_from_other_parts(r: redis.Redis) -> None:
    # Found by review: a part was allotted budget for its whole batch, duplicates included, and
    # another part admitting meanwhile found the budget spent and dropped its URL for good.
    a, b = _hosts_of(0, 1)[0], _hosts_of(1, 1)[0]
    job_id = jobs.submit(r, Settings.from_env(shards=SHARDS, frontier_split=True, obey_robots=False, dedup="set"),
                         [f"http://{a}/"])
    f = Frontier(r)
    real = f._call
    meanwhile: list[list[str]] = []

    def racing(script: Any, job: str, *args: Any, space: str = "") -> Any:
        if script is f._admit and space.endswith("~s0") and not meanwhile:
            meanwhile.append(list(Frontier(r).admit(job_id, [Entry(f"http://{b}/new")], SHARDS, budget=2)))
        return real(script, job, *args, space=space)

    f._call = racing  # type: ignore[method-assign]
    assert f.admit(job_id, [Entry(f"http://{a}/")] * 5, SHARDS, budget=2) == []
    assert meanwhile == [[f"http://{b}/new"]]
    c = jobs.status(r, job_id)["counters"]
    assert c["admitted"] == 2 and c["allotted"] == 2 and c.get("dropped_max_pages", 0) == 0, c
    assert Frontier(r).admit(job_id, [Entry(f"http://{b}/more")], SHARDS, budget=2) == []  # now spent


def test_parts_left_starting_by_a_submitter_that_died_are_started_by_a_dispatcher(
        r: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    def lost(*a: Any, **kw: Any) -> None:
        raise redis.ConnectionError("the submitter lost Redis")

    monkeypatch.setattr(Frontier, "start_parts", lost)
    with pytest.raises(redis.ConnectionError):
        jobs.submit(r, Settings.from_env(shards=SHARDS, frontier_split=True, obey_robots=False),
                    [f"http://{_hosts_of(0, 1)[0]}/"], job_id="stuck")
    monkeypatch.undo()
    sent: list[str] = []
    d = Dispatcher(r, [0, 1, 2, 3], lambda job, shard, token, entries: sent.extend(entries), lambda *a: None)
    d.tick()
    assert not sent  # within its grace its seeds may still be on their way
    r.hset(keys.meta("stuck"), "created_at", time.time() - 120)
    d._last_reap.clear()
    d.tick()
    d.tick()
    assert len(sent) == 1 and jobs.status(r, "stuck")["status"] == "running"


def _statuses(r: redis.Redis, job_id: str) -> set[str]:
    return {conn.text(r.hget(keys.meta(space), "status") or b"") for space in Frontier(r).spaces(job_id)}


def test_a_periodic_split_job_runs_each_cycle_whole_within_its_page_budget(
        r: redis.Redis, make_web, workers: Workers, tmp_path: Path) -> None:
    web: TestWeb = make_web(6, 12)
    want = web.reachable_urls()
    store_url = f"sqlite:///{tmp_path / 'crawl.db'}"
    workers.start("w0", "shard-0,shard-1,shared")
    workers.start("w1", "shard-2,shard-3,shared")
    # A page budget just above the reachable set: a cycle that kept the last one's allotment
    # would admit next to nothing.
    job_id = jobs.submit(r, Settings.from_env(shards=SHARDS, frontier_split=True, every=60.0, revisit_min=1.0,
                                              revisit_max=60.0, max_pages=len(want) + 3, store=store_url),
                         web.seeds())
    assert Frontier(r).split(job_id) == SHARDS
    wait_status(r, job_id, jobs.WAITING, 1)
    assert _statuses(r, job_id) == {"waiting"}
    assert r.hget(keys.cycle(job_id, 1), "finished_at") is not None
    assert job_id not in jobs.active(r)
    assert {p["url"] for p in open_store(store_url).pages(job_id)} == want
    first = len(web.hits())
    # Every page due again a period later: the second cycle fetches each once more.
    assert cycles.start_cycle(r, job_id, open_store, time.time() + 61) == 2
    wait_status(r, job_id, jobs.WAITING, 2)
    assert _statuses(r, job_id) == {"waiting"}
    again = Counter((h.site, h.path) for h in web.hits()[first:] if h.path != "/robots.txt")
    assert {web.url(site, path) for site, path in again} == want and max(again.values()) == 1, again
    rows = [p["url"] for p in open_store(store_url).pages(job_id)]
    assert len(rows) == len(set(rows)) == len(want)
    assert jobs.cycles(r, job_id)[1]["fetched"] == len(want)


def test_a_split_job_stopped_while_its_cycle_starts_stays_stopped_in_every_part(r: redis.Redis) -> None:
    job_id = jobs.submit(r, Settings.from_env(shards=SHARDS, frontier_split=True, every=60.0, obey_robots=False),
                         [f"http://{_hosts_of(0, 1)[0]}/"])
    f = Frontier(r)
    for space in [job_id, *f.spaces(job_id)]:  # its first cycle over
        r.hset(keys.meta(space), "status", "waiting")
    r.hset(keys.meta(job_id), "next_cycle_at", 0)
    assert f.claim_cycle(job_id, time.time(), time.time() + 60, 300) == (2, True)
    assert _statuses(r, job_id) == {"starting"}
    jobs.stop(r, job_id)
    for space in f.spaces(job_id):  # the claim's write to its parts, later than the stop's
        r.hset(keys.meta(space), "status", "starting")
    assert not f.run_cycle(job_id, SHARDS)
    assert _statuses(r, job_id) == {"stopped"} and jobs.status(r, job_id)["status"] == "stopped"


def test_a_split_crawl_stores_every_reachable_page_once(redis_url: str, r: redis.Redis, make_web,
                                                         workers: Workers, tmp_path: Path) -> None:
    web: TestWeb = make_web(6, 40)
    want = web.reachable_urls()
    store_url = f"sqlite:///{tmp_path / 'crawl.db'}"
    workers.start("w0", "shard-0,shard-1,shared")
    workers.start("w1", "shard-2,shard-3,shared")
    # A page budget above the reachable set: the parts take allowances of it as they admit.
    job_id = jobs.submit(r, Settings.from_env(shards=SHARDS, frontier_split=True, concurrency=16,
                                              max_pages=len(want) + 40, store=store_url), web.seeds())
    st = wait_done(r, job_id, timeout=120)
    assert st["status"] == "done", st
    _assert_stored_once(store_url, job_id, want)
    c = st["counters"]
    assert c["stored"] == len(want) and c["open"] == 0 and c["inflight"] == 0, c  # type: ignore[index]
    # Every shard's part holds its hosts' records; the job's own tag none.
    parts = {p for p in range(SHARDS) if r.exists(keys.host_admitted(keys.frontier_part(job_id, p)))}
    hosts = {shard_of_host(h.host, SHARDS) for h in Frontier(r).host_stats(job_id)}
    assert parts == hosts and len(parts) > 1
    assert not r.exists(keys.host_admitted(job_id))
    assert job_id not in jobs.active(r)
    # No script touched another part's keys, no task or dispatcher tick failed.
    errors = _failed(tmp_path)
    assert not errors, errors[:5]


def test_a_split_crawl_whose_shard_count_goes_down_mid_crawl_finishes_whole(
        redis_url: str, r: redis.Redis, make_web, workers: Workers, tmp_path: Path) -> None:
    web: TestWeb = make_web(8, 30)
    want = web.reachable_urls()
    store_url = f"sqlite:///{tmp_path / 'crawl.db'}"
    workers.start("w0", "shard-0,shard-1,shared")
    workers.start("w1", "shard-2,shard-3")
    job_id = jobs.submit(r, Settings.from_env(shards=SHARDS, frontier_split=True, delay=0.05, per_host=1,
                                              store=store_url), web.seeds())
    _wait_stored(r, job_id, len(want) // 4)
    # The operator takes shards 2 and 3 away: their parts go to shards 0 and 1, and what was
    # queued for them or in their workers' hands when they stopped comes back there.
    jobs.set_shards(r, job_id, 2)
    workers.stop("w1")
    mid = jobs.status(r, job_id)
    st = wait_done(r, job_id, timeout=120)
    assert mid["status"] == "running" and mid["counters"]["stored"] < len(want), mid
    assert st["status"] == "done", st
    _assert_stored_once(store_url, job_id, want)
    # Every part still has its hosts: nothing moved between parts.
    hosts = {h.host for h in Frontier(r).host_stats(job_id)}
    for h in hosts:
        assert r.hexists(keys.host_admitted(Frontier(r).space_of_host(job_id, h)), h)
    errors = _failed(tmp_path)
    assert not errors, errors[:5]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[RedisCluster]:
    conn._no_replica_until.clear()  # an earlier test's master on a port used again
    with RedisCluster(root=tmp_path / "cluster") as c:
        yield c


def _node_figures(cluster: RedisCluster, job: str) -> dict[int, tuple[int, int]]:
    """Per master: (keys of the job it holds, commands it has served)."""
    out = {}
    for port, c in cluster.node_clients().items():
        try:
            calls = sum(int(v["calls"]) for k, v in c.info("commandstats").items()
                        if k not in ("cmdstat_info", "cmdstat_scan", "cmdstat_cluster"))
            out[port] = (sum(1 for _ in c.scan_iter(keys.job_pattern(job), count=1000)), calls)
        finally:
            c.close()
    return out


def test_a_split_crawl_on_a_cluster_spreads_its_keys_and_commands_over_the_masters(
        cluster: RedisCluster, make_web, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    web: TestWeb = make_web(16, 25)  # enough hosts that each shard's part has some
    want = web.reachable_urls()
    store_url = f"sqlite:///{tmp_path / 'crawl.db'}"
    with _on_cluster(cluster, tmp_path, monkeypatch) as (_, client):
        before = _node_figures(cluster, "-")
        # The defaults on a cluster: the frontier split, the near-duplicate index, Bloom
        # filter and bodies on tags of their own.
        job_id = jobs.submit(client, Settings.from_env(shards=4, store=store_url), web.seeds())
        st = wait_done(client, job_id, timeout=150)
        after = _node_figures(cluster, job_id)
    assert st["status"] == "done", st
    _assert_stored_once(store_url, job_id, want)
    errors = _failed(tmp_path)
    assert not errors, errors[:5]
    # The parts, then the near-duplicate index's four bands, were placed on the masters in turn
    # from the one after the job's own tag's: 4 + 4 tags on 3 masters, 3, 3 and 2.
    f, nd = Frontier(client), NearDuplicates(client)
    masters = cluster.master_ports()
    parts = [cluster.master_for_key(keys.meta(space)) for space in f.spaces(job_id)]
    bands = [cluster.master_for_key(keys.neardup_band_mark(job_id, nd.band_tag(job_id, b))) for b in range(4)]
    assert sorted((parts + bands).count(p) for p in masters) == [2, 3, 3], (parts, bands)
    assert len(set(parts[:3])) == 3 and len(set(bands[:3])) == 3
    # Each master holds a fair share of the crawl's keys and serves a fair share of its commands.
    keys_all = sum(k for k, _ in after.values())
    calls = {p: after[p][1] - before[p][1] for p in after}
    calls_all = sum(calls.values())
    shares = {p: (after[p][0] / keys_all, calls[p] / calls_all) for p in after}
    assert all(0.2 <= k <= 0.5 and 0.2 <= c <= 0.5 for k, c in shares.values()), shares


def test_a_master_added_mid_crawl_takes_slots_with_the_jobs_state_and_the_crawl_finishes_whole(
        cluster: RedisCluster, make_web, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # How an operator grows the crawl's Redis (docs/capacity.md): the workers stopped, a node
    # joined, slots moved to it with their keys, the workers started again. (Not under running
    # scripts: a key missing in a slot being moved aborts a script half-way through.)
    web: TestWeb = make_web(16, 30)
    want = web.reachable_urls()
    store_url = f"sqlite:///{tmp_path / 'crawl.db'}"
    with _on_cluster(cluster, tmp_path, monkeypatch) as (w, client):
        job_id = jobs.submit(client, Settings.from_env(shards=6, frontier_split=True, delay=0.1, per_host=1,
                                                       store=store_url), web.seeds())
        _wait_stored(client, job_id, len(want) // 4)
        w.stop()
        added = cluster.add_master()
        cluster.rebalance()
        f = Frontier(client)
        # Whichever slots the rebalance chose, the job's own record and a part's go too.
        for key in (keys.meta(job_id), keys.meta(f.spaces(job_id)[0])):
            cluster.move_slot(cluster.slot_of(key), added)
        mid = jobs.status(client, job_id)
        w.start("w2", "shard-0,shard-1,shard-2,shared")
        w.start("w3", "shard-3,shard-4,shard-5,shared")
        st = wait_done(client, job_id, timeout=150)
    assert mid["status"] == "running" and mid["counters"]["stored"] < len(want), mid
    assert st["status"] == "done", st
    _assert_stored_once(store_url, job_id, want)
    errors = _failed(tmp_path, ("w0", "w1", "w2", "w3"))
    assert not errors, errors[:5]
    assert added in cluster.master_ports() and len(cluster.master_ports()) == 4
    assert cluster.master_for_key(keys.meta(job_id)) == added
    held = cluster.node_clients()
    try:  # the new master holds state of the job that the restarted workers went on with
        assert any(held[added].scan_iter(f"c:{{{job_id}*", count=1000))
    finally:
        for c in held.values():
            c.close()


def test_dispatchers_hold_a_job_while_the_cluster_moves_a_slot_of_it(cluster: RedisCluster,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    client = connect(cluster.url)
    moving = jobs.submit(client, Settings.from_env(shards=SHARDS, frontier_split=True, obey_robots=False),
                         [f"http://{h}/" for h in _hosts_per_shard().values()])
    other = jobs.submit(client, Settings.from_env(shards=SHARDS, frontier_split=True, obey_robots=False),
                        ["http://other.example/"])
    sent: list[tuple[str, str]] = []
    d = Dispatcher(client, list(range(SHARDS)), lambda job, shard, token, entries: sent.extend(
        (job, Entry.decode(e).url) for e in entries), lambda *a: None)
    key = keys.meta(Frontier(client).spaces(moving)[0])
    slot, source = cluster.slot_of(key), cluster.master_for_key(key)
    assert slot not in {cluster.slot_of(keys.meta(s)) for s in [other, *Frontier(client).spaces(other)]}
    target = next(p for p in cluster.master_ports() if p != source)
    ids = {n.port: n.id for n in cluster.nodes()}
    nodes = cluster.node_clients()
    nodes[target].execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", ids[source])
    nodes[source].execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", ids[target])
    with caplog.at_level("WARNING"):
        d.tick()
    assert sent == [(other, "http://other.example/")], sent  # the other job goes on
    assert f"job {moving}: the Redis Cluster is moving slot(s) {slot}" in caplog.text
    for port in (source, target):  # the move called off
        nodes[port].execute_command("CLUSTER", "SETSLOT", slot, "STABLE")
    for c in nodes.values():
        c.close()
    d.tick(time.time() + 3)
    assert len([u for job, u in sent if job == moving]) == SHARDS, sent


def _periodic_split(r: redis.Redis) -> tuple[str, Frontier]:
    """A periodic split job whose first cycle is over, its next due now."""
    job_id = jobs.submit(r, Settings.from_env(shards=SHARDS, frontier_split=True, every=60.0, obey_robots=False),
                         [f"http://{h}/" for h in _hosts_per_shard().values()])
    f = Frontier(r)
    for space in f.spaces(job_id):  # its first cycle's work gone
        for key in r.scan_iter(keys.prefix(space) + "*"):
            if key != keys.meta(space).encode():
                r.delete(key)
    for space in [job_id, *f.spaces(job_id)]:
        r.hset(keys.meta(space), "status", "waiting")
    r.hset(keys.meta(job_id), "next_cycle_at", 0)
    return job_id, f


def _next_cycle_with_work(r: redis.Redis, job_id: str) -> int:
    """A cycle claimed and started as the beat does, with a URL queued in part 1."""
    f = Frontier(r)
    got = f.claim_cycle(job_id, time.time(), time.time() - 1, 300)
    assert got is not None and got[1], got
    assert f.admit(job_id, [Entry(f"http://{_hosts_per_shard()[1]}/new{got[0]}")], SHARDS)
    f.run_cycle(job_id, SHARDS)
    return got[0]


def _dispatchable(r: redis.Redis, job_id: str) -> list[tuple[str, str]]:
    return _dispatch_all(Frontier(r), job_id)


def test_a_pause_while_a_cycle_starts_leaves_no_part_paused_under_a_running_job(r: redis.Redis) -> None:
    # Found by review: the job's own record, still starting, was not paused, and its parts,
    # started already, were: the job then ran with every part paused, and never ended.
    job_id, f = _periodic_split(r)
    assert f.claim_cycle(job_id, time.time(), time.time() + 60, 300) == (2, True)
    assert f.admit(job_id, [Entry(f"http://{_hosts_per_shard()[1]}/again")], SHARDS)  # the cycle's work
    f.start_parts(job_id, SHARDS)
    assert jobs.pause(r, job_id) == "starting"  # not paused: a cycle's start is not
    assert f._call(f._run_cycle, job_id, time.time(), SHARDS)
    assert jobs.raw_status(r, job_id) == "running" and _statuses(r, job_id) == {"running"}


def test_an_end_found_for_one_cycle_parks_no_part_of_the_next(r: redis.Redis) -> None:
    # Found by review: the job's end written, the next cycle started before its parts' ends
    # were: those then parked the new cycle's parts, whose URLs were never dispatched.
    job_id, f = _periodic_split(r)
    _next_cycle_with_work(r, job_id)
    _dispatch_all(f, job_id)
    for space in f.spaces(job_id):
        r.hset(keys.counters(space), "open", 0)  # cycle 2's work all stored
    real = f._end_split
    started: list[int] = []

    def late(keys: list[str], args: list[Any]) -> Any:
        out = real(keys=keys, args=args)
        if not started:
            started.append(_next_cycle_with_work(r, job_id))
        return out

    f._end_split = late  # type: ignore[assignment]
    assert f.end_if_done(job_id)
    assert started == [3]
    assert jobs.raw_status(r, job_id) == "running" and _statuses(r, job_id) == {"running"}
    assert _dispatchable(r, job_id) == [(f"http://{_hosts_per_shard()[1]}/new3", ANY)]


def test_an_end_found_for_one_cycle_does_not_end_the_next(r: redis.Redis) -> None:
    # Found by review: a caller that found cycle 2 idle wrote its end after another had ended
    # it and cycle 3 had started with work queued: cycle 3 ended with its URL open.
    job_id, f = _periodic_split(r)
    _next_cycle_with_work(r, job_id)
    _dispatch_all(f, job_id)
    for space in f.spaces(job_id):
        r.hset(keys.counters(space), "open", 0)
    real = f._end_split
    started: list[int] = []

    def stale(keys: list[str], args: list[Any]) -> Any:
        if not started:
            assert Frontier(r).end_if_done(job_id)
            started.append(_next_cycle_with_work(r, job_id))
        return real(keys=keys, args=args)

    f._end_split = stale  # type: ignore[assignment]
    assert not f.end_if_done(job_id)
    assert started == [3] and jobs.raw_status(r, job_id) == "running"
    assert r.hget(keys.cycle(job_id, 3), "finished_at") is None and r.hget(keys.cycle(job_id, 2), "finished_at")


def test_a_recovered_periodic_split_job_counts_each_cycles_admissions_afresh(r: redis.Redis, tmp_path: Path) -> None:
    # Found by review: recover counts the stored pages as admitted under the job's own tag,
    # which a new cycle's reset of the parts' counts left standing.
    store_url = f"sqlite:///{tmp_path / 'c.db'}"
    seeds = [f"http://{h}/" for h in _hosts_per_shard().values()]
    job_id = jobs.submit(r, Settings.from_env(store=store_url, every=600.0, obey_robots=False, shards=SHARDS,
                                              frontier_split=True, max_pages=len(seeds) + 2), seeds)
    now = time.time()
    store = open_store(store_url)
    store.put([PageRecord(url=u, job_id=job_id, fetch_id="f", status=200, cycle=1, fetched_at=now - 5,
                          next_visit=now - 1) for u in seeds])
    r.flushdb()
    jobs.forget(job_id)
    assert recover(r, store, job_id, now=now).status == "waiting"
    assert cycles.start_cycle(r, job_id, open_store, now + 601) == 2
    assert Frontier(r).counters(job_id, ("admitted",))["admitted"] == len(seeds)


def test_looking_for_slots_moving_gets_past_a_master_lost(cluster: RedisCluster) -> None:
    # Found by review: the look asked every master the client knew, on a connection of its own,
    # and a dead one failed every dispatcher tick until the client's map changed.
    client = connect(cluster.url)
    assert open_migrations(client) == []
    cluster.kill(cluster.master_ports()[0])
    assert open_migrations(client) == []


def _leased_by(r: redis.Redis, shards: list[int]) -> list[tuple[str, str]]:
    sent: list[tuple[str, str]] = []
    for s in shards:
        Dispatcher(r, [s], lambda job, shard, token, entries: sent.extend(
            (Entry.decode(e).url, token) for e in entries), lambda *a: None).tick()
    return sent


def test_an_operators_delay_reaches_the_hosts_of_parts_beyond_the_shard_count(r: redis.Redis) -> None:
    # Found by review: the scripts that bring a waiting host forward looked in the ready sets of
    # the job's shards only, and a part beyond them keeps its hosts in the one of its number.
    hosts = _hosts_per_shard()
    job_id = jobs.submit(r, Settings.from_env(shards=SHARDS, frontier_split=True, obey_robots=False, delay=600.0),
                         [f"http://{h}/{i}" for h in hosts.values() for i in (1, 2)])
    jobs.set_shards(r, job_id, 2)
    f = Frontier(r)
    sent = _leased_by(r, [0, 1])
    assert len(sent) == SHARDS
    f.fetched(job_id, [Fetched(u, t) for u, t in sent], lease_timeout=60.0, delay=600.0)
    f.release(job_id, sent, delay=600.0)
    for h in hosts.values():
        control.set_host_override(r, job_id, h, delay=0.0)
    late = {p: (r.zscore(keys.ready(keys.frontier_part(job_id, p), p), h) or 0) - time.time()
            for p, h in hosts.items()}
    assert all(v < 5 for v in late.values()), late


def test_an_operators_per_host_limit_unparks_the_hosts_of_parts_beyond_the_shard_count(r: redis.Redis) -> None:
    hosts = _hosts_per_shard()
    job_id = jobs.submit(r, Settings.from_env(shards=SHARDS, frontier_split=True, obey_robots=False, per_host=1),
                         [f"http://{h}/{i}" for h in hosts.values() for i in (1, 2)])
    jobs.set_shards(r, job_id, 2)
    _leased_by(r, [0, 1])
    for h in hosts.values():
        control.set_host_override(r, job_id, h, per_host=2)
    parked = {p: (r.zscore(keys.ready(keys.frontier_part(job_id, p), p), h) or 0) >= lua.PARKED
              for p, h in hosts.items()}
    assert not any(parked.values()), parked


def test_a_job_submitted_through_the_api_to_a_cluster_is_split_and_its_placement_stays_inside(
        cluster: RedisCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Found by review: `crawler web --redis-url redis+cluster://...` submitted jobs under one tag
    # (the default followed this process's CRAWLER_REDIS_URL, not the Redis the job went to),
    # and a job's status showed where its bands were placed.
    from starlette.testclient import TestClient

    from crawler.web.app import create_app

    with RedisServer() as broker:
        monkeypatch.setenv("CRAWLER_BROKER_URL", broker.url)
        monkeypatch.delenv("CRAWLER_REDIS_URL", raising=False)
        monkeypatch.delenv("CRAWLER_FRONTIER_SPLIT", raising=False)
        client = connect(cluster.url)
        with TestClient(create_app(client), base_url="http://127.0.0.1") as web:
            got = web.post("/api/jobs", json={"seeds": ["http://a.example/"],
                                              "settings": {"shards": 4, "store": f"sqlite:///{tmp_path / 'w.db'}"}})
            assert got.status_code == 201, got.text
            job = got.json()["id"]
            st = web.get(f"/api/jobs/{job}").json()
    assert Frontier(client).split(job) == 4
    assert not {keys.BAND_TAGS_FIELD, keys.PARTS_FIELD, keys.LAYOUT_FIELD} & set(st), st


def test_a_periodic_reset_and_a_purge_reach_the_placed_bands(cluster: RedisCluster, tmp_path: Path) -> None:
    client = connect(cluster.url)
    job = jobs.submit(client, Settings.from_env(redis_url=cluster.url, broker_url="redis://127.0.0.1:9/0", shards=4,
                                                store=f"sqlite:///{tmp_path / 'c.db'}"), ["http://a.example/"])
    nd = NearDuplicates(client)
    tags = [nd.band_tag(job, b) for b in range(4)]
    assert any("." in t for t in tags), tags  # placed: not all where their plain names hash
    assert nd.find_or_add(job, [("http://a/1", 0x1234567890ABCDEF)], 3) == [None]
    assert nd.find_or_add(job, [("http://a/2", 0x1234567890ABCDEE)], 3) == ["http://a/1"]
    assert [k for t in tags for k in client.scan_iter(keys.neardup_band_prefix(job, t) + "*")]
    nd.reset(job)
    assert not [k for t in tags for k in client.scan_iter(keys.neardup_band_prefix(job, t) + "*")]
    assert nd.find_or_add(job, [("http://a/3", 0x1234567890ABCDEF)], 3) == [None]
    jobs.purge(client, job)
    assert not list(client.scan_iter(keys.job_pattern(job)))


def test_a_down_shards_queue_is_swept_for_a_split_job_after_the_change_has_settled(r: redis.Redis) -> None:
    # Found by review: a split job drained the queues of shards down only while the change
    # settled; a message coming back to one later (a visibility timeout) waited there.
    from crawler.frontier.rebalance import GRACE, drain_if_changed

    job_id = jobs.submit(r, Settings.from_env(shards=SHARDS, frontier_split=True, obey_robots=False),
                         ["http://a.example/"])
    now = time.time()
    assert liveshards.compare_and_set(r, liveshards.read(r), {3: now}, now=now, after=3)
    r.lpush("shard-3", "late")
    later = now + GRACE + 1
    moved = drain_if_changed(r, job_id, SHARDS, later, liveshards.read(r))
    assert moved is not None and moved.messages == 1 and r.lrange("shard-0", 0, -1) == [b"late"]
    assert drain_if_changed(r, job_id, SHARDS, later, liveshards.LiveSet()) is None  # nothing down, nothing to do
