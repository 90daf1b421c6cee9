"""Dead-shard takeover against a real Redis: the live-set record, the hosts, leases, retries
and task messages that move to the backups and back, and (with real worker processes) a crawl
that loses the only worker of a shard for good and still ends exactly."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
import redis

from crawler import cli, jobs
from crawler.config.settings import Settings
from crawler.frontier import Entry, Frontier, liveshards, takeover
from crawler.frontier.rebalance import GRACE, rebalance_if_changed
from crawler.frontier.sharding import queue_name, ranked_shards, shard_of_host
from crawler.state import keys
from crawler.state.nodes import record_heartbeat
from crawler.testweb import TestWeb
from crawler.urls import registered_domain
from tests.conftest import Workers, wait_done
from tests.integration.test_chaos import FAST_RECOVERY, _check_exact, _crawl, _stored, _wait_stored

SHARDS = 3


def _placement(client: redis.Redis, job_id: str) -> dict[str, int]:
    placed: dict[str, int] = {}
    for s in range(SHARDS):
        for m in client.zrange(keys.ready(job_id, s), 0, -1):
            assert m.decode() not in placed, "a host in two ready sets"
            placed[m.decode()] = s
    return placed


def _beat(client: redis.Redis, now: float, *nodes: tuple[str, int]) -> None:
    for name, shard in nodes:
        record_heartbeat(client, name, shards=[shard], interval=2.0, now=now)


def test_a_silent_shard_is_taken_over_once_and_given_back(r: redis.Redis, tmp_path: Path) -> None:
    settings = Settings.from_env(shards=SHARDS, obey_robots=False, store=f"sqlite:///{tmp_path}/c.db", dedup="set",
                                 concurrency=10_000)
    job_id = jobs.submit(r, settings, [f"http://www.site{i}.example/" for i in range(600)])
    home = _placement(r, job_id)
    assert len(home) == 600 and set(home.values()) == {0, 1, 2}
    frontier = Frontier(r)
    t0 = time.time()
    # Shard 1's worker leased some URLs, and left messages on its queue, before it died.
    leased = frontier.dispatch(job_id, 1, max_urls=20, per_host=1, delay=0.0, lease_timeout=5.0,
                               concurrency=10_000, now=t0)
    assert len(leased.items) == 20
    r.rpush(queue_name(1), b"m1", b"m2")
    _beat(r, t0, ("a", 0), ("b", 1), ("c", 2))

    _beat(r, t0 + 8, ("a", 0), ("c", 2))
    assert takeover.check(r, 5, t0 + 8) is None  # b missed 4 heartbeats: not yet
    _beat(r, t0 + 10, ("a", 0), ("c", 2))
    change = takeover.check(r, 5, t0 + 10)
    assert change is not None and (change.down, change.up) == ([1], [])
    assert takeover.check(r, 5, t0 + 10.1) is None, "a second dispatcher decided it again"
    live = liveshards.read(r)
    assert (live.epoch, live.shards()) == (1, frozenset({1}))
    # A dispatcher that read the record before that change cannot overwrite it.
    assert not liveshards.compare_and_set(r, liveshards.LiveSet(), {2: t0}, now=t0 + 10.1, after=5)
    assert liveshards.read(r) == live

    moved = rebalance_if_changed(r, job_id, SHARDS, t0 + 10.2, live)
    assert moved is not None and moved.messages == 2
    placed = _placement(r, job_id)
    leased_hosts = {h for _, h in leased.items}
    assert 1 not in placed.values()
    for host, shard in home.items():
        backup = ranked_shards(registered_domain(host), SHARDS)[1]
        if host in leased_hosts:
            continue  # in flight: no queued URL left, so in no ready set
        assert placed[host] == (backup if shard == 1 else shard), host  # only shard 1's hosts moved
    assert r.llen(queue_name(1)) == 0 and r.llen(queue_name(2)) == 2  # the next live shard's queue

    # The dead worker's leases expire back to host queues that the backups now serve.
    back = frontier.reap(job_id, delay=0.0, max_attempts=3, now=t0 + 20)
    assert back.returned == 20
    placed = _placement(r, job_id)
    assert all(placed[h] == ranked_shards(registered_domain(h), SHARDS)[1] for h in leased_hosts)
    # New links to a dead shard's host queue on its backup.
    host = next(h for h, s in home.items() if s == 1)
    assert frontier.admit(job_id, [Entry(f"http://{host}/new")], SHARDS) == [f"http://{host}/new"]
    assert _placement(r, job_id)[host] != 1

    # Long after the change, work that still lands on the dead shard is swept off it.
    r.zadd(keys.ready(job_id, 1), {host: t0})
    r.rpush(queue_name(1), b"late")
    late = t0 + 10 + GRACE + 5
    swept = rebalance_if_changed(r, job_id, SHARDS, late, liveshards.read(r))
    assert swept is not None and (swept.hosts, swept.messages) == (1, 1)
    assert 1 not in _placement(r, job_id).values()

    # A worker of shard 1 is back: its hosts go home.
    _beat(r, late, ("a", 0), ("b", 1), ("c", 2))
    change = takeover.check(r, 5, late)
    assert change is not None and (change.down, change.up) == ([], [1])
    rebalance_if_changed(r, job_id, SHARDS, late + 1, liveshards.read(r))
    assert _placement(r, job_id) == {h: shard_of_host(h, SHARDS) for h in home}


def test_kill_9_the_only_worker_of_a_shard_and_never_restart_it(
        r: redis.Redis, make_web, workers: Workers, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    web: TestWeb = make_web(4, 120)
    homes = {shard_of_host(u.split("/")[2], 2) for u in web.seeds()}
    assert homes == {0, 1}, "the web must have hosts on both shards"
    env = {**FAST_RECOVERY, "CRAWLER_TAKEOVER_AFTER": "3"}
    workers.start("s0", "shard-0", env=env)
    workers.start("s1", "shard-1", env=env)
    store_url = f"sqlite:///{tmp_path / 'crawl.db'}"
    job_id = _crawl(r, web, store_url)
    # Mid-crawl, with shard 1 busy: its worker has fetched pages and holds work.
    _wait_stored(r, job_id, len(web.reachable_urls()) // 4)
    assert int(r.hget(keys.NODE_FETCHED, next(n for n in r.hkeys(keys.NODES) if n.startswith(b"s1@"))) or 0) > 0
    workers.procs["s1"].send_signal(signal.SIGKILL)
    workers.procs["s1"].wait()
    workers.procs.pop("s1")
    killed = time.monotonic()
    wait_done(r, job_id, timeout=60)
    with capsys.disabled():
        print(f"\ntakeover: done {time.monotonic() - killed:.1f}s after kill -9 of shard 1's only worker")
    _check_exact(store_url, job_id, web)
    assert liveshards.read(r).shards() == {1}
    assert "shard 1 taken over" in (tmp_path / "s0.log").read_text()

    assert cli.main(["nodes"]) == 0
    out = capsys.readouterr().out
    assert "shard 1: taken over since" in out and "(shard 1 taken over)" in out
    assert cli.main(["status", job_id]) == 0
    assert "shard 1: taken over since" in capsys.readouterr().out


def _wait(cond, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_a_dead_shard_gets_its_hosts_back_when_its_worker_returns(
        r: redis.Redis, make_web, workers: Workers, tmp_path: Path) -> None:
    web: TestWeb = make_web(4, 60)
    env = {**FAST_RECOVERY, "CRAWLER_TAKEOVER_AFTER": "3"}
    workers.start("s0", "shard-0", env=env)
    workers.start("s1", "shard-1", env=env)
    store_url = f"sqlite:///{tmp_path / 'crawl.db'}"
    # A per-host delay keeps the crawl going past the takeover and the return.
    settings = Settings.from_env(shards=2, per_host=1, delay=0.2, autothrottle=False, concurrency=16, store=store_url)
    job_id = jobs.submit(r, settings, web.seeds())
    _wait_stored(r, job_id, 40)
    workers.procs["s1"].send_signal(signal.SIGKILL)
    workers.procs["s1"].wait()
    workers.procs.pop("s1")
    _wait(lambda: liveshards.read(r).shards() == {1})
    # The migration follows the decision within a dispatcher tick.
    _wait(lambda: 0 in _placement_of(r, job_id).values() and 1 not in _placement_of(r, job_id).values(),
          timeout=5)
    workers.start("s1", "shard-1", env=env)
    _wait(lambda: not liveshards.read(r).shards())
    # Home again: shard 1's hosts sit in its own ready set and its worker fetches them.
    _wait(lambda: set(_placement_of(r, job_id).values()) == {0, 1}, timeout=10)
    back_at = _stored(r, job_id)
    wait_done(r, job_id, timeout=60)
    assert _stored(r, job_id) > back_at, "the crawl ended before shard 1 came back"
    assert "shard 1 is live again" in (tmp_path / "s0.log").read_text() + (tmp_path / "s1.log").read_text()
    _check_exact(store_url, job_id, web)


def _placement_of(client: redis.Redis, job_id: str) -> dict[str, int]:
    return {m.decode(): s for s in (0, 1) for m in client.zrange(keys.ready(job_id, s), 0, -1)}
