"""Parse and store need no host locality, so they go to one queue that every shard worker also
consumes: a worker whose own shard has run dry takes them for the others."""

from __future__ import annotations

import time
from pathlib import Path

import redis

from crawler import jobs
from crawler.celeryapp import tasks
from crawler.config.settings import Settings
from crawler.frontier import Entry
from crawler.frontier.sharding import SHARED_QUEUE, shard_of_url
from crawler.stages.messages import failed_page
from crawler.store import open_store
from tests.conftest import Workers


def _stored(store_url: str, db: Path, job_id: str, timeout: float = 20.0) -> list[dict[str, object]]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if db.exists():
            rows = list(open_store(store_url).pages(job_id))
            if rows:
                return rows
        time.sleep(0.1)
    return []


def test_a_worker_of_one_shard_stores_pages_of_another(workers: Workers, r: redis.Redis, tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    store_url = f"sqlite:///{db}"
    seed = next(u for i in range(1, 50) if shard_of_url(u := f"http://127.0.1.{i}:9/", 2) == 1)
    # Nobody serves shard 1: only a worker of shard 0 taking from the shared queue can store this.
    job_id = jobs.submit(r, Settings.from_env(store=store_url, shards=2), [seed])
    workers.start("w0", "shard-0")
    page = failed_page(Entry(seed).encode(), "connect")
    with tasks.app.connection_for_write(workers.redis_url) as conn:
        tasks.store_task.apply_async(args=(job_id, 1, "tok", [page.to_json()]), queue=SHARED_QUEUE, connection=conn)
    rows = _stored(store_url, db, job_id)
    assert [(p["url"], p["error"]) for p in rows] == [(seed, "connect")]
