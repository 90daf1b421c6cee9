"""The one record of which shards are down (taken over by their backups), in Redis.

Any dispatcher may find that every worker of a shard fell silent (``crawler.frontier.takeover``), but
the record changes only by compare-and-set on its epoch, so each change is decided once however
many dispatchers notice it at the same time. Everything that places a host or routes a message
(admission, link routing, task queues, ``crawler.frontier.rebalance``) reads this record.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

from redis import Redis

from crawler.frontier.sharding import standby
from crawler.state import keys
from crawler.state.conn import text

# What it takes and returns: scripts/liveshards_cas.lua.
_CAS = (Path(__file__).resolve().parent / "scripts" / "liveshards_cas.lua").read_text()

CACHE_AGE = 2.0  # seconds a process may route with a stale copy; rebalance.GRACE covers it


@dataclass(frozen=True)
class LiveSet:
    epoch: int = 0
    down: dict[int, float] = field(default_factory=dict)  # shard -> when it was taken over
    changed_at: float = 0.0
    after: int = 0  # heartbeats of silence the deciding dispatcher required

    def shards(self, count: int | None = None) -> frozenset[int]:
        """Shards down, only those below ``count`` if given (a job's shard count)."""
        return frozenset(s for s in self.down if count is None or s < count)


def read(redis: Redis) -> LiveSet:
    raw = redis.hgetall(keys.SHARDS_DOWN)
    if not raw:
        return LiveSet()
    d = {text(k): text(v) for k, v in raw.items()}
    down = {int(s): float(t) for s, t in json.loads(d.get("down", "{}")).items()}
    return LiveSet(int(d.get("epoch", 0)), down, float(d.get("changed_at", 0)), int(d.get("after", 0)))


def compare_and_set(redis: Redis, expected: LiveSet, down: dict[int, float], *, now: float,
                    after: int) -> bool:
    """Replace the down set if nobody changed it since ``expected`` was read."""
    payload = json.dumps({str(s): t for s, t in sorted(down.items())})
    ok = bool(redis.register_script(_CAS)(keys=[keys.SHARDS_DOWN], args=[expected.epoch, payload, now, after]))
    if ok:
        _cache.clear()
    return ok


_cache: dict[int, tuple[float, LiveSet]] = {}


def cached(redis: Redis, max_age: float = CACHE_AGE) -> LiveSet:
    """This process's recent copy of the record (one read per ``max_age`` per connection)."""
    hit = _cache.get(id(redis))
    if hit and time.monotonic() - hit[0] < max_age:
        return hit[1]
    live = read(redis)
    _cache[id(redis)] = (time.monotonic(), live)
    return live


def down(redis: Redis, shards: int) -> frozenset[int]:
    """The shards below ``shards`` that are down now, as this process last read them."""
    return cached(redis).shards(shards)


def route(redis: Redis, shard: int, shards: int) -> int:
    """The shard whose queue takes a task message meant for ``shard``: itself while it is live,
    else a live one (``sharding.standby``; any worker may run any task, leases decide)."""
    return standby(shard, shards, down(redis, shards))
