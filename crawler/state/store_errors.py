"""A job's store error while it lasts: the record ``status`` shows (since when, how many
retries, the last node and error). When the store task tries again is the retry policy's
(``crawler.stages.retry_policy.store_wait``)."""

from __future__ import annotations

import time
from typing import Any

from redis import Redis

from crawler.config.redact import redact
from crawler.lru import LRU
from crawler.state import keys
from crawler.state.conn import text

# When this process last cleared each job's store error (``clear``; the jobs of late, not every
# job a long-lived worker ever served), and the jobs whose error it reported itself since.
_cleared: LRU[str, float] = LRU(1024)
_reported: set[str] = set()
CLEAR_EVERY = 1.0


def report(redis: Redis, job_id: str, error: str, node: str, ttl: float) -> None:
    """Record the store error for ``status`` (it ends with the first store that succeeds, or
    ``ttl`` seconds after the last report, if nobody is trying any more) and count the retry."""
    now = time.time()
    _reported.add(job_id)
    key = keys.store_error(job_id)
    pipe = redis.pipeline(transaction=False)
    pipe.hsetnx(key, "since", now)
    pipe.hset(key, mapping={"error": redact(error), "node": node, "last": now})
    pipe.hincrby(key, "retries", 1)
    pipe.expire(key, max(1, int(ttl)))
    pipe.hincrby(keys.counters(job_id), "store_retries", 1)
    pipe.execute()


def clear(redis: Redis | Any, job_id: str, now: float | None = None, force: bool = False) -> None:
    """The store took a write: the outage, if there was one, is over (``redis`` may be a pipeline).
    At once if this process reported it or ``force`` (the write of a batch that waited out the
    error: wherever it runs, its success ends the record); else at most once a second per job,
    since the record is seldom there and a store of every batch would delete it."""
    now = time.time() if now is None else now
    if not force and job_id not in _reported and now - (_cleared.get(job_id) or 0.0) < CLEAR_EVERY:
        return
    _reported.discard(job_id)
    _cleared.put(job_id, now)
    redis.delete(keys.store_error(job_id))


def current(redis: Redis, job_id: str) -> dict[str, Any] | None:
    """The store error being retried now, if any: error, node, since, last, retries."""
    raw = redis.hgetall(keys.store_error(job_id))
    if not raw:
        return None
    d = {text(k): text(v) for k, v in raw.items()}
    return {"error": d.get("error", ""), "node": d.get("node", ""), "since": float(d.get("since", 0)),
            "last": float(d.get("last", 0)), "retries": int(d.get("retries", 0))}
