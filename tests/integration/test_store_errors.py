"""A job's store error record: cleared by the process that reported it at its next good store,
by any other within a second (a store of every batch deleting it cost a command a batch)."""

from __future__ import annotations

import redis

from crawler.state import keys, store_errors


def test_the_reporter_clears_at_once_and_others_within_a_second(r: redis.Redis) -> None:
    job = "job-se"
    store_errors.clear(r, job, now=100.0)  # a store long before: this process cleared then
    store_errors.report(r, job, "connection refused", "node-a", ttl=60)
    assert store_errors.current(r, job)["retries"] == 1  # type: ignore[index]
    store_errors.clear(r, job, now=100.5)  # this process reported it: cleared at its next store
    assert store_errors.current(r, job) is None
    # Reported by another process (the record written directly): this one, having cleared at
    # 100.5, leaves it until a second has passed, then clears it.
    r.hset(keys.store_error(job), mapping={"error": "x", "since": 101, "last": 101, "retries": 1})
    store_errors.clear(r, job, now=101.0)
    assert store_errors.current(r, job) is not None
    pipe = r.pipeline(transaction=False)
    store_errors.clear(pipe, job, now=101.6)
    pipe.execute()
    assert store_errors.current(r, job) is None
    # A batch that waited out the error clears it wherever it runs, however recently this
    # process cleared (a retried task goes to any free process).
    r.hset(keys.store_error(job), mapping={"error": "x", "since": 102, "last": 102, "retries": 1})
    store_errors.clear(r, job, now=101.7, force=True)
    assert store_errors.current(r, job) is None
