"""Bounded Redis memory: a host's queue holds at most ``host_queue_cap`` URLs in Redis; the rest
wait in the store's frontier table, in the order they were found, and come back when the host's
queue runs low. A job's Redis memory then grows with its hosts, not with its URLs.

Three steps, each safe to repeat and to die in the middle of:

1. Admission (``lua.ADMIT``, its ``place``) stages a URL over the cap in Redis under its host's
   next sequence number, in the same script that marks it seen: a URL is never seen without
   being queued or staged, and a host with URLs in the store stages its new ones after them.
2. ``flush`` writes staged URLs to the store (insert-or-ignore by job, host and sequence
   number) and only then unstages them: a worker killed between the two leaves them staged, and
   the next flush writes them again harmlessly.
3. ``refill`` reads a low host's next rows and queues those that follow the host's refilled
   sequence number (``lua.REFILL``), then deletes the rows up to it. A refill repeated after a
   crash queues nothing twice; a row still staged (a gap) stops the host's refill until the
   flush that writes it.
"""

from __future__ import annotations

from crawler.frontier import liveshards
from crawler.frontier.core import Frontier
from crawler.frontier.sharding import shard_of_host
from crawler.store import SpilledFrontier

LOW_WATER = 0.5  # a host's queue is refilled to its cap once it is down to half of it
FLUSH_CHUNK = 5000


def flush(frontier: Frontier, store: SpilledFrontier, job_id: str) -> int:
    """Write every staged URL of the job to the store; returns how many."""
    total = 0
    while True:
        staged = frontier.staged(job_id, limit=FLUSH_CHUNK)
        if not staged:
            return total
        store.spill_put(job_id, [(host, seq, entry) for _, host, seq, entry in staged])
        frontier.unstage(job_id, [member for member, *_ in staged])
        total += len(staged)
        if len(staged) < FLUSH_CHUNK:
            return total


def refill(frontier: Frontier, store: SpilledFrontier, job_id: str, cap: int, shards: int) -> int:
    """Bring URLs back from the store into the queues of hosts at or below the low-water mark;
    returns how many."""
    low = int(cap * LOW_WATER)
    down = liveshards.down(frontier.redis, shards)
    moved = 0
    for host, done, _sent in frontier.hosts_to_refill(job_id, low):
        rows = store.spill_take(job_id, host, done, max(1, cap - low))
        if not rows:
            continue  # still staged: the next flush writes them
        upto = frontier.refill(job_id, host, shard_of_host(host, shards, down), rows)
        store.spill_drop(job_id, host, upto)
        moved += upto - done
    return moved


def maintain(frontier: Frontier, store: SpilledFrontier, job_id: str, cap: int, shards: int) -> tuple[int, int]:
    """The refill task's work: write what admissions left staged, then refill low hosts.
    Returns (URLs written to the store, URLs brought back)."""
    written = flush(frontier, store, job_id)
    return written, refill(frontier, store, job_id, cap, shards)
