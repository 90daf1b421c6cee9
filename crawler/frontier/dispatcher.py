"""The dispatcher: hands due hosts' URLs to fetch tasks, in batches, for the shards a worker
serves. It runs as a thread in each worker's main process (a Celery bootstep), sleeps on a Redis
list while nothing is due, and is woken when work arrives: nobody sleeps inside a task, and
countdown/ETA messages are never used for politeness. Several dispatchers on one shard are safe:
each dispatch is one atomic script.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import redis
from redis.crc import key_slot

from crawler.frontier import liveshards, takeover
from crawler.frontier.core import Dispatched, Frontier, Readiness, merged_batches, new_token
from crawler.frontier.liveshards import LiveSet
from crawler.frontier.rebalance import drain_if_changed, rebalance_if_changed
from crawler.frontier.sharding import standby
from crawler.state import jobconf as jobcache
from crawler.state import joblog, keys, nodes
from crawler.state.conn import MIN_BLOCK, block_timeout, open_migrations

log = logging.getLogger(__name__)

SendFetch = Callable[[str, int, str, list[str]], None]  # (job, shard, token, entries)
# (job, shard, token, entries): URLs out of attempts, to be stored as failed
SendFailed = Callable[[str, int, str, list[str]], None]
SendLinks = Callable[[str, int, str, list[Any]], None]  # (job, shard, link token, links)
SendRefill = Callable[[str, int], None]  # (job, shard): URLs wait in the job's store

IDLE_WAIT = 1.0  # longest sleep while jobs run: bounds how late an expired lease is noticed
IDLE_SLEEP = 5.0  # sleep with no job running; admissions wake it at once, this bounds a lost wake
BUSY_WAIT = 0.05  # poll interval while a job's concurrency is spent
LINGER = 0.005  # after a wake, let more completions arrive so batches fill (see Dispatcher.run)
BATCH_WINDOW = 0.03  # seconds; see Dispatcher._hold_for_batch
REAP_EVERY = 1.0
PROMOTE_EVERY = 1.0  # a retry set is looked at this often at least (more when its first is due)
# How often a job's store is asked for more URLs while some wait there: each refill brings a low
# host's queue back to its cap, so a host may take up to half its cap per interval.
REFILL_EVERY = 0.2
RUNS_EVERY = 10.0  # seconds between looks at whether every worker takes runs (``nodes.take_runs``)
# Seconds of waits one run may have in all (dispatch sizes runs by the host's delay, and the fetch
# stage stops a run whose waits would add up to more): a run holds a worker's task, and a host
# slow enough to need more is better served a URL a task.
RUN_WAIT = 0.5
# Seconds a listed job may have no record before it is taken off the list: a Redis Cluster's
# pipeline may list a job a moment before its record lands, but not for this long.
UNRECORDED_GRACE = 60.0
REFILL_CLAIM = 30.0  # seconds a sent refill task holds the job's claim at most
MOVES_EVERY = 2.0  # seconds between looks at whether a Redis Cluster is moving slots
MOVES_SAY_EVERY = 60.0  # seconds between warnings while a job is held for a slot moving


def share_out(free: int, demand: dict[int, int]) -> dict[int, int]:
    """``free`` slots shared out in proportion to ``demand`` (largest remainders first, then the
    lowest key), nothing to those with none."""
    total = sum(v for v in demand.values() if v > 0)
    if free <= 0 or total == 0:
        return {}
    out = {k: free * v // total for k, v in demand.items() if v > 0}
    left = free - sum(out.values())
    for k in sorted(out, key=lambda k: (-(free * demand[k] % total), k))[:left]:
        out[k] += 1
    return {k: n for k, n in out.items() if n}


def min_free(concurrency: int, fetch_batch: int) -> int:
    """Free slots worth a fetch task while others are in flight: a full batch, or half the
    job's concurrency when that is smaller (so two tasks can overlap)."""
    return max(1, min(fetch_batch, concurrency // 2))


class Dispatcher:
    def __init__(self, client: redis.Redis, shards: Sequence[int], send_fetch: SendFetch,
                 send_failed: SendFailed, send_links: SendLinks | None = None, *,
                 takeover_after: int = 0, send_refill: SendRefill | None = None) -> None:
        self.redis = client
        self.takeover_after = takeover_after  # 0: this dispatcher never decides a takeover
        self.frontier = Frontier(client)
        self.shards = list(shards)
        self.send_fetch = send_fetch
        self.send_failed = send_failed
        self.send_links = send_links
        self.send_refill = send_refill
        self._stop = threading.Event()
        # A list of this dispatcher's own, so stop() ends its blocking wait at once.
        self._own_wake = keys.wake_one(uuid.uuid4().hex[:12])
        self._last_reap: dict[str, float] = {}
        self._last_dispatch: dict[str, float] = {}
        self._last_refill: dict[str, float] = {}
        self._promote_at: dict[str, float] = {}  # when each job's retries are looked at next
        self._unrecorded: dict[str, float] = {}  # listed jobs with no record -> since when
        self._last_check = 0.0
        self._moves_checked = -MOVES_EVERY
        self._moving: frozenset[int] = frozenset()  # slots the cluster was moving, as last looked
        self._moves_said: dict[str, float] = {}  # job -> when its hold was last told
        self._runs_checked = -RUNS_EVERY
        self._runs = False  # whether every worker takes runs, as last looked
        # Whether the last tick left more than one request in flight (or held a batch back):
        # only then can a wake's linger gather more completions into one batch.
        self._crowded = True
        self.live = LiveSet()

    def _drop_unrecorded(self, job_id: str, now: float) -> None:
        """Take a listed job whose record is gone off the list once it has been gone a while
        (its record lost with a master, or purged behind a worker's back): else every tick of
        every dispatcher looks at it for ever."""
        since = self._unrecorded.setdefault(job_id, now)
        if now - since >= UNRECORDED_GRACE and self.frontier.drop_if_unrecorded(job_id):
            self._unrecorded.pop(job_id, None)
            log.warning("job %s: listed as running with no record for %.0f s; taken off the list "
                        "(crawler recover rebuilds it from its store)", job_id, now - since)

    def _check_live(self, now: float) -> None:
        change = takeover.check(self.redis, self.takeover_after, now)
        if change is not None:
            for s in change.down:
                log.warning("shard %d taken over: every worker of it silent for %d heartbeats; its hosts "
                            "go to their runner-up shards", s, self.takeover_after)
            for s in change.up:
                log.warning("shard %d is live again: its hosts move back to it", s)
            # Every running job's log says so too: it is where an operator looks first.
            for job_id in self.frontier.active_jobs():
                for s in change.down:
                    joblog.log_event(self.redis, job_id, "shard_down", f"shard {s} taken over: every worker of it "
                                     f"silent for {self.takeover_after} heartbeats", level="WARNING")
                for s in change.up:
                    joblog.log_event(self.redis, job_id, "shard_up", f"shard {s} is live again", level="WARNING")
        self.live = change.live if change is not None else liveshards.read(self.redis)

    def _look_at_moves(self, now: float) -> None:
        if now - self._moves_checked < MOVES_EVERY:
            return
        self._moves_checked = now
        moving = frozenset(open_migrations(self.redis))
        if self._moving and not moving:
            log.warning("the Redis Cluster's slots have moved: dispatching again")
            self._moves_said.clear()
        self._moving = moving

    def _held_for_moves(self, job_id: str, now: float) -> bool:
        """Whether a slot of the job's frontier (its own tag's, a part's) is moving: no script
        of this dispatcher's runs for it meanwhile, since one that meets a key of a moving slot
        stops half-way (``open_migrations``). Tasks in flight end as they may."""
        if not self._moving:
            return False
        slots = {key_slot(keys.meta(space).encode()) for space in {job_id, *self.frontier.spaces(job_id)}}
        held = sorted(slots & self._moving)
        if held and now - self._moves_said.get(job_id, -MOVES_SAY_EVERY) >= MOVES_SAY_EVERY:
            self._moves_said[job_id] = now
            log.warning("job %s: the Redis Cluster is moving slot(s) %s of its frontier: its dispatching held until "
                        "they have moved; stop the workers while slots move (docs/capacity.md)", job_id,
                        ", ".join(map(str, held)))
        return bool(held)

    def tick(self, now: float | None = None) -> float:
        """Dispatch everything due now; return how long to wait before the next tick."""
        now = time.time() if now is None else now
        if now - self._last_check >= REAP_EVERY:
            self._last_check = now
            self._check_live(now)
        active = self.frontier.active_jobs()
        if not active:
            return IDLE_SLEEP  # sleep on the wake lists: the next job or cycle pushes a wake
        if self.frontier.cluster:
            self._look_at_moves(now)
        if now - self._runs_checked >= RUNS_EVERY:
            self._runs_checked = now
            self._runs = nodes.take_runs(self.redis, now)
        wake_at = now + IDLE_WAIT
        crowded = False
        if len(self._last_reap) > len(active):
            # Finished jobs' entries go, or a worker serving job after job keeps them all.
            keep = set(active)
            self._last_reap = {j: t for j, t in self._last_reap.items() if j in keep}
            self._last_dispatch = {j: t for j, t in self._last_dispatch.items() if j in keep}
            self._last_refill = {j: t for j, t in self._last_refill.items() if j in keep}
            self._promote_at = {j: t for j, t in self._promote_at.items() if j in keep}
            self._unrecorded = {j: t for j, t in self._unrecorded.items() if j in keep}
        for job_id in active:
            try:
                job = jobcache.load(self.redis, job_id)
            except KeyError:
                self._drop_unrecorded(job_id, now)
                continue
            self._unrecorded.pop(job_id, None)
            if self._held_for_moves(job_id, now):
                wake_at = min(wake_at, now + MOVES_EVERY)
                continue
            s = job.settings
            split = self.frontier.split(job_id)
            if now - self._last_reap.get(job_id, 0.0) >= REAP_EVERY:
                self._last_reap[job_id] = now
                # Placement first: leases rewritten by it expire straight onto the serving shard.
                # (A split frontier's hosts never move: its parts are fixed for the job's life;
                # only task messages on the queues of shards gone or down do.)
                moved = (drain_if_changed if split else rebalance_if_changed)(self.redis, job_id, s.shards, now,
                                                                              self.live)
                if moved and (moved.records or moved.messages):
                    log.warning("job %s: shard change settling: %d records, %d messages moved",
                                job_id, moved.records, moved.messages)
                if (self.frontier.cluster or split) and self.frontier.drop_if_final(job_id):
                    continue
                if split and self.frontier.end_if_done(job_id, now):
                    continue  # each part says when it is idle; this catches a word lost with its caller
                self._reap(job_id, s.delay, s.max_attempts, now)
                self._resend_links(job_id, s.lease_timeout, s.shards, now)
            if now - self._last_refill.get(job_id, 0.0) >= REFILL_EVERY:
                self._last_refill[job_id] = now
                self._refill(job_id, s.shards, s.lease_timeout)
            if now >= self._promote_at.get(job_id, 0.0):
                # Asked again when its first retry is due, or a second on (for retries since).
                due = self.frontier.promote(job_id, now=now)
                self._promote_at[job_id] = min(due if due is not None else now + PROMOTE_EVERY, now + PROMOTE_EVERY)
                if due is not None:
                    wake_at = min(wake_at, due)
            else:
                wake_at = min(wake_at, self._promote_at[job_id])
            mine = [shard for shard in self.shards if shard < s.shards]
            down = self.live.shards(s.shards)
            if split:
                # A split frontier's hosts stay in their part for the job's life: while its shard
                # is down, or after the job's shard count went below its parts, the shard its
                # tasks go to instead (``standby``) dispatches that part. ``mine``: parts.
                mine = [part for part in range(split) if standby(part, s.shards, down) in self.shards]
            if not mine:
                continue
            want = min_free(s.concurrency, s.fetch_batch)
            run = s.host_run if self._runs else 1  # only hosts allowed one request at a time take runs
            # The requests in flight matter only while a batch may be held (``_hold_for_batch``),
            # and for a split frontier, whose parts each count their own.
            last = self._last_dispatch.get(job_id)
            ready, busy = self.frontier.readiness(
                job_id, mine, now, count_busy=not split and last is not None and now - last < BATCH_WINDOW)
            rooms: dict[int, int] = {}
            part_busy: list[int] = []
            mine_busy = share = 0
            if split:
                # This dispatcher's shards' share of the job's concurrency (dispatchers of other
                # shards have theirs; those of the same shards read the same figures), its free
                # slots going to its parts with hosts due, by how many: each part's script keeps
                # its requests within what it was given.
                part_busy = self.frontier.part_busy(job_id)
                busy = sum(part_busy)
                share = -(-s.concurrency * len(mine) // split)
                mine_busy = sum(part_busy[shard] for shard in mine)
                rooms = share_out(share - mine_busy, {shard: ready[shard].due for shard in mine})
            hold = self._hold_for_batch(job_id, ready, busy, s.per_host, s.delay, s.autothrottle, want, now, run)
            if hold is not None:
                wake_at = min(wake_at, hold)
                crowded = True
                continue
            # One token for all of this dispatcher's shards: their URLs fill fetch tasks together.
            token = new_token(now)
            parts: list[tuple[int, Dispatched]] = []
            for shard in mine:
                earliest = ready[shard].earliest
                if not ready[shard].due:
                    # Nothing to lease there (a script call would only say when it is next due).
                    if earliest is not None:
                        wake_at = min(wake_at, earliest)
                    continue
                concurrency, room, free = s.concurrency, s.concurrency, want
                if split:
                    room = rooms.get(shard, 0)
                    if room <= 0:
                        wake_at = min(wake_at, now + BUSY_WAIT)  # the job's concurrency is spent
                        continue
                    concurrency = part_busy[shard] + room
                    # Fewer than min_free of the share free: the part's script waits as the job's
                    # would (but for a host that would take a run of them).
                    wanted = min_free(share, s.fetch_batch)
                    free = room + 1 if mine_busy and share - mine_busy < wanted else min(wanted, room)
                d = self.frontier.dispatch(job_id, shard, max_urls=room, per_host=s.per_host,
                                           delay=s.delay, lease_timeout=s.lease_timeout,
                                           concurrency=concurrency, per_ip=s.per_ip, now=now,
                                           batch=s.fetch_batch, min_free=free, token=token,
                                           offset=parts[-1][1].leased if parts else 0,
                                           depths=not s.uses_bloom, run=run, run_wait=RUN_WAIT)
                parts.append((shard, d))
                crowded = crowded or d.inflight > 1
                if d.saturated:
                    wake_at = min(wake_at, now + BUSY_WAIT)
                elif d.next_due is not None:
                    wake_at = min(wake_at, d.next_due)
            for shard, lease_token, entries in merged_batches(token, s.fetch_batch, parts):
                self.send_fetch(job_id, standby(shard, s.shards, down) if split else shard, lease_token,
                                [e.encode() for e in entries])
            if any(d.items for _, d in parts):
                self._last_dispatch[job_id] = now
        self._crowded = crowded
        return max(0.0, wake_at - time.time())

    def _hold_for_batch(self, job_id: str, ready: dict[int, Readiness], busy: int, per_host: int, delay: float,
                        adaptive: bool, want: int, now: float, run: int = 1) -> float | None:
        """When to dispatch the job's shards instead of now, or None to dispatch now. Under
        per-host delays each due host gives one URL, and hosts come due one by one as their
        delays pass: leasing whatever is due at each wake makes fetch tasks of one or two URLs,
        each paying a whole task's overhead (a fetch, a parse, a store and a dedup task per
        shard). So while requests are in flight, a job leased less than ``BATCH_WINDOW`` ago
        waits for the window to end unless a full batch is due already, or every host is."""
        last = self._last_dispatch.get(job_id)
        if last is None or now - last >= BATCH_WINDOW:
            return None
        due = sum(r.due for r in ready.values())
        live = sum(r.live for r in ready.values())
        # A due host gives a run of URLs (``run``, as many as RUN_WAIT of the job's delay allows),
        # or one URL a request its budget allows.
        if run > 1 and per_host == 1:
            per_due_host = min(run, 1 + int(RUN_WAIT // delay)) if delay > 0 else run
        else:
            per_due_host = 1 if delay > 0 or adaptive else max(1, per_host)
        # Nothing due: no batch to fill, and the tick wakes when the earliest host is due, not at
        # the window's end (a lone host's delay is a few ms).
        if busy == 0 or due == 0 or due * per_due_host >= want or due >= live:
            return None
        return last + BATCH_WINDOW

    def _reap(self, job_id: str, delay: float, max_attempts: int, now: float) -> None:
        reaped = self.frontier.reap(job_id, delay=delay, max_attempts=max_attempts, now=now)
        if reaped.returned:
            log.warning("job %s: %d leases expired and went back to their host queues", job_id, reaped.returned)
        by_shard: dict[int, list[str]] = {}
        shards = jobcache.load(self.redis, job_id).settings.shards
        down = self.live.shards(shards)
        for entry, shard in reaped.abandoned:
            shard = standby(shard, shards, down)
            by_shard.setdefault(shard, []).append(entry.encode())
        for shard, entries in by_shard.items():
            log.error("job %s: %d URLs expired %d times; storing them as failed", job_id, len(entries), max_attempts)
            self.send_failed(job_id, shard, reaped.token, entries)

    def _resend_links(self, job_id: str, lease_timeout: float, shards: int, now: float) -> None:
        if self.send_links is None:
            return
        for token, links in self.frontier.overdue_links(job_id, lease_timeout, now):
            # The shard went away or is down meanwhile: any live one may admit.
            shard = standby(int(token.rsplit(":", 1)[1]), shards, self.live.shards(shards))
            log.warning("job %s: link batch %s not admitted in time; sending it again", job_id, token)
            self.send_links(job_id, shard, token, links)

    def _refill(self, job_id: str, shards: int, lease_timeout: float) -> None:
        """While URLs of the job wait in its store (or on their way there), one refill task at a
        time brings them back as host queues run low (``crawler.frontier.spill``)."""
        mine = [shard for shard in self.shards if shard < shards]
        if self.send_refill is None or not mine:
            return
        _queued, in_store = self.frontier.spill_counts(job_id)
        # The claim lapses by itself should the task be lost, so a refill is never stuck for long.
        if in_store > 0 and self.frontier.start_refill(job_id, min(lease_timeout, REFILL_CLAIM)):
            self.send_refill(job_id, standby(mine[0], shards, self.live.shards(shards)))

    def run(self) -> None:
        wake_keys = [keys.wake(s) for s in self.shards] + [self._own_wake]
        while not self._stop.is_set():
            try:
                wait = self.tick()
                if wait <= 0:
                    continue
                if wait < MIN_BLOCK:
                    # BLPOP sleeps MIN_BLOCK at least; a host due sooner (a lone host's adaptive
                    # delay is about one response time) is waited for exactly.
                    self._stop.wait(wait)
                # Never a fraction Redis 6.2 reads as "for ever", never past the socket timeout.
                elif self.redis.blpop(wake_keys, timeout=block_timeout(wait)) and self._crowded:
                    time.sleep(LINGER)
            except redis.RedisError as exc:
                log.warning("dispatcher: redis unavailable (%s); retrying", exc)
                self._stop.wait(1.0)
            except Exception:  # a bad job must not stop dispatch for the others
                log.exception("dispatcher tick failed")
                self._stop.wait(1.0)

    def stop(self) -> None:
        self._stop.set()
        try:
            pipe = self.redis.pipeline(transaction=False)
            pipe.lpush(self._own_wake, "1")
            pipe.expire(self._own_wake, 60)
            pipe.execute()
        except redis.RedisError:
            pass  # Redis is gone: the wait ends by itself within MAX_BLOCK
