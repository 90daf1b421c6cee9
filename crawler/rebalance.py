"""Changing a running job's shard count (the DHT design's REFRESH_TASK), or the set of its
shards that are live (a dead shard's hosts taken over by their backups, ``crawler.takeover``).

Shards own registered domains by rendezvous hashing, so when the count changes only the domains
whose top shard changed move (about 1/N of them). Their hosts move between the shards' ready
sets, and every record that names a shard (leases, retries, hosts waiting for an address) is
rewritten, each move a compare-and-set script, so nothing a worker does meanwhile is lost or
done twice. Fetch and dedup messages left on the queue of a shard that no longer exists (or is
down) are moved to the next live shard's queue: any worker may run any task (leases and tokens
decide); parse and store travel on the shared queue anyway.

A takeover is the same migration with a set of shards ``down``: each of their hosts goes to the
next shard in its own rendezvous ranking that is live, and back when the shard is live again.

Workers learn the new count within ``jobs.load``'s cache age (the live set within
``liveshards.CACHE_AGE``); for ``GRACE`` seconds after a change every dispatcher repeats the
migration, which catches what a worker still working with the old view placed meanwhile. While a
shard stays down, every dispatcher also sweeps its ready set and its queue each tick (``sweep``):
work can reach them long after the change (task messages of the dead worker come back to its
queue after the visibility timeout; a lease recorded before the change expires onto it).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from redis import Redis

from crawler import jobs, keys, liveshards
from crawler.liveshards import LiveSet
from crawler.sharding import queue_name, shard_of_host, standby

GRACE = 20.0
MAX_SHARDS = 1024

# ARGV: prefix, job, then (kind, key, member, old, new, new shard) sextets. kind 'z': move
# ``member`` from zset ``old`` to zset ``new`` keeping its score (only if still there); 'h': set
# hash field ``member`` of ``key`` from value ``old`` to ``new`` (only if unchanged); 'r': in zset
# ``key`` replace member ``old`` by ``new``, same score; 's': in set ``key`` replace ``old`` by
# ``new``. Shards given get a wake. Returns how many moves applied.
_MOVE = """
local n = 0
for i = 3, #ARGV, 6 do
  local kind, key, member, old, new, shard = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4], ARGV[i + 5]
  local done = false
  if kind == 'z' then
    local score = redis.call('ZSCORE', old, member)
    if score then
      redis.call('ZREM', old, member)
      local cur = redis.call('ZSCORE', new, member)
      if (not cur) or tonumber(cur) > tonumber(score) then redis.call('ZADD', new, score, member) end
      done = true
    end
  elseif kind == 'h' then
    if redis.call('HGET', key, member) == old then redis.call('HSET', key, member, new); done = true end
  elseif kind == 'r' then
    local score = redis.call('ZSCORE', key, old)
    if score then redis.call('ZREM', key, old); redis.call('ZADD', key, score, new); done = true end
  elseif kind == 's' then
    if redis.call('SREM', key, old) == 1 then redis.call('SADD', key, new); done = true end
  end
  if done then
    n = n + 1
    if shard ~= '' then
      redis.call('LPUSH', 'c:wake:' .. shard, '1')
      redis.call('LTRIM', 'c:wake:' .. shard, 0, 0)
    end
  end
end
return n
"""


@dataclass(frozen=True)
class Moved:
    hosts: int  # hosts whose shard changed (queued ones, and ones in flight)
    hosts_total: int
    records: int  # ready-set entries, leases, retries and address waits rewritten
    messages: int  # task messages moved off queues of shards that no longer exist or are down


def set_shards(redis: Redis, job_id: str, shards: int) -> Moved:
    """Give a running job ``shards`` shards and move what must move."""
    if not 1 <= shards <= MAX_SHARDS:
        raise ValueError(f"shard count must be 1..{MAX_SHARDS}, got {shards}")
    raw = redis.hget(keys.meta(job_id), "settings")
    if raw is None:
        raise KeyError(f"no such job: {job_id}")
    values = json.loads(raw)
    # The highest count the job ever had: queues and ready sets up to it may still hold work.
    known = max(int(values["shards"]), shards, int(redis.hget(keys.meta(job_id), "shards_before") or 0))
    values["shards"] = shards
    redis.hset(keys.meta(job_id), mapping={"settings": json.dumps(values), "shards_changed_at": time.time(),
                                           "shards_before": known})
    jobs.forget(job_id)
    return migrate(redis, job_id, shards, known, down=liveshards.read(redis).shards(shards))


def migrate(redis: Redis, job_id: str, shards: int, known: int | None = None,
            down: frozenset[int] = frozenset()) -> Moved:
    """Put every host of the job on the shard that serves it for ``shards`` shards of which
    ``down`` are down."""
    p = keys.prefix(job_id)
    known = max(shards, known or int(redis.hget(keys.meta(job_id), "shards_before") or shards))
    moves: list[str] = []
    hosts: set[str] = set()
    moving: set[str] = set()

    def target(host: str) -> int:
        hosts.add(host)
        return shard_of_host(host, shards, down)

    for s in range(known):
        for member in redis.zrange(keys.ready(job_id, s), 0, -1):
            host = member.decode()
            t = target(host)
            if t != s:
                moving.add(host)
                moves += ["z", "", host, keys.ready(job_id, s), keys.ready(job_id, t), str(t)]
    for url, value in redis.hscan_iter(p + "lease"):
        v = value.decode()
        parts = v.split(" ", 5)  # token stage shard host ipkey entry
        t = target(parts[3])
        if int(parts[2]) != t:
            moving.add(parts[3])
            parts[2] = str(t)
            moves += ["h", p + "lease", url.decode(), v, " ".join(parts), ""]
    for member in redis.zrange(p + "retry", 0, -1):
        m = member.decode()
        shard, host, entry = m.split(" ", 2)
        t = target(host)
        if int(shard) != t:
            moving.add(host)
            moves += ["r", p + "retry", "", m, f"{t} {host} {entry}", ""]
    for key in redis.scan_iter(p + "ipwait:*", count=1000):
        for member in redis.smembers(key):
            m = member.decode()
            shard, host = m.split(" ", 1)
            t = target(host)
            if int(shard) != t:
                moves += ["s", key.decode(), "", m, f"{t} {host}", ""]
    applied = _apply(redis, job_id, moves)
    messages = drain_queues(redis, shards, known, down)
    return Moved(len(moving), len(hosts), applied, messages)


def _apply(redis: Redis, job_id: str, moves: list[str]) -> int:
    applied = 0
    script = redis.register_script(_MOVE)
    for i in range(0, len(moves), 6 * 500):
        applied += int(script(args=[keys.prefix(job_id), job_id, *moves[i : i + 6 * 500]]))
    return applied


def sweep(redis: Redis, job_id: str, shards: int, down: frozenset[int]) -> Moved:
    """Move hosts out of the ready sets of shards that are down, and task messages off their
    queues: every path by which work reaches a shard ends in one of the two."""
    moves: list[str] = []
    hosts: set[str] = set()
    for s in sorted(down):
        for member in redis.zrange(keys.ready(job_id, s), 0, -1):
            host = member.decode()
            t = shard_of_host(host, shards, down)
            if t != s:
                hosts.add(host)
                moves += ["z", "", host, keys.ready(job_id, s), keys.ready(job_id, t), str(t)]
    applied = _apply(redis, job_id, moves) if moves else 0
    return Moved(len(hosts), len(hosts), applied, drain_queues(redis, shards, shards, down))


def drain_queues(redis: Redis, shards: int, known: int, down: frozenset[int] = frozenset()) -> int:
    """Move task messages from the queues of shards >= ``shards`` and of shards that are down to
    the queue of a live shard (``sharding.standby``)."""
    moved = 0
    for s in sorted(set(range(shards, known)) | {d for d in down if d < shards}):
        target = standby(s, shards, down)
        if target == s:
            continue  # every shard is down: nowhere better to put them
        while redis.lmove(queue_name(s), queue_name(target), "RIGHT", "LEFT") is not None:
            moved += 1
    return moved


def rebalance_if_changed(redis: Redis, job_id: str, shards: int, now: float,
                         live: LiveSet | None = None) -> Moved | None:
    """For a dispatcher: repeat the migration while a recent change of the shard count or of
    the live set settles, and keep the shards that are down swept."""
    live = liveshards.read(redis) if live is None else live
    down = live.shards(shards)
    changed = float(redis.hget(keys.meta(job_id), "shards_changed_at") or 0)
    if now - changed <= GRACE or now - live.changed_at <= GRACE:
        return migrate(redis, job_id, shards, down=down)
    if down:
        return sweep(redis, job_id, shards, down)
    return None
