"""Crawl state on a Redis Cluster (``CRAWLER_REDIS_URL=redis+cluster://...``): three masters with
a replica each on loopback ports of their own, the broker on a private Redis, real Celery workers
of four shards, a loopback web. A crawl finds exactly the reachable pages, each stored once, with
the job's frontier in one slot and its other parts in slots of their own; and with the master of
the frontier's slot killed by SIGKILL mid-crawl, its replica takes over and the crawl finishes by
itself, complete and with no duplicate row."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from crawler import control, jobs
from crawler.config.settings import Settings
from crawler.dedup.neardup import NearDuplicates
from crawler.frontier.core import FINAL, Frontier
from crawler.frontier.dispatcher import Dispatcher
from crawler.local.redis_cluster import RedisCluster
from crawler.local.redis_server import RedisServer, free_port
from crawler.state import conn, keys
from crawler.state.conn import connect, is_cluster_client, replicated_write
from crawler.store import open_store
from crawler.testweb import TestWeb
from tests.conftest import Workers, wait_done

# Short leases and visibility so work lost with a master comes back within seconds.
FAST_RECOVERY = {"CRAWLER_LEASE_TIMEOUT": "4", "CRAWLER_VISIBILITY_TIMEOUT": "12", "CRAWLER_TASK_TIME_LIMIT": "10"}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[RedisCluster]:
    conn._no_replica_until.clear()  # an earlier test's master on a port used again
    with RedisCluster(root=tmp_path / "cluster") as c:
        yield c


@pytest.fixture
def broker() -> Iterator[RedisServer]:
    with RedisServer() as b:
        yield b


def _start(cluster: RedisCluster, broker: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
           env: dict[str, str] | None = None) -> tuple[Workers, redis.Redis]:
    for name, value in {"CRAWLER_REDIS_URL": cluster.url, "CRAWLER_BROKER_URL": broker.url, **(env or {})}.items():
        monkeypatch.setenv(name, value)
    w = Workers(cluster.url, tmp_path)
    w.start("w0", "shard-0,shard-1,shared")
    w.start("w1", "shard-2,shard-3,shared")
    return w, connect(cluster.url)


def _waits(cluster: RedisCluster, port: int) -> int:
    c = cluster.node_clients()[port]
    try:
        return int(c.info("commandstats").get("cmdstat_wait", {}).get("calls", 0))
    finally:
        c.close()


def _rows(store_url: str, job_id: str) -> list[str]:
    return [p["url"] for p in open_store(store_url).pages(job_id)]


def _task_errors(tmp_path: Path) -> list[str]:
    """Tasks that failed, and dispatcher ticks that did (a script touching another slot fails so)."""
    return [line for n in ("w0", "w1") for line in (tmp_path / f"{n}.log").read_text().splitlines()
            if "raised unexpected" in line or "dispatcher tick failed" in line or "redis unavailable" in line]


@pytest.mark.parametrize("split", [None, False], ids=["split-by-default", "one-tag"])
def test_a_crawl_with_its_state_on_a_redis_cluster(cluster: RedisCluster, broker: RedisServer, make_web,
                                                   tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   split: bool | None) -> None:
    web: TestWeb = make_web(4, 50)
    want = web.reachable_urls()
    store_url = f"sqlite:///{tmp_path / 'crawl.db'}"
    w, client = _start(cluster, broker, tmp_path, monkeypatch)
    assert is_cluster_client(client)
    try:
        job_id = jobs.submit(client, Settings.from_env(shards=4, per_host=2, concurrency=16, store=store_url,
                                                       frontier_split=split), web.seeds())
        # On a cluster a job's frontier is split by shard unless told not to (--no-frontier-split).
        assert Frontier(client).split(job_id) == (0 if split is False else 4)
        st = wait_done(client, job_id, timeout=120)
        assert st["status"] == "done", st
        assert st["counters"]["stored"] == len(want), st  # type: ignore[index]
        rows = _rows(store_url, job_id)
        assert len(rows) == len(set(rows)), "duplicate rows"
        assert set(rows) == want
        assert not _task_errors(tmp_path)
        # What an operator reads and changes: the hosts table (a script reading queue lengths)
        # and a live settings change (a transaction on the job's slot).
        table = control.hosts(client, job_id, limit=10)
        assert sum(h["fetched"] for h in table["hosts"]) == len(want), table
        assert control.set_settings(client, job_id, {"delay": "0.5"})["changed"] == {"delay": [0.0, 0.5]}
    finally:
        w.stop()
    # The frontier's keys share the job's slot (its scripts touch nothing else: no task or tick
    # failed above); the Bloom filter and the near-duplicate index (its records, and each of its
    # bands) are in slots of their own.
    found = [k.decode() for k in client.scan_iter(keys.job_pattern(job_id), count=1000)]
    slots = {name.split("}")[0] + "}" for name in found}
    assert {keys.prefix(job_id)[:-1], keys.role_prefix(job_id, keys.BLOOM)[:-1],
            keys.role_prefix(job_id, keys.NEARDUP)[:-1],
            *(keys.neardup_band_prefix(job_id, NearDuplicates(client).band_tag(job_id, b))[:-1]
              for b in range(4))} <= slots, slots
    # Link batches on their way to dedup were waited on until the replica had them.
    home = cluster.master_for_key(keys.meta(job_id))
    assert _waits(cluster, home) > 0
    assert job_id not in jobs.active(client)

@pytest.mark.chaos
def test_the_master_of_the_jobs_slot_killed_mid_crawl_is_replaced_and_nothing_is_lost(
        cluster: RedisCluster, broker: RedisServer, make_web, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    web: TestWeb = make_web(3, 200)
    want = web.reachable_urls()
    store_url = f"sqlite:///{tmp_path / 'crawl.db'}"
    w, client = _start(cluster, broker, tmp_path, monkeypatch, FAST_RECOVERY)
    try:
        job_id = jobs.submit(client, Settings.from_env(shards=4, per_host=1, delay=0.05, concurrency=8,
                                                       store=store_url), web.seeds())
        deadline = time.monotonic() + 60
        while len(_rows(store_url, job_id)) < len(want) // 3:
            assert time.monotonic() < deadline, "the crawl did not get a third of the way"
            time.sleep(0.05)
        home = cluster.master_for_key(keys.meta(job_id))
        replica = next(p for p in cluster.live_ports() if cluster.replica_of(p) == home)
        # An operator's `status --wait` (a script's barrier) waits the failover out as well.
        waiting = subprocess.Popen([sys.executable, "-m", "crawler", "status", job_id, "--wait", "--timeout", "170"],
                                   env={**os.environ, "CRAWLER_REDIS_URL": cluster.url,
                                        "CRAWLER_BROKER_URL": broker.url},
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        cluster.kill(home)  # no shutdown, no last word to the replica
        cluster.wait_failover(home)
        assert cluster.master_for_key(keys.meta(job_id)) == replica
        st = wait_done(client, job_id, timeout=180)
        assert st["status"] == "done", st
        out, err = waiting.communicate(timeout=30)
        assert waiting.returncode == 0 and f"job {job_id}: done" in out, (out, err)
        rows = _rows(store_url, job_id)
        assert len(rows) == len(set(rows)), "duplicate rows"
        assert set(rows) == want, f"{len(want - set(rows))} pages missing"
    finally:
        w.stop()




@pytest.mark.chaos
def test_an_embedded_crawl_on_a_cluster_waits_out_the_loss_of_its_jobs_master(
        cluster: RedisCluster, broker: RedisServer, make_web, tmp_path: Path) -> None:
    # `crawler crawl` against a cluster: its workers wait out a failover, and so must the loop
    # that watches the job for them (before, its first failed poll stopped everything).
    web: TestWeb = make_web(2, 150)
    want = web.reachable_urls()
    out = tmp_path / "out"
    env = {**os.environ, "CRAWLER_REDIS_URL": cluster.url, "CRAWLER_BROKER_URL": broker.url,
           **FAST_RECOVERY}
    crawl = subprocess.Popen([sys.executable, "-m", "crawler", "crawl", *web.seeds(), "--out", str(out), "--delay",
                              "0.05", *(a for ip in web.ips for a in ("--allow-net", f"{ip}/32"))],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        client = connect(cluster.url)
        deadline = time.monotonic() + 60
        while not (active := jobs.active(client)) or len(_rows(f"sqlite:///{out / 'crawl.db'}", active[0])) < 50:
            assert time.monotonic() < deadline and crawl.poll() is None, crawl.stderr.read() if crawl.stderr else ""
            time.sleep(0.1)
        job_id = active[0]
        home = cluster.master_for_key(keys.meta(job_id))
        cluster.kill(home)
        cluster.wait_failover(home)
        _, err = crawl.communicate(timeout=180)
    finally:
        if crawl.poll() is None:
            crawl.kill()
    assert crawl.returncode == 0, err[-2000:]
    assert "Redis unavailable" in err  # it said why it sat still
    rows = _rows(f"sqlite:///{out / 'crawl.db'}", job_id)
    assert len(rows) == len(set(rows)) and set(rows) == want, f"{len(want - set(rows))} pages missing"


def test_a_replicated_write_waits_for_a_replica_but_not_on_a_master_without_one(cluster: RedisCluster,
                                                                                tmp_path: Path) -> None:
    client = connect(cluster.url)
    assert replicated_write(client, "{a}k", lambda pipe: pipe.set("{a}k", "1")) == [True]  # WAIT's reply kept back
    home = cluster.master_for_key("{a}k")
    assert _waits(cluster, home) == 1 and not conn._no_replica_until
    replica = next(p for p in cluster.live_ports() if cluster.replica_of(p) == home)
    on_replica = redis.Redis(port=replica)
    on_replica.execute_command("READONLY")  # a replica answers reads of its master's slots then
    assert on_replica.get("{a}k") == b"1"  # WAIT returned once the replica had it
    on_replica.close()
    with RedisCluster(masters=3, replicas=0, root=tmp_path / "bare") as bare:
        lone = connect(bare.url)
        for _ in range(3):
            assert replicated_write(lone, "{a}k", lambda pipe: pipe.set("{a}k", "1")) == [True]
        # The first WAIT timed out (no replica); the next writes went without one.
        assert _waits(bare, bare.master_for_key("{a}k")) == 1


def test_a_submitted_job_survives_its_masters_loss_right_after(cluster: RedisCluster) -> None:
    client = connect(cluster.url)
    job_id = jobs.submit(client, Settings.from_env(shards=1), ["http://127.0.1.1:9/"])
    home = cluster.master_for_key(keys.meta(job_id))
    assert _waits(cluster, home) >= 1  # the submitter was answered once a replica had the job
    cluster.kill(home)  # no shutdown, no last word to the replica
    cluster.wait_failover(home)
    client = connect(cluster.url)
    assert jobs.status(client, job_id)["status"] == "running"
    assert client.llen(keys.host_queue(job_id, "127.0.1.1:9")) == 1  # its seed, queued


def test_counters_join_the_callers_pipeline_and_a_job_ended_while_restarting_stays_listed(
        cluster: RedisCluster) -> None:
    client = connect(cluster.url)
    job_id = jobs.submit(client, Settings.from_env(shards=1), ["http://127.0.1.1:9/"])
    pipe = client.pipeline(transaction=False)
    jobs.count(pipe, job_id, a=1, b=2)
    assert client.hget(keys.counters(job_id), "a") is None  # queued, not sent
    pipe.execute()
    assert client.hmget(keys.counters(job_id), ["a", "b"]) == [b"1", b"2"]
    frontier = Frontier(client)
    # A script's wakes are pushed by its caller (the wake lists are in a slot of their own).
    assert frontier._unwrap(job_id, [b"x", [b"1"], 0]) == b"x" and client.llen(keys.wake(1)) == 1
    # A script said the job ended, but a new cycle started it meanwhile: it stays listed.
    assert frontier._unwrap(job_id, [b"x", [], 1]) == b"x" and job_id in jobs.active(client)
    client.hset(keys.meta(job_id), "status", "waiting")
    frontier._unwrap(job_id, [b"x", [b"0"], 1])
    assert job_id not in jobs.active(client) and client.llen(keys.wake(0)) == 1

def test_a_finished_job_left_in_the_active_set_is_dropped_by_a_dispatcher(cluster: RedisCluster) -> None:
    """On a cluster the script ending a job only says so, and its caller takes the job off the
    active set: a caller lost in between leaves it there until a dispatcher sees it is over."""
    client = connect(cluster.url)
    job_id = jobs.submit(client, Settings.from_env(shards=1), ["http://127.0.1.1:9/"])
    assert job_id in jobs.active(client)
    dispatcher = Dispatcher(client, [0], lambda *a: None, lambda *a: None)
    dispatcher.tick()
    assert job_id in jobs.active(client)  # running: kept
    client.hset(keys.meta(job_id), "status", jobs.DONE)  # what done_check wrote before its caller died
    dispatcher.tick(now=time.time() + 2)
    assert job_id not in jobs.active(client)
    assert set(FINAL) == set(jobs.FINISHED)


def test_cluster_mistakes_end_a_command_with_one_line(cluster: RedisCluster, broker: RedisServer,
                                                      tmp_path: Path) -> None:
    def crawler(url: str, *args: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "CRAWLER_REDIS_URL": url, "CRAWLER_BROKER_URL": broker.url}
        return subprocess.run([sys.executable, "-m", "crawler", *args], env=env, capture_output=True, text=True,
                              timeout=60)

    dead = crawler(f"redis+cluster://127.0.0.1:{free_port()}", "jobs")
    assert dead.returncode == 1 and dead.stderr.strip().count("\n") == 0, dead.stderr
    assert "cannot use the Redis Cluster" in dead.stderr
    # A node named as a plain Redis: some keys are elsewhere, and it says so.
    for port in cluster.master_ports():
        got = crawler(f"redis://127.0.0.1:{port}/0", "submit", "http://127.0.1.1:9/", "--store",
                      f"sqlite:///{tmp_path / 'x.db'}")
        if got.returncode != 0:
            assert got.returncode == 2 and "redis+cluster://" in got.stderr, got.stderr
            assert got.stderr.strip().count("\n") == 0, got.stderr
            break
    else:
        pytest.fail("every master took the job's keys")
    # An embedded crawl's workers consume every shard, which Celery does from one broker.
    env = {**os.environ, "CRAWLER_REDIS_URL": cluster.url, "CRAWLER_BROKER_URL": f"{broker.url},{broker.url[:-1]}1"}
    two = subprocess.run([sys.executable, "-m", "crawler", "crawl", "http://127.0.1.1:9/", "--out",
                          str(tmp_path / "out")], env=env, capture_output=True, text=True, timeout=60)
    assert two.returncode == 2 and "CRAWLER_BROKER_URL names several" in two.stderr, two.stderr
