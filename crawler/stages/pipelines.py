"""Item pipelines in the store stage: each item a store task newly records goes through the job's
pipelines once, even when the task is delivered again.

Before a batch's rows are written, the items of each page whose fetch is not stored yet go
through the pipelines, and what came out of each (the item to store, or ``-`` for one dropped) is
kept in the job's ``pipe`` hash in Redis under ``URL SEQ``, with the fetch id, as soon as it comes
out. The rows are then written with those items; the hash fields go once the rows are in.

A redelivered task finds one of three things: the page's fetch already stored (its items went
through: nothing runs again), the outcomes of some items kept (those are reused, the rest run),
or nothing (all run). So a pipeline sees an item twice only if its process dies between the
pipeline returning and the outcome reaching Redis.

Pipelines may be slow (a remote database, an API): while they run, the batch's page leases are
renewed (``leases_kept``), so the frontier does not hand a page out again to be fetched anew, and
its items sent through the pipelines a second time, under another fetch id.

A process keeps a job's pipelines open (``open_spider`` on its first item) until the job ends:
the store task that ends the job closes them, other processes close theirs on their next store
task (a check every few seconds) or when they stop (``close_all``).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from redis import Redis

from crawler import jobs
from crawler.frontier import Lease
from crawler.spiders.pipelines import OpenPipelines, Pipelines
from crawler.spiders.run import dumps_item
from crawler.stages.context import Context
from crawler.state import keys
from crawler.state.conn import text
from crawler.state.jobconf import Job
from crawler.store import PageRecord

log = logging.getLogger(__name__)

# This process's open pipelines, one set per job.
OPEN = OpenPipelines()
DROPPED = "-"
CHECK_EVERY = 5.0  # seconds between checks for ended jobs whose pipelines are still open here
KEPT_FOR = 86_400.0  # a job's outcomes outlive any redelivery, not an abandoned job
_ENDED = (*jobs.FINISHED, jobs.WAITING)
_last_check = [0.0]


def key(job_id: str) -> str:
    return keys.prefix(job_id) + "pipe"


def job_pipelines(ctx: Context, job: Job) -> Pipelines | None:
    """The job's pipelines in this process, or None if it has none. Raises SpiderUnavailable
    (the spider) or PipelineUnavailable (a pipeline) when this worker cannot load them."""
    s = job.settings
    spider = ctx.spider(job)
    if spider is None and not s.item_pipelines:
        return None
    return OPEN.get(job.id, spider, s.item_pipelines, ctx.spider_paths)


def fields(records: Sequence[PageRecord]) -> list[str]:
    """The hash fields the items of ``records`` are kept under (read them before ``run``, which
    replaces the items; the store stage deletes them once the rows are written)."""
    return [f"{r.url} {i}" for r in records for i in range(len(r.items or ()))]


def run(redis: Redis, job_id: str, pipes: Pipelines, records: Sequence[PageRecord]) -> Counter[str]:
    """Send the items of ``records`` (pages whose fetch is not stored yet) through ``pipes``,
    replacing each record's items by what comes out; outcomes kept from an earlier delivery of the
    same fetch are reused. Returns the counters the pipelines moved (already added to the job's)."""
    counts: Counter[str] = Counter()
    todo = [r for r in records if r.items]
    names = fields(todo)
    if not names:
        return counts
    h = key(job_id)
    kept = dict(zip(names, redis.hmget(h, names), strict=True))
    redis.expire(h, int(KEPT_FOR))
    for r in todo:
        out: list[dict[str, Any]] = []
        for i, item in enumerate(r.items or ()):
            name = f"{r.url} {i}"
            raw = kept.get(name)
            if raw is not None:
                fetch_id, _, outcome = text(raw).partition(" ")
                if fetch_id == r.fetch_id:
                    if outcome != DROPPED:
                        out.append(json.loads(outcome))
                    continue
            got = pipes.process(item, r.url)
            encoded = DROPPED if got.item is None else dumps_item(got.item)
            if got.item is not None:
                out.append(json.loads(encoded))
            # The outcome and its counters together, at once: a task killed after this item
            # finds it done.
            pipe = redis.pipeline(transaction=True)
            pipe.hset(h, name, f"{r.fetch_id} {encoded}")
            jobs.count(pipe, job_id, **got.counts)
            pipe.execute()
            counts.update(got.counts)
        r.items = out
    return counts


@contextmanager
def leases_kept(ctx: Context, job: Job, leases: Sequence[Lease]) -> Iterator[None]:
    """While the block runs, renew ``leases`` every third of the job's lease timeout (a slow
    pipeline must not let its pages go back to the frontier), and once more when it ends, so the
    writes that follow have a full lease."""
    timeout = job.settings.lease_timeout
    stop = threading.Event()

    def keep() -> None:
        while not stop.wait(timeout / 3):
            try:
                ctx.frontier.renew(job.id, leases, timeout)
            except Exception:  # Redis away for a moment: the next turn tries again
                log.exception("job %s: renewing the leases of pages in the item pipelines", job.id)

    keeper = threading.Thread(target=keep, name="pipeline-leases", daemon=True)
    keeper.start()
    try:
        yield
    finally:
        stop.set()
        keeper.join()
        ctx.frontier.renew(job.id, leases, timeout)


def after_batch(redis: Redis, job_id: str, has_pipelines: bool) -> None:
    """After a store task: close this process's pipelines of the job if it has just ended, and
    (every ``CHECK_EVERY`` seconds) those of other jobs that ended meanwhile."""
    if has_pipelines and jobs.raw_status(redis, job_id) in _ENDED:
        OPEN.close(job_id)
    now = time.monotonic()
    if now - _last_check[0] < CHECK_EVERY:
        return
    _last_check[0] = now
    others = [j for j in OPEN.jobs() if j != job_id]
    if not others:
        return
    pipe = redis.pipeline(transaction=False)
    for j in others:
        pipe.hget(keys.meta(j), "status")
    for j, status in zip(others, pipe.execute(), strict=True):
        if status is None or text(status) in _ENDED:
            OPEN.close(j)
