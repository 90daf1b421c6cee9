"""A job's settings as every worker applies them: read from the job's meta record and kept
briefly in each process. Below the frontier and ``crawler.jobs`` (which re-exports ``Job``,
``load`` and ``forget``), so the dispatcher can read them without importing ``crawler.jobs``.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from redis import Redis

from crawler.config.settings import Settings, process_limit
from crawler.errors import JobNotFound
from crawler.lru import LRU
from crawler.state import keys


@dataclass(frozen=True)
class Job:
    id: str
    settings: Settings
    allowed: frozenset[str]


Cache = LRU[str, tuple[float, Job]]

# A worker serves job after job for days: the jobs it has not seen for longest go first.
_cache: Cache = LRU(process_limit("job_cache_size"))


def load(redis: Redis, job_id: str, *, max_age: float = 5.0, cache: Cache | None = None) -> Job:
    """The job's settings as its submitter set them, cached for ``max_age`` seconds in
    ``cache`` (this process's own by default). JobNotFound (a KeyError) if Redis has no such job."""
    cache = _cache if cache is None else cache
    hit = cache.get(job_id)
    if hit and time.monotonic() - hit[0] < max_age:
        return hit[1]
    raw = redis.hget(keys.meta(job_id), "settings")
    if raw is None:
        raise JobNotFound(f"no such job: {job_id}")
    values = json.loads(raw)
    # A job submitted before the near-duplicate index had a budget keeps the unbounded index it
    # started with (a bounded one is laid out otherwise, and would forget every page so far).
    values.setdefault("near_duplicate_budget", 0)
    # A job from before frontier_split keeps its frontier under its own tag, whatever a worker's
    # environment says for jobs it submits.
    values.setdefault("frontier_split", False)
    job = Job(job_id, Settings.from_env(**values), frozenset(values["allow_domains"]))
    cache.put(job_id, (time.monotonic(), job))
    return job


def forget(job_id: str, cache: Cache | None = None) -> None:
    """Drop this process's cached copy of the job's settings (they were just changed)."""
    (_cache if cache is None else cache).pop(job_id)
