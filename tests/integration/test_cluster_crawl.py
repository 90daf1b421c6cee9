"""Crawl state on a Redis Cluster (``CRAWLER_REDIS_URL=redis+cluster://...``): three masters with
a replica each on loopback ports of their own, the broker on a private Redis, real Celery workers
of four shards, a loopback web. A crawl finds exactly the reachable pages, each stored once, with
every key of the job in one slot; and with the master of that slot killed by SIGKILL mid-crawl,
its replica takes over and the crawl finishes by itself, complete and with no duplicate row."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from crawler import jobs
from crawler.config.settings import Settings
from crawler.local.redis_cluster import RedisCluster
from crawler.local.redis_server import RedisServer
from crawler.state import keys
from crawler.state.conn import ReplicatedWrite, connect, is_cluster_client
from crawler.store import open_store
from crawler.testweb import TestWeb
from tests.conftest import Workers, wait_done

# Short leases and visibility so work lost with a master comes back within seconds.
FAST_RECOVERY = {"CRAWLER_LEASE_TIMEOUT": "4", "CRAWLER_VISIBILITY_TIMEOUT": "12", "CRAWLER_TASK_TIME_LIMIT": "10"}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[RedisCluster]:
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


def _rows(store_url: str, job_id: str) -> list[str]:
    return [p["url"] for p in open_store(store_url).pages(job_id)]


def _task_errors(tmp_path: Path) -> list[str]:
    return [line for n in ("w0", "w1") for line in (tmp_path / f"{n}.log").read_text().splitlines()
            if "raised unexpected" in line]


def test_a_crawl_with_its_state_on_a_redis_cluster(cluster: RedisCluster, broker: RedisServer, make_web,
                                                   tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    web: TestWeb = make_web(4, 50)
    want = web.reachable_urls()
    store_url = f"sqlite:///{tmp_path / 'crawl.db'}"
    w, client = _start(cluster, broker, tmp_path, monkeypatch)
    assert is_cluster_client(client)
    try:
        job_id = jobs.submit(client, Settings.from_env(shards=4, per_host=2, concurrency=16, store=store_url),
                             web.seeds())
        st = wait_done(client, job_id, timeout=120)
        assert st["status"] == "done", st
        assert st["counters"]["stored"] == len(want), st  # type: ignore[index]
        rows = _rows(store_url, job_id)
        assert len(rows) == len(set(rows)), "duplicate rows"
        assert set(rows) == want
        assert not _task_errors(tmp_path)
    finally:
        w.stop()
    # Every key of the job is on the master of its slot (one slot: its scripts touch nothing
    # else); the wake lists and the active-jobs set, which the scripts no longer touch, are on
    # whichever masters their slots fall to.
    home = cluster.master_for_key(keys.meta(job_id))
    per_node: dict[int, list[str]] = {}
    waits = 0
    for port, c in cluster.node_clients().items():
        per_node[port] = [k.decode() for k in c.scan_iter(keys.job_pattern(job_id), count=1000)]
        if port == home:
            waits = int(c.info("commandstats").get("cmdstat_wait", {}).get("calls", 0))
        c.close()
    # Link batches on their way to dedup were waited on until the replica had them.
    assert waits > 0
    assert per_node[home] and not any(v for p, v in per_node.items() if p != home), {
        p: len(v) for p, v in per_node.items()}
    assert client.exists(keys.wake(0)) in (0, 1) and job_id not in jobs.active(client)


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
        cluster.kill(home)  # no shutdown, no last word to the replica
        cluster.wait_failover(home)
        assert cluster.master_for_key(keys.meta(job_id)) == replica
        st = wait_done(client, job_id, timeout=180)
        assert st["status"] == "done", st
        rows = _rows(store_url, job_id)
        assert len(rows) == len(set(rows)), "duplicate rows"
        assert set(rows) == want, f"{len(want - set(rows))} pages missing"
    finally:
        w.stop()


def _waits(cluster: RedisCluster, port: int) -> int:
    c = cluster.node_clients()[port]
    try:
        return int(c.info("commandstats").get("cmdstat_wait", {}).get("calls", 0))
    finally:
        c.close()


def test_a_replicated_write_waits_for_a_replica_but_not_on_a_master_without_one(cluster: RedisCluster,
                                                                                tmp_path: Path) -> None:
    client = connect(cluster.url)
    w = ReplicatedWrite(client, "{a}k")
    w.pipe.set("{a}k", "1")
    assert w.execute() == [True]  # the WAIT's own reply is not the caller's
    home = cluster.master_for_key("{a}k")
    assert _waits(cluster, home) == 1 and w.node not in ReplicatedWrite._no_replica_until
    replica = next(p for p in cluster.live_ports() if cluster.replica_of(p) == home)
    on_replica = redis.Redis(port=replica)
    on_replica.execute_command("READONLY")  # a replica answers reads of its master's slots then
    assert on_replica.get("{a}k") == b"1"  # WAIT returned once the replica had it
    on_replica.close()
    with RedisCluster(masters=3, replicas=0, root=tmp_path / "bare") as bare:
        lone = connect(bare.url)
        for _ in range(3):
            w = ReplicatedWrite(lone, "{a}k")
            w.pipe.set("{a}k", "1")
            assert w.execute() == [True]
        # The first WAIT timed out (no replica); the next writes went without one.
        assert _waits(bare, bare.master_for_key("{a}k")) == 1
