"""Task queues on brokers of their own (``CRAWLER_BROKER_URL``): the crawl state on one private
Redis, the queues of shard N on the (N mod 2)-th of two more, real Celery workers, a loopback web.
Each broker must carry messages and the state Redis none."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from crawler import jobs
from crawler.config.settings import Settings
from crawler.local.redis_server import RedisServer
from crawler.state import queues
from crawler.state.conn import connect
from crawler.store import open_store
from crawler.testweb import TestWeb
from tests.conftest import ROOT, Workers, wait_done


@pytest.fixture
def servers() -> Iterator[dict[str, RedisServer]]:
    """Three private servers: the state, broker 0 and broker 1 (not the session's shared Redis,
    whose command counts other tests would move)."""
    made: dict[str, RedisServer] = {}
    try:
        for name in ("state", "b0", "b1"):
            made[name] = RedisServer().start()
        yield made
    finally:
        for s in made.values():
            s.stop()


def _calls(server: RedisServer, command: str) -> int:
    c = redis.Redis(port=server.port)
    try:
        return int(c.info("commandstats").get(f"cmdstat_{command}", {}).get("calls", 0))
    finally:
        c.close()


def _queue_keys(server: RedisServer) -> list[str]:
    c = redis.Redis(port=server.port)
    try:
        names = [k.decode() for k in c.scan_iter(count=1000)]
    finally:
        c.close()
    return sorted(n for n in names if n.startswith(("shard-", "_kombu", "unacked")) or n in ("shared", "render"))


def test_a_crawl_with_its_queues_split_over_two_brokers(servers: dict[str, RedisServer], make_web,
                                                        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    web: TestWeb = make_web(4, 60)
    want = web.reachable_urls()
    state, b0, b1 = servers["state"], servers["b0"], servers["b1"]
    broker_url = f"{b0.url},{b1.url}"
    monkeypatch.setenv("CRAWLER_REDIS_URL", state.url)
    monkeypatch.setenv("CRAWLER_BROKER_URL", broker_url)
    w = Workers(state.url, tmp_path)
    client = connect(state.url)
    store_url = f"sqlite:///{tmp_path / 'crawl.db'}"
    before = {n: (_calls(s, "lpush"), _calls(s, "brpop")) for n, s in servers.items()}
    try:
        # One worker per broker: shard-0 on broker 0, shard-1 on broker 1, neither seeing the other's.
        w.start("w0", "shard-0", env={"CRAWLER_BROKER_URL": broker_url})
        w.start("w1", "shard-1", env={"CRAWLER_BROKER_URL": broker_url})
        job_id = jobs.submit(client, Settings.from_env(shards=2, per_host=2, concurrency=16, store=store_url),
                             web.seeds())
        st = wait_done(client, job_id, timeout=120)
        assert st["status"] == "done", st
        rows = [p["url"] for p in open_store(store_url).pages(job_id)]
        assert len(rows) == len(set(rows)), "duplicate rows"
        assert set(rows) == want
        # Both shards fetched: each worker's log names its fetch tasks.
        for n in ("w0", "w1"):
            assert "crawler.fetch" in (tmp_path / f"{n}.log").read_text(), f"{n} fetched nothing"
    finally:
        w.stop()
    after = {n: (_calls(s, "lpush"), _calls(s, "brpop")) for n, s in servers.items()}
    pushed = {n: after[n][0] - before[n][0] for n in servers}
    popped = {n: after[n][1] - before[n][1] for n in servers}
    print(f"\nLPUSH per server {pushed}, BRPOP per server {popped}")
    for n in ("b0", "b1"):
        assert pushed[n] > 0 and popped[n] > 0, f"broker {n} carried nothing: {pushed}, {popped}"
    assert popped["state"] == 0, "a worker consumed from the state Redis"
    assert _queue_keys(state) == [], "task queues on the state Redis"
    assert any(k.startswith("_kombu") for k in _queue_keys(b0)) and any(k.startswith("_kombu") for k in _queue_keys(b1))


def test_a_worker_of_shards_on_two_brokers_stops_with_one_line(servers: dict[str, RedisServer]) -> None:
    env = {"CRAWLER_REDIS_URL": servers["state"].url, "CRAWLER_BROKER_URL": f"{servers['b0'].url},{servers['b1'].url}",
           "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-m", "celery", "-A", "crawler", "worker", "-Q", "shard-0,shard-1",
                           "--pool", "solo", "--without-gossip", "--without-mingle"],
                          env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr[-2000:]
    lines = [ln for ln in done.stderr.splitlines() if ln.startswith("crawler:")]
    assert len(lines) == 1 and "must share a broker" in lines[0] and "shard-0" in lines[0] and "shard-1" in lines[0]


def test_messages_of_a_shard_that_went_away_move_to_its_standbys_broker(servers: dict[str, RedisServer],
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """``crawler.frontier.rebalance`` drains a gone shard's queue into another: across brokers too."""
    b0, b1 = (redis.Redis(port=servers[n].port) for n in ("b0", "b1"))
    state = redis.Redis(port=servers["state"].port)
    monkeypatch.setenv("CRAWLER_BROKER_URL", f"{servers['b0'].url},{servers['b1'].url}")
    b1.lpush("shard-3", "m1", "m2")  # shard 3: broker 1; shard 2: broker 0
    assert queues.move_all(state, "shard-3", "shard-2") == 2
    assert b0.lrange("shard-2", 0, -1) == [b"m2", b"m1"] and not b1.exists("shard-3")
    b1.lpush("shard-3", "m3")
    assert queues.move_all(state, "shard-3", "shard-1") == 1  # one broker: LMOVE
    assert b1.lrange("shard-1", 0, -1) == [b"m3"]
    assert state.dbsize() == 0
    monkeypatch.delenv("CRAWLER_BROKER_URL")
    state.lpush("shard-5", "m4")
    assert queues.move_all(state, "shard-5", "shard-0") == 1 and state.lrange("shard-0", 0, -1) == [b"m4"]


def test_a_channel_closed_after_its_broker_connection_was_released_keeps_the_worker_and_its_message(
        redis_url: str, r: redis.Redis) -> None:
    # Found by the cluster + Sentinel chaos test: a worker exited ("Unrecoverable error:
    # AttributeError ... 'hostname'") when its broker's master was killed while it held a message.
    from kombu import Connection, Exchange, Queue

    from crawler.celeryapp import kombu_compat

    kombu_compat.install()
    with Connection(redis_url) as conn:
        channel = conn.default_channel
        queue = Queue("compat-q", Exchange("compat-q", type="direct"), routing_key="compat-q", channel=channel)
        queue.declare()
        conn.Producer(channel).publish({"n": 1}, exchange="compat-q", routing_key="compat-q")
        assert queue.get(no_ack=False) is not None
        conn.transport.client = None  # as Connection.collect leaves it once the broker is gone
        conn.maybe_close_channel(channel)  # raised AttributeError, which ended the worker
    assert r.hlen("unacked") == 1  # still the broker's, restored after the visibility timeout
