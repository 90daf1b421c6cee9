"""A message a stage cannot handle is a counted failure; the worker goes on."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import redis

from crawler import jobs
from crawler.celeryapp import tasks
from crawler.config.settings import Settings
from crawler.testweb import TestWeb
from tests.conftest import Workers, wait_done


def test_malformed_message_is_counted_and_the_worker_goes_on(make_web: Callable[..., TestWeb], workers: Workers,
                                                             r: redis.Redis, tmp_path: Path) -> None:
    web = make_web(2, 10)
    workers.start("w", "shard-0,shard-1,shard-2,shard-3")
    job_id = jobs.submit(r, Settings.from_env(store=f"sqlite:///{tmp_path}/c.db"), web.seeds())
    with tasks.app.connection_for_write(workers.redis_url) as conn:
        for bad in ([{"no": "fields"}], "not a list of pages"):
            tasks.parse_task.apply_async(args=(job_id, 0, "tok", bad), queue="shard-0", connection=conn)
    st = wait_done(r, job_id)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and st["counters"].get("task_failed:crawler.parse", 0) < 2:
        time.sleep(0.1)
        st = jobs.status(r, job_id)
    assert st["counters"]["task_failed:crawler.parse"] == 2
    assert st["counters"]["stored"] == len(web.reachable_urls())  # the crawl itself was unharmed
    assert workers.procs["w"].poll() is None
