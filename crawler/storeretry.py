"""What the store stage does while its store is down: when to try again, and telling the
operator. Plain functions; the store task only asks them and schedules the retry.

A store that is down must not lose pages nor turn them into refetches: the pages a waiting
store task holds keep their leases (renewed past its next try, see ``stages.hold_for_retry``),
and they keep counting against the job's concurrency, so dispatch pauses instead of fetching
pages that could not be stored either.
"""

from __future__ import annotations

import random
import time
from typing import Any

from redis import Redis

from crawler import keys
from crawler.frontier.ratecontrol import backoff
from crawler.redact import redact
from crawler.redisconn import text
from crawler.settings import Settings

BASE = 1.0  # seconds before the first retry; doubles each time
CAP = 30.0  # seconds between tries at most: an outage's end is noticed within this


def cap(s: Settings) -> float:
    # A retry waits in the worker as a countdown message, unacknowledged: it must be sent on
    # well before Redis would deliver it again to someone else (the visibility timeout).
    return max(BASE, min(CAP, s.visibility_timeout / 4))


def next_wait(attempt: int, s: Settings, rng: random.Random | None = None) -> float | None:
    """Seconds before try ``attempt + 2`` of a store task whose ``attempt + 1`` tries failed,
    or None once the waits so far (without jitter) add up to ``store_retry_for``."""
    c = cap(s)
    waited = sum(min(c, BASE * 2**k) for k in range(attempt))
    if waited >= s.store_retry_for:
        return None
    return backoff(attempt, base=BASE, cap=c, rng=rng)


def report(redis: Redis, job_id: str, error: str, node: str, ttl: float) -> None:
    """Record the store error for ``status`` (it ends with the first store that succeeds, or
    ``ttl`` seconds after the last report, if nobody is trying any more) and count the retry."""
    now = time.time()
    key = keys.store_error(job_id)
    pipe = redis.pipeline(transaction=False)
    pipe.hsetnx(key, "since", now)
    pipe.hset(key, mapping={"error": redact(error), "node": node, "last": now})
    pipe.hincrby(key, "retries", 1)
    pipe.expire(key, max(1, int(ttl)))
    pipe.hincrby(keys.counters(job_id), "store_retries", 1)
    pipe.execute()


def clear(redis: Redis | Any, job_id: str) -> None:
    """The store took a write: the outage, if there was one, is over (``redis`` may be a pipeline)."""
    redis.delete(keys.store_error(job_id))


def current(redis: Redis, job_id: str) -> dict[str, Any] | None:
    """The store error being retried now, if any: error, node, since, last, retries."""
    raw = redis.hgetall(keys.store_error(job_id))
    if not raw:
        return None
    d = {text(k): text(v) for k, v in raw.items()}
    return {"error": d.get("error", ""), "node": d.get("node", ""), "since": float(d.get("since", 0)),
            "last": float(d.get("last", 0)), "retries": int(d.get("retries", 0))}
