"""A URL whose lease keeps expiring (its worker dies every time) is stored as `lease_expired`
after max_attempts, instead of going round for ever."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import redis

from crawler import jobs, pipeline
from crawler.frontier.dispatcher import Dispatcher
from crawler.settings import Settings


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
    ctx = pipeline.Context(r)
    pipeline.store_stage(ctx, jobs.load(r, job_id), token, [pipeline.failed_page(e, "lease_expired")
                                                             for e in entries])
    ctx.close()
    rows = sqlite3.connect(tmp_path / "c.db").execute("SELECT url, error, status FROM pages").fetchall()
    assert rows == [("http://never-fetched.example/", "lease_expired", None)]
    st = jobs.status(r, job_id)
    assert st["status"] == "done" and st["counters"]["lease_expired"] == 2
