"""A crawl whose Redis (broker and state alike), or whose broker alone, is a master under Sentinel:
the master is killed with SIGKILL mid-crawl, the sentinels promote its replica, and the crawl
finishes by itself with every page stored once. Real processes throughout: a master, a replica and three sentinels on
loopback ports of their own, real Celery workers, a loopback web."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis

from crawler import jobs
from crawler.config.settings import Settings
from crawler.frontier import Frontier
from crawler.local.redis_cluster import RedisCluster
from crawler.local.redis_server import RedisServer, find_redis_server, free_port
from crawler.state import conn, keys
from crawler.state.conn import connect
from crawler.store import open_store
from crawler.testweb import TestWeb
from tests.conftest import Workers, wait_done

pytestmark = pytest.mark.chaos

MASTER = "crawlmaster"
# Short leases and visibility so work lost with the master comes back within seconds.
FAST_RECOVERY = {"CRAWLER_LEASE_TIMEOUT": "4", "CRAWLER_VISIBILITY_TIMEOUT": "12", "CRAWLER_TASK_TIME_LIMIT": "10",
                 "CRAWLER_SENTINEL_MASTER": MASTER}


@dataclass
class SentinelGroup:
    """One master, one replica and three sentinels watching them, each in a directory of its own."""

    root: Path
    binary: str = field(default_factory=lambda: find_redis_server().path)
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    ports: dict[str, int] = field(default_factory=dict)

    def _run(self, name: str, args: list[str]) -> None:
        d = self.root / name
        d.mkdir(parents=True, exist_ok=True)
        self.procs[name] = subprocess.Popen([self.binary, *args], cwd=d, stdout=subprocess.DEVNULL,
                                            stderr=subprocess.DEVNULL, start_new_session=True)

    def _server(self, name: str, *extra: str) -> None:
        port = self.ports[name] = free_port()
        d = self.root / name
        self._run(name, ["--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                         "--dir", str(d), "--logfile", str(d / "redis.log"), *extra])
        _wait_answer(port)

    def start(self) -> SentinelGroup:
        self._server("master")
        self._server("replica", "--replicaof", "127.0.0.1", str(self.ports["master"]))
        for i in range(3):
            name = f"sentinel{i}"
            port = self.ports[name] = free_port()
            d = self.root / name
            d.mkdir(parents=True, exist_ok=True)
            conf = d / "sentinel.conf"  # a sentinel rewrites its own file: one each
            conf.write_text(f"port {port}\nbind 127.0.0.1\ndir {d}\nlogfile {d / 'sentinel.log'}\n"
                            f"sentinel monitor {MASTER} 127.0.0.1 {self.ports['master']} 2\n"
                            f"sentinel down-after-milliseconds {MASTER} 1000\n"
                            f"sentinel failover-timeout {MASTER} 4000\n"
                            f"sentinel parallel-syncs {MASTER} 1\n")
            self._run(name, [str(conf), "--sentinel"])
            _wait_answer(port)
        self.wait_synced()
        return self

    @property
    def url(self) -> str:
        return ";".join(f"sentinel://127.0.0.1:{self.ports[f'sentinel{i}']}" for i in range(3)) + "/0"

    def master_port(self) -> int:
        s = redis.Redis(port=self.ports["sentinel0"], socket_timeout=2)
        try:
            return int(s.sentinel_get_master_addr_by_name(MASTER)[1])
        finally:
            s.close()

    def wait_synced(self, timeout: float = 20.0) -> None:
        """Until the replica follows the master and every sentinel knows both and each other."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                rep = redis.Redis(port=self.ports["replica"], socket_timeout=2).info("replication")
                known = [redis.Redis(port=self.ports[f"sentinel{i}"], socket_timeout=2).sentinel_master(MASTER)
                         for i in range(3)]
                if rep.get("master_link_status") == "up" and all(
                        int(m["num-slaves"]) >= 1 and int(m["num-other-sentinels"]) >= 2 for m in known):
                    return
            except redis.RedisError:
                pass
            time.sleep(0.1)
        raise TimeoutError("the sentinel group did not settle")

    def kill_master(self) -> None:
        p = self.procs["master"]
        p.send_signal(signal.SIGKILL)  # no shutdown, no last word to the replica
        p.wait()

    def stop(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(5)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()


def _wait_answer(port: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if redis.Redis(port=port, socket_connect_timeout=0.5, socket_timeout=1).ping():
                return
        except redis.RedisError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing answers on port {port}")


@pytest.fixture
def sentinels(tmp_path: Path) -> Iterator[SentinelGroup]:
    group = SentinelGroup(tmp_path / "redis")
    try:
        yield group.start()
    finally:
        group.stop()


def test_a_client_of_the_sentinel_url_follows_the_master_through_a_failover(sentinels: SentinelGroup) -> None:
    client = connect(sentinels.url, sentinel_master=MASTER)
    client.set("k", "before")
    assert int(client.info("server")["tcp_port"]) == sentinels.ports["master"]
    redis.Redis(port=sentinels.ports["master"]).wait(1, 2000)  # the replica has it
    sentinels.kill_master()
    deadline = time.monotonic() + 30
    while sentinels.master_port() != sentinels.ports["replica"]:
        assert time.monotonic() < deadline, "no failover"
        time.sleep(0.2)
    while True:  # the first calls after the failover may still find the old address dead
        try:
            assert client.get("k") == b"before"
            client.set("k", "after")
            break
        except redis.ConnectionError:
            assert time.monotonic() < deadline
            time.sleep(0.2)
    assert int(client.info("server")["tcp_port"]) == sentinels.ports["replica"]


def test_a_crawl_survives_the_loss_of_its_master(sentinels: SentinelGroup, make_web, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    web: TestWeb = make_web(3, 200)
    want = web.reachable_urls()
    monkeypatch.setenv("CRAWLER_REDIS_URL", sentinels.url)
    monkeypatch.setenv("CRAWLER_SENTINEL_MASTER", MASTER)
    w = Workers(sentinels.url, tmp_path)
    client = connect(sentinels.url, sentinel_master=MASTER)
    store_url = f"sqlite:///{tmp_path / 'crawl.db'}"
    try:
        job_id = _crawl_a_third(w, client, FAST_RECOVERY, web, store_url)
        sentinels.kill_master()
        down = time.monotonic()
        st = _wait_done_across_failover(client, job_id, timeout=120)
        print(f"\nmaster kill -9: promoted {sentinels.master_port() == sentinels.ports['replica']}, "
              f"finished {time.monotonic() - down:.1f}s after the master went down; counters {st['counters']}")
        assert sentinels.master_port() == sentinels.ports["replica"]
        _assert_complete_once(w, store_url, job_id, want)
    finally:
        w.stop()


def test_a_crawl_survives_the_loss_of_its_brokers_master(sentinels: SentinelGroup, make_web, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The broker apart from the crawl state (``CRAWLER_BROKER_URL``, its master named in the
    URL): messages the dead master had not replicated come back from leases and link batches."""
    web: TestWeb = make_web(3, 150)
    want = web.reachable_urls()
    state = RedisServer().start()
    broker_url = f"{sentinels.url}#{MASTER}"
    monkeypatch.setenv("CRAWLER_REDIS_URL", state.url)
    monkeypatch.setenv("CRAWLER_BROKER_URL", broker_url)
    w = Workers(state.url, tmp_path)
    client = connect(state.url)
    store_url = f"sqlite:///{tmp_path / 'crawl.db'}"
    env = {**FAST_RECOVERY, "CRAWLER_BROKER_URL": broker_url, "CRAWLER_SENTINEL_MASTER": "not-the-brokers"}
    try:
        job_id = _crawl_a_third(w, client, env, web, store_url)
        sentinels.kill_master()
        down = time.monotonic()
        st = wait_done(client, job_id, timeout=120)  # the state Redis never went away
        print(f"\nbroker master kill -9: finished {time.monotonic() - down:.1f}s after it went down; "
              f"counters {st['counters']}")
        assert sentinels.master_port() == sentinels.ports["replica"]
        _assert_complete_once(w, store_url, job_id, want)
        # The promoted replica carried the work after the failover; the state Redis never did.
        promoted = redis.Redis(port=sentinels.ports["replica"])
        assert int(promoted.info("commandstats").get("cmdstat_brpop", {}).get("calls", 0)) > 0
        assert "cmdstat_brpop" not in redis.Redis(port=state.port).info("commandstats")
    finally:
        w.stop()
        state.stop()


def test_a_crawl_on_a_cluster_survives_a_state_master_then_its_brokers_master_killed(
        sentinels: SentinelGroup, make_web, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The state on a Redis Cluster (the job's frontier split over its masters, the default
    there) and the broker under Sentinel: the master holding a part of the frontier is killed
    with SIGKILL mid-crawl, then, once its replica serves, the broker's master. Both replicas
    are promoted and the crawl ends by itself with every page stored once."""
    web: TestWeb = make_web(4, 120)
    want = web.reachable_urls()
    broker_url = f"{sentinels.url}#{MASTER}"
    store_url = f"sqlite:///{tmp_path / 'crawl.db'}"
    conn._no_replica_until.clear()  # an earlier test's master on a port used again
    with RedisCluster(root=tmp_path / "cluster") as cluster:
        monkeypatch.setenv("CRAWLER_REDIS_URL", cluster.url)
        monkeypatch.setenv("CRAWLER_BROKER_URL", broker_url)
        w = Workers(cluster.url, tmp_path)
        client = connect(cluster.url)
        try:
            for name, queues in (("w0", "shard-0,shard-1,shared"), ("w1", "shard-2,shard-3,shared")):
                w.start(name, queues, env={**FAST_RECOVERY, "CRAWLER_BROKER_URL": broker_url})
            job_id = jobs.submit(client, Settings.from_env(shards=4, per_host=1, delay=0.05, concurrency=16,
                                                           store=store_url), web.seeds())
            assert Frontier(client).split(job_id) == 4

            def stored_at_least(n: int) -> None:
                deadline = time.monotonic() + 90
                while jobs.status(client, job_id)["counters"].get("stored", 0) < n:
                    assert time.monotonic() < deadline, jobs.status(client, job_id)
                    time.sleep(0.05)

            stored_at_least(len(want) // 4)
            home = cluster.master_for_key(keys.meta(Frontier(client).spaces(job_id)[0]))
            cluster.kill(home)
            cluster.wait_failover(home)
            stored_at_least(len(want) // 2)
            sentinels.kill_master()
            st = _wait_done_across_failover(client, job_id, timeout=180)
            assert st["status"] == "done", st
            assert sentinels.master_port() == sentinels.ports["replica"]
            _assert_complete_once(w, store_url, job_id, want)
        finally:
            w.stop()


def _crawl_a_third(w: Workers, client: redis.Redis, env: dict[str, str], web: TestWeb, store_url: str) -> str:
    """Two workers of both shards on a job of ``web``, returned once a third of it is stored."""
    for n in ("w0", "w1"):
        w.start(n, "shard-0,shard-1", env=env)
    job_id = jobs.submit(client, Settings.from_env(shards=2, per_host=4, concurrency=32, store=store_url),
                         web.seeds())
    deadline = time.monotonic() + 60
    while jobs.status(client, job_id)["counters"].get("stored", 0) < len(web.reachable_urls()) // 3:
        assert time.monotonic() < deadline, "the crawl did not get going"
        time.sleep(0.05)
    return job_id


def _assert_complete_once(w: Workers, store_url: str, job_id: str, want: set[str]) -> None:
    rows = [p["url"] for p in open_store(store_url).pages(job_id)]
    assert len(rows) == len(set(rows)), "duplicate rows"
    assert set(rows) == want
    dead = {n: p.returncode for n, p in w.procs.items() if p.poll() is not None}
    assert not dead, f"workers exited: {dead}"


def _wait_done_across_failover(client: redis.Redis, job_id: str, timeout: float) -> dict[str, object]:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return wait_done(client, job_id, timeout=max(1.0, deadline - time.monotonic()))
        except redis.ConnectionError:  # the old master, until the client asks the sentinels again
            assert time.monotonic() < deadline, "Redis never came back"
            time.sleep(0.2)
