"""A message of another schema version (a worker of another release sent it) is refused by
name and counted; the worker goes on."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import redis

from crawler import jobs
from crawler.celeryapp import tasks
from crawler.celeryapp.app import app
from crawler.config.settings import Settings
from crawler.testweb import TestWeb
from tests.conftest import Workers, wait_done


def test_a_message_of_another_version_is_counted_as_bad_and_the_worker_goes_on(
        make_web: Callable[..., TestWeb], workers: Workers, r: redis.Redis, tmp_path: Path) -> None:
    web = make_web(1, 5)
    workers.start("w", "shard-0,shard-1,shard-2,shard-3")
    job_id = jobs.submit(r, Settings.from_env(store=f"sqlite:///{tmp_path}/c.db"), web.seeds())
    with app.connection_for_write(workers.redis_url) as conn:
        tasks.store_task.apply_async(args=(job_id, 0, "tok", [{"v": 2, "url": web.seeds()[0]}]), queue="shard-0",
                                connection=conn)
        group = {"v": 2, "referrer": "http://a.example/", "depth": 1, "urls": ["http://a.example/x"]}
        tasks.dedup_task.apply_async(args=(job_id, "tok:0", [group]),
                                queue="shard-0", connection=conn)
    wait_done(r, job_id)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and jobs.status(r, job_id)["counters"].get("bad_message", 0) < 2:
        time.sleep(0.1)
    c = jobs.status(r, job_id)["counters"]
    assert c["bad_message"] == 2 and c["task_failed:crawler.store"] == 1 and c["task_failed:crawler.dedup"] == 1
    assert c["stored"] == len(web.reachable_urls())
    log = (workers.log_dir / "w.log").read_text()
    assert "page message has schema version 2; this worker speaks version 1" in log
    assert workers.procs["w"].poll() is None
