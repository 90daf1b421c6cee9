"""Task messages put on their lists directly (``crawler.celeryapp.publish``) are what Celery's
own ``apply_async`` puts there, and a real worker runs them."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable
from pathlib import Path

import redis

from crawler import jobs
from crawler.celeryapp import tasks
from crawler.celeryapp.app import app
from crawler.celeryapp.publish import Publisher
from crawler.config.settings import Settings
from crawler.frontier.sharding import SHARED_QUEUE
from crawler.testweb import TestWeb
from tests.conftest import Workers, wait_done

# Differ from message to message, or name the sender.
PER_MESSAGE = {"id", "root_id", "parent_id", "origin", "correlation_id", "delivery_tag", "reply_to"}


def _shape(raw: bytes) -> tuple[dict[str, object], list[object]]:
    m = json.loads(raw)
    flat = {k: v for k, v in m.items() if k not in ("headers", "properties", "body")}
    flat.update({f"h.{k}": v for k, v in m["headers"].items() if k not in PER_MESSAGE})
    flat.update({f"p.{k}": v for k, v in m["properties"].items() if k not in PER_MESSAGE})
    return flat, json.loads(base64.b64decode(m["body"]))


def test_a_message_is_what_apply_async_would_send(r: redis.Redis, redis_url: str) -> None:
    args = ("job", 3, "tok", [{"url": "http://a.example/", "n": 1}])
    with app.connection_for_write(redis_url) as conn:
        tasks.parse_task.apply_async(args=args, queue="q-celery", routing_key="q-celery", connection=conn,
                                     argsrepr="('job', 1 items)")
    sent = Publisher(app.conf.task_time_limit, app.conf.task_soft_time_limit).message(
        "crawler.parse", "q-ours", args, argsrepr="('job', 1 items)")
    Publisher.send(r, [sent])
    theirs, their_body = _shape(r.lindex("q-celery", 0))
    ours, our_body = _shape(r.lindex("q-ours", 0))
    theirs.pop("p.delivery_info"), ours.pop("p.delivery_info")
    # apply_async copies argsrepr into the properties too; workers read it from the headers.
    theirs.pop("p.argsrepr", None)
    assert ours == theirs
    assert our_body == their_body
    assert json.loads(r.lindex("q-ours", 0))["properties"]["delivery_info"] == {"exchange": "",
                                                                               "routing_key": "q-ours"}


def test_a_worker_runs_the_messages_and_its_shard_queue_first(make_web: Callable[..., TestWeb], workers: Workers,
                                                              r: redis.Redis, tmp_path: Path) -> None:
    web = make_web(1, 5)
    job_id = jobs.submit(r, Settings.from_env(store=f"sqlite:///{tmp_path}/c.db", shards=1), web.seeds())
    # Bad messages in one round trip, the shared queue's first, then the worker: all are read,
    # refused and counted, the shard queue's (fetch and dedup work) all taken first; in turn
    # (kombu's default), the page would come second.
    bad_page = [{"v": 2, "url": web.seeds()[0]}]
    bad_group = [{"v": 2, "urls": []}]
    tasks._publish(tasks._message(tasks.store_task, SHARED_QUEUE, (job_id, 0, "tok", bad_page)),
                   tasks._message(tasks.dedup_task, "shard-0", (job_id, "tok:0", bad_group)),
                   tasks._message(tasks.dedup_task, "shard-0", (job_id, "tok2:0", bad_group)))
    workers.start("w", "shard-0")
    wait_done(r, job_id)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and jobs.status(r, job_id)["counters"].get("bad_message", 0) < 3:
        time.sleep(0.1)
    c = jobs.status(r, job_id)["counters"]
    assert c["bad_message"] == 3 and c["stored"] == len(web.reachable_urls())
    refused = [line.split(" message has schema")[0].rsplit(" ", 1)[-1]
               for line in (workers.log_dir / "w.log").read_text().splitlines() if "has schema version 2" in line]
    assert refused == ["group", "group", "page"], refused
