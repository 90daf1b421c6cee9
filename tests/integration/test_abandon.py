"""A URL whose lease keeps expiring (its worker dies every time) is stored as `lease_expired`
after max_attempts, instead of going round for ever."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import redis

from crawler import jobs, stages
from crawler.config.settings import Settings
from crawler.frontier.dispatcher import Dispatcher
from crawler.stages.messages import failed_page, groups_from_json


def test_lease_expiring_max_attempts_times_is_stored_as_failed(r: redis.Redis, tmp_path: Path) -> None:
    settings = Settings.from_env(store=f"sqlite:///{tmp_path}/c.db", max_attempts=2, shards=1)
    job_id = jobs.submit(r, settings, ["http://never-fetched.example/"])
    fetches: list[tuple[str, int, str, list[str]]] = []
    failed: list[tuple[str, int, str, list[str]]] = []
    d = Dispatcher(r, [0], lambda *a: fetches.append(a), lambda *a: failed.append(a))
    lease = settings.lease_timeout
    now = time.time()
    d.tick(now)  # dispatched; nobody ever finishes it
    d._last_reap.clear()
    d.tick(now + lease + 1)  # expired once: back to its queue, dispatched again
    assert len(fetches) == 2 and failed == []
    d._last_reap.clear()
    d.tick(now + 2 * lease + 2)  # expired twice = max_attempts: given up
    assert len(fetches) == 2 and len(failed) == 1
    _job, shard, token, entries = failed[0]
    assert shard == 0
    ctx = stages.Context.default(r)
    stages.store_stage(ctx, jobs.load(r, job_id), token, [failed_page(e, "lease_expired")
                                                             for e in entries])
    ctx.close()
    rows = sqlite3.connect(tmp_path / "c.db").execute("SELECT url, error, status FROM pages").fetchall()
    assert rows == [("http://never-fetched.example/", "lease_expired", None)]
    st = jobs.status(r, job_id)
    assert st["status"] == "done" and st["counters"]["lease_expired"] == 2


def test_a_lost_link_batch_is_sent_again_and_admitted_once(r: redis.Redis, tmp_path: Path) -> None:
    """kombu can lose a message taken off the queue by a worker killed before it recorded it as
    unacknowledged; a link batch lost that way would hold its job open for ever."""
    settings = Settings.from_env(store=f"sqlite:///{tmp_path}/c.db", shards=1)
    job_id = jobs.submit(r, settings, ["http://seed.example/"])
    links = [["http://seed.example/a", 1, "http://seed.example/"]]
    ctx = stages.Context.default(r)
    ctx.frontier.expect(job_id, {"t:0": links}, settings.lease_timeout)  # its dedup message never arrives
    resent: list[tuple[str, int, str, list[object]]] = []
    d = Dispatcher(r, [0], lambda *a: None, lambda *a: None, lambda *a: resent.append(a))
    now = time.time()
    d.tick(now)
    assert resent == []  # not overdue yet
    d._last_reap.clear()
    d.tick(now + settings.lease_timeout + 1)
    assert resent == [(job_id, 0, "t:0", links)]
    job = jobs.load(r, job_id)
    assert stages.dedup_stage(ctx, job, "t:0", groups_from_json(links)) == ["http://seed.example/a"]
    assert stages.dedup_stage(ctx, job, "t:0", groups_from_json(links)) == []  # the late original: ignored
    assert r.zcard(f"c:{{{job_id}}}:pend") == 0 and r.hlen(f"c:{{{job_id}}}:pendb") == 0
    ctx.close()


def test_an_idle_dispatcher_stops_at_once(r: redis.Redis) -> None:
    """With no job it blocks on its wake lists for seconds; stop() must not wait that out (a
    worker's warm shutdown joins this thread)."""
    d = Dispatcher(r, [0], lambda *a: None, lambda *a: None)
    thread = threading.Thread(target=d.run, daemon=True)
    thread.start()
    time.sleep(0.3)  # into its blocking wait
    t0 = time.monotonic()
    d.stop()
    thread.join(timeout=3)
    assert not thread.is_alive()
    assert time.monotonic() - t0 < 1.0
