"""Break things mid-crawl, with real processes, a real Redis and a loopback web of 2,000 pages:
the final store must equal the reachable set exactly, with no duplicate rows. Each test prints
how long recovery took."""

from __future__ import annotations

import random
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from crawler import jobs
from crawler.cli import main
from crawler.config.settings import Settings
from crawler.jobs import set_shards
from crawler.local.redis_server import RedisServer
from crawler.state import keys
from crawler.state.conn import connect
from crawler.store import open_store
from crawler.testweb import TestWeb
from tests.conftest import Workers, wait_done

pytestmark = pytest.mark.chaos

# Short leases and visibility so lost work comes back within seconds, not minutes.
FAST_RECOVERY = {"CRAWLER_LEASE_TIMEOUT": "4", "CRAWLER_VISIBILITY_TIMEOUT": "12", "CRAWLER_TASK_TIME_LIMIT": "10"}
SITES, PAGES = 4, 500


def _crawl(client: redis.Redis, web: TestWeb, store_url: str, shards: int = 2) -> str:
    settings = Settings.from_env(shards=shards, per_host=4, concurrency=32, store=store_url)
    return jobs.submit(client, settings, web.seeds())


def _stored(client: redis.Redis, job_id: str) -> int:
    return int(jobs.status(client, job_id)["counters"].get("stored", 0))  # a split frontier's parts summed


def _wait_stored(client: redis.Redis, job_id: str, n: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while _stored(client, job_id) < n:
        assert time.monotonic() < deadline, f"only {_stored(client, job_id)} stored"
        time.sleep(0.05)


def _check_exact(store_url: str, job_id: str, web: TestWeb) -> None:
    rows = [p["url"] for p in open_store(store_url).pages(job_id)]
    assert len(rows) == len(set(rows)), "duplicate rows"
    assert set(rows) == web.reachable_urls()


@pytest.fixture
def big_web(make_web) -> TestWeb:
    web: TestWeb = make_web(SITES, PAGES)
    assert len(web.reachable_urls()) >= 2000
    return web


def test_kill_9_a_random_worker_five_times(r: redis.Redis, big_web: TestWeb, workers: Workers,
                                          tmp_path: Path) -> None:
    store_url = f"sqlite:///{tmp_path / 'crawl.db'}"
    names = ["w0", "w1"]
    for n in names:
        workers.start(n, "shard-0,shard-1", env=FAST_RECOVERY)
    job_id = _crawl(r, big_web, store_url)
    rng = random.Random(5)
    for i in range(5):
        _wait_stored(r, job_id, 250 * (i + 1))
        victim = rng.choice(names)
        workers.procs[victim].send_signal(signal.SIGKILL)
        workers.procs[victim].wait()
        workers.procs.pop(victim)
        workers.start(victim, "shard-0,shard-1", env=FAST_RECOVERY)
    killed_at = time.monotonic()
    wait_done(r, job_id, timeout=120)
    print(f"\nkill -9 x5: finished {time.monotonic() - killed_at:.1f}s after the last kill")
    _check_exact(store_url, job_id, big_web)


def _kill_9(server: RedisServer) -> None:
    assert server.proc is not None
    server.proc.send_signal(signal.SIGKILL)  # no shutdown: no last fsync, clients cut off mid-reply
    server.proc.wait()


def _workers_alive(workers: Workers) -> None:
    dead = {n: p.returncode for n, p in workers.procs.items() if p.poll() is not None}
    assert not dead, f"workers exited: {dead}"


@pytest.fixture
def small_web(make_web) -> TestWeb:
    web: TestWeb = make_web(3, 200)
    assert len(web.reachable_urls()) >= 500
    return web


def _start_on(server: RedisServer, workers: Workers, monkeypatch: pytest.MonkeyPatch) -> redis.Redis:
    """Point this test and two workers (every shard) at ``server``, a Redis of the test's own."""
    monkeypatch.setenv("CRAWLER_REDIS_URL", server.url)
    workers.redis_url = server.url
    for n in ("w0", "w1"):
        workers.start(n, "shard-0,shard-1", env=FAST_RECOVERY)
    return connect(server.url)


def _crawl_then_kill_redis(server: RedisServer, workers: Workers, monkeypatch: pytest.MonkeyPatch, web: TestWeb,
                           store_url: str) -> tuple[redis.Redis, str, float]:
    """Start two workers on ``server`` and a job, kill -9 Redis a third of the way through:
    (client, job id, when Redis went down)."""
    client = _start_on(server, workers, monkeypatch)
    job_id = _crawl(client, web, store_url)
    _wait_stored(client, job_id, len(web.reachable_urls()) // 3)
    _kill_9(server)
    down = time.monotonic()
    time.sleep(1.0)
    return client, job_id, down


def test_redis_killed_with_aof_everysec_mid_crawl_comes_back_by_itself(
        small_web: TestWeb, workers: Workers, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    workdir = tmp_path / "redis"
    workdir.mkdir()
    server = RedisServer(appendonly=True, workdir=str(workdir)).start()
    store_url = f"sqlite:///{tmp_path / 'crawl.db'}"
    try:
        client, job_id, down = _crawl_then_kill_redis(server, workers, monkeypatch, small_web, store_url)
        server = RedisServer(port=server.port, appendonly=True, workdir=str(workdir)).start()
        wait_done(client, job_id, timeout=60)
        print(f"\nredis kill -9 (AOF everysec): finished {time.monotonic() - down:.1f}s after Redis went down")
        _check_exact(store_url, job_id, small_web)
        _workers_alive(workers)
    finally:
        workers.stop()
        server.stop()


def test_redis_lost_without_persistence_is_rebuilt_from_the_store(
        small_web: TestWeb, workers: Workers, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    server = RedisServer().start()  # nothing on disk: a restart comes back empty
    store_url = f"sqlite:///{tmp_path / 'crawl.db'}"
    try:
        client, job_id, down = _crawl_then_kill_redis(server, workers, monkeypatch, small_web, store_url)
        server = RedisServer(port=server.port).start()
        assert not client.exists(keys.meta(job_id)), "the new Redis is not empty"
        time.sleep(1.0)  # workers reconnect to an empty Redis meanwhile, and must not write the job back
        assert main(["recover", job_id, "--store", store_url, "--redis-url", server.url]) == 0
        wait_done(client, job_id, timeout=60)
        print(f"\nredis lost: finished {time.monotonic() - down:.1f}s after Redis went down")
        _check_exact(store_url, job_id, small_web)
        _workers_alive(workers)
    finally:
        workers.stop()
        server.stop()


def test_shards_two_to_three_and_back_mid_crawl(r: redis.Redis, big_web: TestWeb, workers: Workers,
                                               tmp_path: Path) -> None:
    store_url = f"sqlite:///{tmp_path / 'crawl.db'}"
    workers.start("s0", "shard-0", env=FAST_RECOVERY)
    workers.start("s1", "shard-1", env=FAST_RECOVERY)
    job_id = _crawl(r, big_web, store_url)
    _wait_stored(r, job_id, 400)
    grown = set_shards(r, job_id, 3)
    workers.start("s2", "shard-2", env=FAST_RECOVERY)
    _wait_stored(r, job_id, 1000)
    shrunk = set_shards(r, job_id, 2)
    changed = time.monotonic()
    workers.stop("s2")  # warm shutdown: its in-flight tasks finish
    wait_done(r, job_id, timeout=120)
    print(f"\nshards 2->3 moved {grown.hosts}/{grown.hosts_total} hosts, 3->2 moved {shrunk.hosts}/"
          f"{shrunk.hosts_total}, {shrunk.messages} messages requeued; done {time.monotonic() - changed:.1f}s later")
    _check_exact(store_url, job_id, big_web)


def test_stop_every_worker_then_start_again(r: redis.Redis, big_web: TestWeb, workers: Workers,
                                           tmp_path: Path) -> None:
    store_url = f"sqlite:///{tmp_path / 'crawl.db'}"
    for n in ("w0", "w1"):
        workers.start(n, "shard-0,shard-1", env=FAST_RECOVERY)
    job_id = _crawl(r, big_web, store_url)
    _wait_stored(r, job_id, 700)
    workers.stop()
    paused_at = _stored(r, job_id)
    time.sleep(2.0)
    assert _stored(r, job_id) == paused_at, "work went on with no worker running"
    restarted = time.monotonic()
    for n in ("w0", "w1"):
        workers.start(n, "shard-0,shard-1", env=FAST_RECOVERY)
    wait_done(r, job_id, timeout=120)
    print(f"\nstop all / start again: finished {time.monotonic() - restarted:.1f}s after the restart")
    _check_exact(store_url, job_id, big_web)
    # Work resumed where it was: pages stored before the stop were not fetched again.
    paths = [(h.site, h.path) for h in big_web.hits() if h.path != "/robots.txt"]
    assert len(paths) - len(set(paths)) <= 64, "the crawl started over"


def _iter_hosts(n: int) -> Iterator[str]:
    for i in range(n):
        yield f"http://www.site{i}.example/"


def test_a_shard_change_moves_about_one_in_n_hosts(r: redis.Redis, tmp_path: Path) -> None:
    settings = Settings.from_env(shards=3, obey_robots=False, store=f"sqlite:///{tmp_path / 'c.db'}", dedup="set")
    job_id = jobs.submit(r, settings, list(_iter_hosts(600)))
    moved = set_shards(r, job_id, 4)
    assert moved.hosts_total == 600
    assert abs(moved.hosts / 600 - 1 / 4) < 0.05, moved
    back = set_shards(r, job_id, 3)
    assert back.hosts == moved.hosts
    # Every host now sits in the ready set of the shard that owns it, none twice.
    from crawler.frontier.sharding import shard_of_host

    placed = {}
    for s in range(4):
        for m in r.zrange(keys.ready(job_id, s), 0, -1):
            assert m not in placed
            placed[m] = s
    assert len(placed) == 600
    assert all(shard_of_host(h.decode(), 3) == s for h, s in placed.items())
