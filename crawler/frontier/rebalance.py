"""Changing a running job's shard count (moving only the domains whose owner changes), or the set of its
shards that are live (a dead shard's hosts taken over by their backups, ``crawler.frontier.takeover``).

Shards own registered domains by rendezvous hashing, so when the count changes only the domains
whose top shard changed move (about 1/N of them). Their hosts move between the shards' ready
sets, and every record that names a shard (leases, retries, hosts waiting for an address) is
rewritten, each move a compare-and-set script, so nothing a worker does meanwhile is lost or
done twice. Fetch and dedup messages left on the queue of a shard that no longer exists (or is
down) are moved to the next live shard's queue: any worker may run any task (leases and tokens
decide); parse and store travel on the shared queue anyway.

A takeover is the same migration with a set of shards ``down``: each of their hosts goes to the
next shard in its own rendezvous ranking that is live, and back when the shard is live again.

Workers learn the new count within ``crawler.jobs.load``'s cache age (the live set within
``liveshards.CACHE_AGE``); for ``GRACE`` seconds after a change every dispatcher repeats the
migration, which catches what a worker still working with the old view placed meanwhile. While a
shard stays down, every dispatcher also sweeps its ready set and its queue each tick (``sweep``):
work can reach them long after the change (task messages of the dead worker come back to its
queue after the visibility timeout; a lease recorded before the change expires onto it).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from redis import Redis

from crawler.frontier import liveshards
from crawler.frontier.core import wake_shards
from crawler.frontier.liveshards import LiveSet
from crawler.frontier.records import IpWait, Lease, Retry
from crawler.frontier.sharding import queue_name, shard_of_host, standby
from crawler.state import keys, queues
from crawler.state.conn import text

GRACE = 20.0

# Per move two KEYS (a, b) and four ARGV (kind, member, old, new). kind 'z': move ``member``
# from zset a to zset b keeping its score (only if still there); 'h': set hash
# field ``member`` of a from value ``old`` to ``new`` (only if unchanged); 'r': in zset a replace
# member ``old`` by ``new``, same score; 's': in set a replace ``old`` by ``new``. The caller
# wakes the shards hosts moved to (a wake list is in a slot of its own on a Redis Cluster).
# Returns how many moves applied.
_MOVE = """
local n = 0
for m = 0, #ARGV / 4 - 1 do
  local kind, member, old, new = ARGV[4 * m + 1], ARGV[4 * m + 2], ARGV[4 * m + 3], ARGV[4 * m + 4]
  local a, b = KEYS[2 * m + 1], KEYS[2 * m + 2]
  local done = false
  if kind == 'z' then
    local score = redis.call('ZSCORE', a, member)
    if score then
      redis.call('ZREM', a, member)
      local cur = redis.call('ZSCORE', b, member)
      if (not cur) or tonumber(cur) > tonumber(score) then redis.call('ZADD', b, score, member) end
      done = true
    end
  elseif kind == 'h' then
    if redis.call('HGET', a, member) == old then redis.call('HSET', a, member, new); done = true end
  elseif kind == 'r' then
    local score = redis.call('ZSCORE', a, old)
    if score then redis.call('ZREM', a, old); redis.call('ZADD', a, score, new); done = true end
  elseif kind == 's' then
    if redis.call('SREM', a, old) == 1 then redis.call('SADD', a, new); done = true end
  end
  if done then n = n + 1 end
end
return n
"""

_BATCH = 500  # moves per script call


@dataclass(frozen=True)
class _Move:
    keys: tuple[str, str]
    args: tuple[str, str, str, str]
    woken: int | None = None  # the shard a host moves to


def _host_move(job_id: str, host: str, src: int, dst: int) -> _Move:
    return _Move((keys.ready(job_id, src), keys.ready(job_id, dst)), ("z", host, "", ""), dst)


def _record_move(kind: str, key: str, member: str, old: str, new: str) -> _Move:
    return _Move((key, key), (kind, member, old, new))


@dataclass(frozen=True)
class Moved:
    hosts: int  # hosts whose shard changed (queued ones, and ones in flight)
    hosts_total: int
    records: int  # ready-set entries, leases, retries and address waits rewritten
    messages: int  # task messages moved off queues of shards that no longer exist or are down


def migrate(redis: Redis, job_id: str, shards: int, known: int | None = None,
            down: frozenset[int] = frozenset()) -> Moved:
    """Put every host of the job on the shard that serves it for ``shards`` shards of which
    ``down`` are down."""
    known = max(shards, known or int(redis.hget(keys.meta(job_id), "shards_before") or shards))
    moves: list[_Move] = []
    hosts: set[str] = set()
    moving: set[str] = set()

    def target(host: str) -> int:
        hosts.add(host)
        return shard_of_host(host, shards, down)

    for s in range(known):
        for member in redis.zrange(keys.ready(job_id, s), 0, -1):
            host = text(member)
            t = target(host)
            if t != s:
                moving.add(host)
                moves.append(_host_move(job_id, host, s, t))
    for url, value in redis.hscan_iter(keys.leases(job_id)):
        v = value.decode()
        lease = Lease.decode(v)
        t = target(lease.host)
        if lease.shard != t:
            moving.add(lease.host)
            moves.append(_record_move("h", keys.leases(job_id), url.decode(), v, replace(lease, shard=t).encode()))
    for member in redis.zrange(keys.retries(job_id), 0, -1):
        m = text(member)
        retry = Retry.decode(m)
        t = target(retry.host)
        if retry.shard != t:
            moving.add(retry.host)
            moves.append(_record_move("r", keys.retries(job_id), "", m, replace(retry, shard=t).encode()))
    for key in redis.scan_iter(keys.ip_wait_pattern(job_id), count=1000):
        for member in redis.smembers(key):
            m = text(member)
            wait = IpWait.decode(m)
            t = target(wait.host)
            if wait.shard != t:
                moves.append(_record_move("s", key.decode(), "", m, replace(wait, shard=t).encode()))
    applied = _apply(redis, moves)
    messages = drain_queues(redis, shards, known, down)
    return Moved(len(moving), len(hosts), applied, messages)


def _apply(redis: Redis, moves: list[_Move]) -> int:
    applied = 0
    script = redis.register_script(_MOVE)
    for i in range(0, len(moves), _BATCH):
        batch = moves[i : i + _BATCH]
        applied += int(script(keys=[k for m in batch for k in m.keys], args=[a for m in batch for a in m.args]))
    woken = sorted({m.woken for m in moves if m.woken is not None})
    if woken:
        pipe = redis.pipeline(transaction=False)
        wake_shards(pipe, woken)
        pipe.execute()
    return applied


def sweep(redis: Redis, job_id: str, shards: int, down: frozenset[int]) -> Moved:
    """Move hosts out of the ready sets of shards that are down, and task messages off their
    queues: every path by which work reaches a shard ends in one of the two."""
    moves: list[_Move] = []
    hosts: set[str] = set()
    for s in sorted(down):
        for member in redis.zrange(keys.ready(job_id, s), 0, -1):
            host = text(member)
            t = shard_of_host(host, shards, down)
            if t != s:
                hosts.add(host)
                moves.append(_host_move(job_id, host, s, t))
    applied = _apply(redis, moves) if moves else 0
    return Moved(len(hosts), len(hosts), applied, drain_queues(redis, shards, shards, down))


def drain_queues(redis: Redis, shards: int, known: int, down: frozenset[int] = frozenset()) -> int:
    """Move task messages from the queues of shards >= ``shards`` and of shards that are down to
    the queue of a live shard (``sharding.standby``)."""
    moved = 0
    for s in sorted(set(range(shards, known)) | {d for d in down if d < shards}):
        target = standby(s, shards, down)
        if target == s:
            continue  # every shard is down: nowhere better to put them
        moved += queues.move_all(redis, queue_name(s), queue_name(target))  # on their broker(s)
    return moved


def drain_if_changed(redis: Redis, job_id: str, shards: int, now: float,
                     live: LiveSet | None = None) -> Moved | None:
    """``rebalance_if_changed`` for a split frontier, whose hosts stay in their parts whatever
    the shard count or the live set: only the task messages on the queues of shards gone or
    down move, while a change settles."""
    live = liveshards.read(redis) if live is None else live
    down = live.shards(shards)
    meta = redis.hmget(keys.meta(job_id), ["shards_changed_at", "shards_before"])
    if now - float(meta[0] or 0) <= GRACE or now - live.changed_at <= GRACE:
        return Moved(0, 0, 0, drain_queues(redis, shards, max(shards, int(meta[1] or 0)), down))
    if down:  # messages come back to a down shard's queue long after (a visibility timeout)
        return Moved(0, 0, 0, drain_queues(redis, shards, shards, down))
    return None


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
