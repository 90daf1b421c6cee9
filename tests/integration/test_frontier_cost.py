"""What a page costs the frontier in Redis commands, and the records the cheaper scripts rely on:
fresh leases left alone, one wake per shard, addresses' waiters flagged in their counts, hosts
parked without a look at their queues."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import redis

from crawler.frontier import Entry, Fetched, Frontier
from crawler.frontier.core import FRESH, new_token, token_time
from crawler.frontier.lua import PARKED
from crawler.local.redis_server import RedisServer
from crawler.state import keys
from crawler.urls import host_key

JOB = "job-c"


def _start(r: redis.Redis) -> Frontier:
    r.hset(keys.meta(JOB), mapping={"status": "running"})
    r.sadd(keys.JOBS, JOB)
    return Frontier(r)


def _calls(r: redis.Redis) -> int:
    return sum(int(v["calls"]) for v in r.info("commandstats").values())


@pytest.fixture
def own() -> Iterator[redis.Redis]:
    """A Redis of this test's own: its command counts are this test's alone."""
    with RedisServer() as server:
        client = redis.Redis.from_url(server.url)
        yield client
        client.close()


def test_a_page_costs_few_frontier_commands(own: redis.Redis) -> None:
    # The defaults' cycle per page, over 4 hosts on 4 addresses: dispatch, confirm, fetched,
    # the renewals of parse and store, release. It took 46 commands a page before the scripts
    # were cut down (issue 29), 29.8 before each script read and wrote a record once per call
    # for all its URLs, 11.6 after.
    f = _start(own)
    f.admit(JOB, [Entry(f"http://h{h}.test/p{i}") for h in range(4) for i in range(25)], 1, trusted=True)
    before = _calls(own)
    stored = rounds = 0
    while stored < 100 and rounds < 200:
        rounds += 1
        d = f.dispatch(JOB, 0, max_urls=64, per_host=1, delay=0.0, lease_timeout=60, concurrency=64, batch=32)
        leases = [(e.url, tok) for tok, es in d.batches() for e in es]
        assert len(leases) == 4  # one per host: each host's next URL waits for its last to end
        assert f.confirm(JOB, leases, 60) == [True] * 4
        f.fetched(JOB, [Fetched(u, t, 0.0, f"127.0.1.{u[8]}") for u, t in leases], lease_timeout=60, delay=0.0)
        for _stage in ("parse", "store"):
            f.renew(JOB, leases, 60, since=time.time())
        stored += f.release(JOB, leases, delay=0.0)
    per_page = (_calls(own) - before - 1) / stored  # the INFO that read them is one
    assert stored == 100
    assert per_page <= 14, per_page
    assert own.hlen(keys.host_inflight(JOB)) == 0 and own.hlen(keys.ip_inflight(JOB)) == 0
    assert own.zcard(keys.ready(JOB, 0)) == 0 and own.hlen(keys.leases(JOB)) == 0


def test_fresh_leases_are_left_alone_and_old_ones_renewed(r: redis.Redis) -> None:
    f = _start(r)
    f.admit(JOB, [Entry("http://a.test/1"), Entry("http://b.test/1")], 1)
    now = time.time()
    d = f.dispatch(JOB, 0, max_urls=10, per_host=1, delay=0, lease_timeout=60, concurrency=10, now=now)
    assert token_time(d.token) == pytest.approx(now, abs=0.002)
    leases = [(e.url, d.token) for e, _ in d.items]
    deadline = {u: r.zscore(keys.lease_expiry(JOB), u) for u, _ in leases}
    assert f.confirm(JOB, leases, 60) == [True, True]
    assert {u: r.zscore(keys.lease_expiry(JOB), u) for u, _ in leases} == deadline  # fresh: not renewed
    assert f.renew(JOB, leases, 60, since=now) == -1
    assert {u: r.zscore(keys.lease_expiry(JOB), u) for u, _ in leases} == deadline
    # Past ``FRESH`` of the timeout, both renew, and never shorten a lease.
    old = now - 60 * FRESH - 1
    assert f.renew(JOB, leases, 60, since=old) == 2
    assert all(r.zscore(keys.lease_expiry(JOB), u) > deadline[u] for u, _ in leases)  # type: ignore[operator]
    old_token = new_token(old)
    r.hset(keys.leases(JOB), "http://a.test/1", r.hget(keys.leases(JOB), "http://a.test/1").decode()  # type: ignore[union-attr]
           .replace(d.token, old_token))
    r.zadd(keys.lease_expiry(JOB), {"http://a.test/1": old + 60})
    assert f.confirm(JOB, [("http://a.test/1", old_token)], 60) == [True]
    assert r.zscore(keys.lease_expiry(JOB), "http://a.test/1") >= time.time() + 59  # type: ignore[operator]
    # The end of a fetch leaves a fresh lease as its dispatch set it, and renews an old one.
    r.zadd(keys.lease_expiry(JOB), {"http://a.test/1": old + 60})
    before = r.zscore(keys.lease_expiry(JOB), "http://b.test/1")
    f.fetched(JOB, [Fetched("http://b.test/1", d.token)], lease_timeout=60, delay=0)
    assert r.zscore(keys.lease_expiry(JOB), "http://b.test/1") == before
    f.fetched(JOB, [Fetched("http://a.test/1", old_token)], lease_timeout=60, delay=0)
    assert r.zscore(keys.lease_expiry(JOB), "http://a.test/1") >= time.time() + 59  # type: ignore[operator]
    assert r.hget(keys.leases(JOB), "http://a.test/1").split()[1] == b"d"  # type: ignore[union-attr]
    # Tokens of another form are always renewed.
    assert token_time("t1") is None


def test_hosts_waiting_on_an_address_go_when_it_frees(r: redis.Redis) -> None:
    f = _start(r)
    hosts = ["a.test", "b.test", "c.test"]
    r.hset(keys.host_ip(JOB), mapping=dict.fromkeys(hosts, "10.0.0.1"))
    f.admit(JOB, [Entry(f"http://{h}/{i}") for h in hosts for i in range(2)], 1)
    got: list[str] = []
    for _ in range(20):
        d = f.dispatch(JOB, 0, max_urls=10, per_host=2, per_ip=1, delay=0, lease_timeout=60, concurrency=10,
                       now=time.time())
        assert len(d.items) <= 1  # one request at the address at a time, over its three names
        if not d.items:
            break
        url = d.items[0][0].url
        got.append(url)
        if len(got) == 1:
            assert r.scard(keys.ip_wait(JOB, "10.0.0.1")) == 3  # all three names wait on the address
        f.fetched(JOB, [Fetched(url, d.token, 0.0, "10.0.0.1")], lease_timeout=60, delay=0)
        f.release(JOB, [(url, d.token)], delay=0)
    assert sorted(got) == sorted(f"http://{h}/{i}" for h in hosts for i in range(2))
    # Nothing is left of the counts or of the waiting flag.
    assert r.hlen(keys.ip_inflight(JOB)) == 0 and not r.exists(keys.ip_wait(JOB, "10.0.0.1"))
    assert r.zcard(keys.ready(JOB, 0)) == 0


def test_a_shard_has_one_wake_waiting_at_most(r: redis.Redis) -> None:
    f = _start(r)
    r.delete(keys.wake(0))
    for h in range(5):
        f.admit(JOB, [Entry(f"http://h{h}.test/")], 1)
    assert r.lrange(keys.wake(0), 0, -1) == [b"1"]


def test_a_parked_host_whose_queue_ran_dry_leaves_the_ready_set(r: redis.Redis) -> None:
    f = _start(r)
    f.admit(JOB, [Entry("http://a.test/1")], 1)
    d = f.dispatch(JOB, 0, max_urls=10, per_host=1, delay=0, lease_timeout=60, concurrency=10, now=time.time())
    assert r.zscore(keys.ready(JOB, 0), "a.test") == PARKED  # parked, its queue not looked at
    f.fetched(JOB, [Fetched("http://a.test/1", d.token)], lease_timeout=60, delay=0)
    assert r.zcard(keys.ready(JOB, 0)) == 0
    f.admit(JOB, [Entry("http://a.test/2")], 1)
    d = f.dispatch(JOB, 0, max_urls=10, per_host=1, delay=0, lease_timeout=60, concurrency=10, now=time.time())
    assert [e.url for e, _ in d.items] == ["http://a.test/2"]


def test_fetched_takes_the_delays_the_caller_just_set(r: redis.Redis) -> None:
    f = _start(r)
    f.admit(JOB, [Entry("http://a.test/1"), Entry("http://a.test/2")], 1)
    d = f.dispatch(JOB, 0, max_urls=10, per_host=1, delay=0, lease_timeout=60, concurrency=10, now=time.time())
    before = time.time()
    f.fetched(JOB, [Fetched("http://a.test/1", d.token)], lease_timeout=60, delay=0, delays={"a.test": 5.0})
    due = r.zscore(keys.ready(JOB, 0), "a.test")
    assert due is not None and before + 5 <= due <= time.time() + 5
    assert float(r.hget(keys.host_next(JOB), "a.test") or 0) == due


def test_the_callers_counters_are_written_with_the_scripts_own_and_once_per_batch(r: redis.Redis) -> None:
    f = _start(r)

    def cnt() -> dict[str, int]:
        return {k.decode(): int(v) for k, v in r.hgetall(keys.counters(JOB)).items()}

    r.zadd(keys.pending_links(JOB), {"b1": time.time() + 60})
    urls = [f"http://h{h}.test/{i}" for h in range(3) for i in range(2)]
    assert len(f.admit(JOB, [Entry(u) for u in urls], 1, token="b1", counts={"duplicates": 4})) == 6
    f.admit(JOB, [Entry(u) for u in urls], 1, token="b1", counts={"duplicates": 4})  # a redelivery
    c = cnt()
    assert (c["duplicates"], c["admitted"], c["open"], c["queued"]) == (4, 6, 6, 6)
    d = f.dispatch(JOB, 0, max_urls=10, per_host=1, delay=0, lease_timeout=60, concurrency=10)
    leases = [(e.url, d.token) for e, _ in d.items]
    assert len(leases) == 3
    f.fetched(JOB, [Fetched(u, t) for u, t in leases], lease_timeout=60, delay=0,
              counts={"fetched": 3, "bytes": 3_000_000_000_000_000, "failed": 0})
    c = cnt()
    assert (c["fetched"], c["bytes"], c["inflight"], c["held"], c["queued"]) == (3, 3 * 10**15, 0, 3, 3)
    assert "failed" not in c
    assert r.hincrby(keys.counters(JOB), "bytes", 1) == 3 * 10**15 + 1  # written as an integer
    assert {k.decode(): int(v) for k, v in r.hgetall(keys.host_fetched(JOB)).items()} == {
        "h0.test": 1, "h1.test": 1, "h2.test": 1}
    # A fetch whose lease expired meanwhile (leased again under another token) still asked its
    # host: the host's count has it, as the job's has; one sent to wait for a retry has not.
    f.fetched(JOB, [Fetched("http://h0.test/9", "stale-token"), Fetched("http://h1.test/9", "t", time.time() + 60)],
              lease_timeout=60, delay=0, counts={"fetched": 1})
    assert int(r.hget(keys.host_fetched(JOB), "h0.test") or 0) == 2
    assert int(r.hget(keys.host_fetched(JOB), "h1.test") or 0) == 1
    assert cnt()["fetched"] == 4 and cnt()["inflight"] == 0  # nothing of the stale lease freed
    assert f.release(JOB, leases, delay=0, counts={"items": 2}) == 3
    c = cnt()
    assert (c["stored"], c["open"], c["held"], c["items"]) == (3, 3, 0, 2)


def test_a_tasks_bodies_are_one_hash_read_and_dropped_beside_keys_of_their_own(own: redis.Redis) -> None:
    f = Frontier(own)
    before = _calls(own)
    refs = f.hold_bodies(JOB, "tok.0", {f"http://h.test/{i}": f"body {i}".encode() for i in range(5)}, 60)
    assert _calls(own) - before - 1 == 2  # HSET and EXPIRE, whatever the number of pages
    old = keys.body(JOB, "tok.0", "http://h.test/old")  # a body a worker from before kept
    own.set(old, b"old body")
    want = [refs["http://h.test/3"], "-", old, refs["http://h.test/0"], "",
            keys.body_ref(JOB, "tok.0", "http://h.test/9")]
    assert f.bodies(want) == [b"body 3", None, b"old body", b"body 0", None, None]
    assert 0 < own.ttl(keys.body_batch(JOB, "tok.0")) <= 60
    f.drop_bodies([*refs.values(), old])
    assert own.exists(keys.body_batch(JOB, "tok.0"), old) == 0


def test_urls_over_the_cap_in_one_call_are_staged_in_order(r: redis.Redis) -> None:
    # The first admission of a job looks up no host's staging number (none has one yet): the
    # URLs it stages still get one each, in order.
    f = _start(r)
    got = f.admit(JOB, [Entry(f"http://a.test/{i}") for i in range(5)], 1, queue_cap=2)
    assert got.spilled == 3 and r.llen(keys.host_queue(JOB, "a.test")) == 2
    assert [(seq, entry.split(" ")[-2]) for _, _, seq, entry in f.staged(JOB)] == \
        [(1, "http://a.test/2"), (2, "http://a.test/3"), (3, "http://a.test/4")]


def test_fetched_on_a_pipeline_asks_no_script_exists_and_survives_a_script_flush(own: redis.Redis) -> None:
    f = _start(own)
    f.admit(JOB, [Entry(f"http://a.test/{i}") for i in range(3)], 1)
    for flush in (False, True):
        d = f.dispatch(JOB, 0, max_urls=10, per_host=1, delay=0, lease_timeout=60, concurrency=10, now=time.time())
        (entry, _host), = d.items
        if flush:
            own.script_flush()  # as after a restart or a failover: the script must be loaded again
        before = own.info("commandstats")
        pipe = own.pipeline(transaction=False)
        pipe.hincrby(keys.counters(JOB), "mine", 1)
        f.fetched(JOB, [Fetched(entry.url, d.token)], lease_timeout=60, delay=0, pipe=pipe)
        after = own.info("commandstats")
        # Executed here, the caller's commands with it; the lease is now "fetched".
        assert int(own.hget(keys.counters(JOB), "mine") or 0) == 1 + flush
        assert own.hget(keys.leases(JOB), entry.url).split(b" ")[1] == b"d"
        asked = int(after.get("cmdstat_script|exists", {}).get("calls", 0)) - int(
            before.get("cmdstat_script|exists", {}).get("calls", 0))
        assert asked == 0
        f.release(JOB, [(entry.url, d.token)], delay=0)
    # With nothing fetched the caller's pipeline is executed all the same.
    pipe = own.pipeline(transaction=False)
    pipe.hincrby(keys.counters(JOB), "mine", 1)
    f.fetched(JOB, [], lease_timeout=60, delay=0, pipe=pipe)
    assert int(own.hget(keys.counters(JOB), "mine") or 0) == 3


def test_a_lone_hosts_next_url_goes_when_its_delay_ends_not_after_a_batch_window(r: redis.Redis, tmp_path) -> None:
    from crawler import jobs
    from crawler.config.settings import Settings
    from crawler.frontier.dispatcher import BATCH_WINDOW, Dispatcher

    # A URL at a time (host_run 1): with runs the host's queue would go in one task.
    settings = Settings.from_env(store=f"sqlite:///{tmp_path}/c.db", shards=1, host_run=1)
    job_id = jobs.submit(r, settings, ["http://lone.test/"])
    Frontier(r).admit(job_id, [Entry(f"http://lone.test/{i}") for i in range(3)], 1)
    sent: list[tuple[str, int, str, list[str]]] = []
    d = Dispatcher(r, [0], lambda *a: sent.append(a), lambda *a: None)
    now = time.time()
    d.tick(now)
    (_job, _shard, token, (entry,)), = sent
    # One request in flight: a wake's linger could gather no other completion.
    assert d._crowded is False
    # The page is fetched (and held for parse and store); the host's own delay is 4 ms.
    f = Frontier(r)
    f.fetched(job_id, [Fetched(Entry.decode(entry).url, token)], lease_timeout=60, delay=0,
              delays={"lone.test": 0.004})
    r.hincrby(keys.counters(job_id), "held", 1)
    wait = d.tick(time.time())
    if len(sent) == 1:  # else a loaded machine took more than the 4 ms: the host was due, and went
        # Woken when the host is due, not at the end of the batch window.
        assert wait <= 0.004 < BATCH_WINDOW, wait
        time.sleep(0.005)
        d.tick(time.time())
    assert len(sent) == 2


def test_a_call_of_thousands_of_urls_leases_fetches_and_stores_them_all(r: redis.Redis) -> None:
    # Past what Lua unpacks into one command (about 8,000 values): the scripts send in chunks.
    f = _start(r)
    f.admit(JOB, [Entry(f"http://big.test/{i}") for i in range(4100)], 1, trusted=True)
    d = f.dispatch(JOB, 0, max_urls=5000, per_host=5000, delay=0, lease_timeout=60, concurrency=5000)
    leases = [(e.url, d.token) for e, _ in d.items]
    assert len(leases) == 4100 and r.hlen(keys.leases(JOB)) == 4100
    assert all(f.confirm(JOB, leases, 60))
    f.fetched(JOB, [Fetched(u, t) for u, t in leases], lease_timeout=60, delay=0)
    assert f.renew(JOB, leases, 60) == 4100
    assert f.release(JOB, leases, delay=0) == 4100
    c = {k.decode(): int(v) for k, v in r.hgetall(keys.counters(JOB)).items()}
    assert (c["open"], c["inflight"], c["held"], c["queued"], c["stored"]) == (0, 0, 0, 0, 4100)
    assert r.hget(keys.meta(JOB), "status") == b"done"


def test_a_hosts_requests_from_two_shards_reschedule_it_in_both(r: redis.Redis) -> None:
    # While a shard's hosts move to its backup, one call may end a host's requests from both.
    f = _start(r)

    def admit(url: str, shard: int) -> None:
        f._call(f._admit, JOB, "", time.time(), 0, 0, 0, 0, "", 1, 0, 0, url, host_key(url), shard,
                Entry(url).encode())

    def dispatch(shard: int) -> tuple[str, list[str]]:
        d = f.dispatch(JOB, shard, max_urls=10, per_host=2, delay=0, lease_timeout=60, concurrency=10)
        return d.token, [e.url for e, _ in d.items]

    admit("http://h.test/1", 0)
    t0, got0 = dispatch(0)
    admit("http://h.test/2", 1)
    admit("http://h.test/3", 1)
    t1, got1 = dispatch(1)  # the host's second request: at its limit, parked in shard 1
    admit("http://h.test/4", 0)
    assert dispatch(0)[1] == []  # parked in shard 0 too
    assert r.zscore(keys.ready(JOB, 0), "h.test") == r.zscore(keys.ready(JOB, 1), "h.test") == PARKED
    f.fetched(JOB, [Fetched(got0[0], t0), Fetched(got1[0], t1)], lease_timeout=60, delay=0)
    assert r.zscore(keys.ready(JOB, 0), "h.test") < PARKED  # type: ignore[operator]
    assert r.zscore(keys.ready(JOB, 1), "h.test") < PARKED  # type: ignore[operator]
    assert dispatch(0)[1] == ["http://h.test/3", "http://h.test/4"]  # one queue per host, whichever shard


def test_a_release_that_requeues_its_host_keeps_the_hosts_delay(r: redis.Redis) -> None:
    f = _start(r)
    url = "http://d.test/a"
    f.admit(JOB, [Entry(url, depth=3)], 1, max_depth=3)
    d = f.dispatch(JOB, 0, max_urls=10, per_host=2, delay=2.0, lease_timeout=60, concurrency=10)
    f.admit(JOB, [Entry(url, depth=1)], 1, max_depth=3)  # a shorter path, found while it is leased
    f.release(JOB, [(url, d.token)], delay=2.0, max_depth=3)  # ended before its fetch: requeued
    assert r.llen(keys.host_queue(JOB, "d.test")) == 1
    due = r.zscore(keys.ready(JOB, 0), "d.test")
    assert due is not None and due >= float(r.hget(keys.host_next(JOB), "d.test") or 0) > time.time()
