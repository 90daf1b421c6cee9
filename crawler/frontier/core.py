"""The frontier: per-host URL queues and leases in Redis, driven by the scripts in ``lua``.

All politeness state lives here, not in workers: a host is handed out only when its delay has
passed and its in-flight budget allows, and every URL handed out is leased until its page is
stored, so a worker that dies loses nothing.
"""

from __future__ import annotations

import itertools
import json
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from redis import Redis
from redis.commands.core import Script
from redis.exceptions import NoScriptError
from redis.typing import EncodableT, FieldT

from crawler.errors import JobNotFound
from crawler.frontier import liveshards, lua
from crawler.frontier.entry import Entry
from crawler.frontier.sharding import shard_of_host, shard_of_url, standby
from crawler.lru import LRU
from crawler.state import jobconf, keys
from crawler.state.conn import is_cluster_client, mget, queue_script, replicated_write, text, unlink_all
from crawler.state.placement import spread
from crawler.urls import host_key

Lease = tuple[str, str]  # (url, token)
FINAL = ("done", "stopped")  # statuses a job never leaves (``crawler.jobs.FINISHED``)
ACTIVE = ("running", "paused", "starting")  # statuses of a job the active set lists
PARTS_MAX_AGE = 5.0  # seconds a process trusts what it read of a job's frontier parts
# Seconds a split job's parts may stay starting while the job runs (its seeds being admitted)
# before a dispatcher starts them: the submitter died between the two.
STARTING_GRACE = 60.0
# Share of ``lease_timeout`` a lease may have used before a renewal is worth its commands.
FRESH = 0.25


@dataclass(frozen=True)
class Dispatched:
    token: str
    items: list[tuple[Entry, str]]  # (entry, host)
    next_due: float | None  # when the shard's earliest waiting host is due, if any
    saturated: bool = False  # the job's concurrency is spent: more is due than could go
    batch: int = 0  # requests per fetch task; each batch is leased under a token of its own
    inflight: int = 0  # the job's URLs in flight once these are leased
    numbers: tuple[int, ...] = ()  # each item's batch number (a host's run is in one batch)
    leased: int = 0  # requests leased under the token so far, a run counting as one

    def batches(self) -> list[tuple[str, list[Entry]]]:
        """(lease token, entries) per fetch task. Distinct tokens keep the tasks' body keys and
        link batches apart: a link batch is admitted once per token."""
        return [(token, entries) for _, token, entries in merged_batches(self.token, self.batch, [(0, self)])]


@dataclass(frozen=True)
class Readiness:
    """A shard's ready set as the dispatcher weighs it (``Frontier.readiness``)."""

    due: int  # hosts due now
    live: int  # hosts not parked (due now or later)
    earliest: float | None  # when the first of those is due


def merged_batches(token: str, batch: int,
                   parts: Sequence[tuple[int, Dispatched]]) -> list[tuple[int, str, list[Entry]]]:
    """(shard, lease token, entries) per fetch task, for dispatches of several shards made under
    one ``token`` with continuing offsets: each URL is in the batch its lease's token numbers
    (the dispatch's ``numbers``). A task goes to the queue of the shard its first URL came from;
    what its other URLs' shards were stays in their leases, which is all the frontier needs."""
    out: list[tuple[int, str, list[Entry]]] = []
    last = None
    for shard, d in parts:
        for (e, _), n in zip(d.items, d.numbers or [0] * len(d.items), strict=True):
            number = n if batch else 0
            if number != last or not out:
                out.append((shard, f"{token}.{number}" if batch else token, []))
                last = number
            out[-1][2].append(e)
    return out


UNTRIED_AT = -1.0  # a ``Fetched.retry_at``: never requested (a run cut short), back to its queue's head


@dataclass(frozen=True)
class Fetched:
    """One finished request, as the frontier needs it."""

    url: str
    token: str
    retry_at: float = 0.0  # > 0: try again then; UNTRIED_AT: back to the queue, no attempt counted
    ip: str = ""  # the address the host answered from


@dataclass(frozen=True)
class HostStats:
    host: str
    delay: float | None  # its own delay, if it has one (else the job's applies)
    inflight: int
    queued: int
    admitted: int = 0
    fetched: int = 0
    errors: int = 0
    override: HostOverride | None = None
    in_store: int = 0  # URLs of the host waiting in the store's frontier table (or staged for it)


@dataclass(frozen=True)
class HostOverride:
    """What an operator set for one host of a running job (None: the job's setting applies)."""

    delay: float | None = None
    per_host: int | None = None

    def encode(self) -> str:
        delay = "-" if self.delay is None else repr(float(self.delay))
        return f"{delay} {'-' if self.per_host is None else self.per_host}"

    @classmethod
    def decode(cls, raw: str) -> HostOverride:
        d, _, n = raw.partition(" ")
        return cls(None if d in ("-", "") else float(d), None if n in ("-", "") else int(n))


@dataclass(frozen=True)
class Reaped:
    returned: int
    token: str
    abandoned: list[tuple[Entry, int]]  # (entry, shard), leased under ``token``


@dataclass(frozen=True)
class RunPace:
    """What a run waits between its requests: its host's own delay (None: the job's), never
    less than an operator's delay for the host (``override``, None if there is none)."""

    own: float | None
    override: float | None


class Confirmed(list[bool]):
    """Which leases a holder still owns (``Frontier.confirm``), and of those which are a run's
    URLs before its last (``runs``: position -> its ``RunPace``), which the fetch stage fetches
    one after another, then the run's last one."""

    runs: dict[int, RunPace]


class Admitted(list[str]):
    """The URLs an admission queued, and how many of them went to the store (``spilled``)
    because their host's queue was full: a list, so callers that want only the URLs need not
    know about the store."""

    spilled: int = 0


def new_token(now: float | None = None) -> str:
    """A lease token: when it was made (milliseconds, 11 hex digits) and 16 random hex digits.
    The time lets the fetch stage skip renewing leases it confirms while they are fresh."""
    return f"{int((time.time() if now is None else now) * 1000):011x}{uuid.uuid4().hex[:16]}"


def token_time(token: str) -> float | None:
    """When ``new_token`` made ``token`` (or the batch token made from it); None for another form."""
    if len(token) < 27:
        return None
    try:
        return int(token[:11], 16) / 1000
    except ValueError:
        return None



def wake_shards(pipe: Any, shards: Iterable[int | str]) -> None:
    """Add to a pipeline what wakes the shards' dispatchers: a wake list holds one element at
    most, however many wake it before a dispatcher looks."""
    for shard in shards:
        pipe.lpush(keys.wake(shard), "1")
        pipe.ltrim(keys.wake(shard), 0, 0)


def _deadline(now: float, lease_timeout: float, tokens: Iterable[str]) -> str | float:
    """The new expiry of leases under ``tokens``, or "" to leave them as their dispatch set them:
    leased less than ``FRESH`` of the timeout ago, they have most of a timeout left, and
    rewriting it would cost a command per page."""
    fresh = all((made := token_time(t)) is not None and now - made < lease_timeout * FRESH for t in tokens)
    return "" if fresh else now + lease_timeout


def _counts_args(counts: Mapping[str, int] | None) -> list[str | int]:
    """Counters for a script to add (``counts_at`` in ``scripts/helpers.lua``): how many, then
    (name, amount) pairs."""
    nonzero = [(k, v) for k, v in (counts or {}).items() if v]
    return [len(nonzero), *(x for kv in nonzero for x in kv)]


def _by_body_hash(refs: Sequence[str]) -> tuple[dict[str, list[tuple[int, str]]], list[tuple[int, str]]]:
    """Body references (``keys.body_ref``) by the task's hash they are in: {hash: [(position,
    field)]}, and [(position, key)] for bodies under keys of their own; "" and "-" (no body) left out."""
    grouped: dict[str, list[tuple[int, str]]] = {}
    plain: list[tuple[int, str]] = []
    for i, ref in enumerate(refs):
        if ref in ("", "-"):
            continue
        split = keys.split_body_ref(ref)
        if split is None:
            plain.append((i, ref))
        else:
            grouped.setdefault(split[0], []).append((i, split[1]))
    return grouped, plain


def _glob_escape(name: str) -> str:
    """``name`` matched literally by a Redis MATCH pattern."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in name)


def _take_off_active(pipe: Any, job: str) -> None:
    """Add to ``pipe`` what takes an ended job off the active set, then reads its status (read
    after: a new cycle or a resume may have started it meanwhile; see
    ``Frontier._back_if_restarted``)."""
    pipe.srem(keys.JOBS, job)
    pipe.hget(keys.meta(job), "status")


def _lease_host(lease: Lease) -> str:
    return host_key(lease[0])


def _same(x: str) -> str:
    return x


def _flat(leases: Iterable[Lease]) -> list[str]:
    return [part for lease in leases for part in lease]


T = TypeVar("T")

# The job's own tag: a split job is ended there once every part is idle (``Frontier.end_if_done``).
# A split job's record, then each part's: running in cycle ARGV[4] ('' for a one-off job) ->
# ARGV[1] (the job's own: 'waiting' for a periodic job, its cycle's end recorded under the key
# prefix ARGV[3]). Returns the status written, or 0 if it was not running in that cycle: an end
# found for one cycle never ends the next, nor parks a part of it.
_END_SPLIT = """
local status, cycle = ARGV[1], redis.call('HGET', KEYS[1], 'cycle')
if redis.call('HGET', KEYS[1], 'status') ~= 'running' or (cycle or '') ~= ARGV[4] then return 0 end
if cycle and ARGV[3] ~= '' then
  status = 'waiting'
  redis.call('HSET', ARGV[3] .. 'cyc:' .. cycle, 'finished_at', ARGV[2])
end
redis.call('HSET', KEYS[1], 'status', status, 'finished_at', ARGV[2])
return status
"""
# The job's own tag: up to ARGV[1] more of the job's max_pages (ARGV[2]) for one part of a split
# frontier to admit (a negative ARGV[1] gives back what a part did not use). Returns the grant.
_ALLOT = """
local want, budget = tonumber(ARGV[1]), tonumber(ARGV[2])
if want < 0 then
  redis.call('HINCRBY', KEYS[1], 'allotted', want)
  return 0
end
local have = tonumber(redis.call('HGET', KEYS[1], 'allotted') or '0')
local g = math.max(0, math.min(want, budget - have))
if g > 0 then redis.call('HINCRBY', KEYS[1], 'allotted', g) end
return g
"""
# Counters a split job's end is judged by, per part: work open, and what only ever grows while
# work arrives (admissions, requeues for a shorter path, link batches registered).
_END_FIELDS = ["open", "admitted", "depth_requeued", "link_batches"]


def place_parts(client: Redis, job: str, shards: int) -> list[str]:
    """Names for the parts of a job's split frontier (``keys.frontier_part``): ``s<shard>`` each;
    on a Redis Cluster, ``s<shard>.<n>`` so the parts fall on the masters in turn, from the one
    after the master of the job's own tag (``placement.spread``): a job's shards spread over the
    masters by design rather than by where their names happen to hash."""
    return spread(client, keys.meta(job), lambda name: keys.meta(keys.frontier_part(job, name)),
                  [f"s{p}" for p in range(shards)])


class Frontier:
    def __init__(self, redis: Redis) -> None:
        self.redis = redis
        self._admit = redis.register_script(lua.ADMIT)
        self._dispatch = redis.register_script(lua.DISPATCH)
        self._confirm = redis.register_script(lua.CONFIRM)
        self._renew = redis.register_script(lua.RENEW)
        self._fetched = redis.register_script(lua.FETCHED)
        self._release = redis.register_script(lua.RELEASE)
        self._reap = redis.register_script(lua.REAP)
        self._promote = redis.register_script(lua.PROMOTE)
        self._pause = redis.register_script(lua.PAUSE)
        self._resume = redis.register_script(lua.RESUME)
        self._retime = redis.register_script(lua.RETIME)
        self._unpark = redis.register_script(lua.UNPARK)
        self._queue_lengths = redis.register_script(lua.QUEUE_LENGTHS)
        self._claim_cycle = redis.register_script(lua.CLAIM_CYCLE)
        self._run_cycle = redis.register_script(lua.RUN_CYCLE)
        self._refill = redis.register_script(lua.REFILL)
        self._spill_low = redis.register_script(lua.SPILL_LOW)
        self._end_split = redis.register_script(_END_SPLIT)
        self._allot = redis.register_script(_ALLOT)
        self.cluster = is_cluster_client(redis)
        self._starts = (self._resume, self._run_cycle)  # the scripts that may set a job running
        # job -> (when read, the ids of its frontier's parts; () for one under its own tag). Fixed
        # for the job's life but for a rebuild (``crawler recover``) onto other masters, which
        # may name them anew: read again after PARTS_MAX_AGE.
        self._parts: LRU[str, tuple[float, tuple[str, ...]]] = LRU(10_000)
        # (job, link batch) -> the parts ``pending`` found it registered in, for its admission
        self._pending_at: LRU[tuple[str, str], tuple[int, ...]] = LRU(1_000)

    # -- a frontier split over one part per shard (``keys.frontier_part``) ---------------------

    def _part_ids(self, job: str) -> tuple[str, ...]:
        hit = self._parts.get(job)
        now = time.monotonic()
        if hit is not None and now - hit[0] < PARTS_MAX_AGE:
            return hit[1]
        # A job's record names its parts before anything is admitted or listed for dispatch.
        raw = self.redis.hget(keys.meta(job), keys.PARTS_FIELD)
        parts = tuple(keys.frontier_part(job, n) for n in keys.part_names(text(raw))) if raw else ()
        self._parts.put(job, (now, parts))
        return parts

    def split(self, job: str) -> int:
        """How many parts the job's frontier is split into; 0 for one under the job's own tag."""
        return len(self._part_ids(job))

    def spaces(self, job: str) -> list[str]:
        """The ids whose keys hold the job's frontier: each part's, or the job's own."""
        return list(self._part_ids(job)) or [job]

    def space_of_shard(self, job: str, shard: int) -> str:
        parts = self._part_ids(job)
        return parts[shard] if parts else job

    def space_of_host(self, job: str, host: str) -> str:
        """Where the host's records are: its own shard's part (never a backup's: the part is
        fixed for the job's life), or the job's own tag."""
        parts = self._part_ids(job)
        return parts[shard_of_host(host, len(parts))] if parts else job

    def _by_space(self, job: str, items: Sequence[T], host: Callable[[T], str]) -> dict[str, list[int]]:
        """Positions of ``items`` by the part their host (``host(item)``) is in, in order."""
        out: dict[str, list[int]] = {}
        for i, item in enumerate(items):
            out.setdefault(self.space_of_host(job, host(item)), []).append(i)
        return out

    def end_if_done(self, job: str, now: float | None = None) -> bool:
        """A split job ends once no part has work open or a link batch pending. Each part says so
        on its own, so every part is read twice, one read after the other: the same figures
        both times (those that grow while work arrives included) mean no part changed in
        between, so at that moment nothing was open anywhere, and nothing can open again."""
        spaces = self.spaces(job)

        def collect() -> list[Any]:
            pipe = self.redis.pipeline(transaction=False)
            for space in spaces:
                pipe.hmget(keys.counters(space), _END_FIELDS)
                pipe.zcard(keys.pending_links(space))
                pipe.hget(keys.meta(space), "status")
            pipe.hmget(keys.meta(job), ["status", "cycle"])
            return list(pipe.execute())

        first = collect()
        statuses = [text(st or b"") for st in first[2:-1:3]]
        status, cycle = (text(v or b"") for v in first[-1])
        if status == "running" and "starting" in statuses:
            # Its seeds on their way: not idle. Started here if its submitter died before it.
            created = float(self.redis.hget(keys.meta(job), "created_at") or 0)
            if (time.time() if now is None else now) - created > STARTING_GRACE:
                self.start_parts(job, len(spaces))
            return False
        if status != "running" or any(int(r[0] or 0) > 0 for r in first[0:-1:3]) \
                or any(first[1:-1:3]) or any(st != "running" for st in statuses):
            return False
        if collect() != first:
            return False
        now = time.time() if now is None else now
        ended = self._end_split(keys=[keys.meta(job)], args=["done", now, keys.prefix(job), cycle])
        if not ended:
            return False
        for space in spaces:
            self._end_split(keys=[keys.meta(space)], args=[text(ended), now, "", cycle])
        pipe = self.redis.pipeline(transaction=False)
        unlink_all(pipe, keys.session_all(job))
        _take_off_active(pipe, job)
        self._back_if_restarted(job, pipe.execute())
        return True

    def _back_if_restarted(self, job: str, replies: list[Any]) -> None:
        """After ``_take_off_active``'s pipeline: list the job again if a new cycle or a resume
        started it meanwhile."""
        if text(replies[-1] or b"") in ACTIVE:
            self.redis.sadd(keys.JOBS, job)

    def _call(self, script: Script, job: str, *args: str | int | float, space: str = "") -> Any:
        """Run a frontier script for ``job``: KEYS ``lua.job_keys`` of ``space`` (a part of a
        split frontier; the job's own tag by default), ARGV the key prefix, the job and ``args``
        (see ``lua``)."""
        split = bool(self.split(job))
        wrapped = self.cluster or split  # KJOBS left out: the script says what to do (``_unwrap``)
        if wrapped and script in self._starts:
            # Listed before the script may start the job: a caller lost between the two would
            # leave a running job no dispatcher looks at; a listed job that is not running costs
            # a dispatcher a look per tick.
            self.redis.sadd(keys.JOBS, job)
        space = space or job
        got = script(keys=lua.job_keys(space, wrapped), args=[keys.prefix(space), job, *args])
        if script is self._queue_lengths:
            return got  # a read, not wrapped
        result = self._unwrap(job, got)
        if wrapped and script in self._starts:
            self.redis.sadd(keys.JOBS, job)  # again: another's end of the job may have taken it off
        return result

    def _ready_sets(self, job: str, shards: int) -> int:
        """How many ready sets (``ready:0`` ..) a script looking for a host should search: a
        split frontier's part keeps its hosts in the one of its number, whatever the job's shard
        count has become since (``sharding.standby``)."""
        return self.split(job) or shards

    def _serving(self, job: str, parts: Iterable[int]) -> set[int]:
        """The shards whose dispatchers serve a split job's ``parts`` now (``standby``: while a
        part's shard is down, or after the job's shard count went below its parts)."""
        try:
            shards = jobconf.load(self.redis, job).settings.shards
        except JobNotFound:
            return set(parts)
        down = liveshards.down(self.redis, shards)
        return {standby(p, shards, down) for p in parts}

    def _unwrap(self, job: str, got: Any) -> Any:
        """A script's result; on a Redis Cluster or for a split frontier, after waking the
        shards it asked to wake and taking the job off the active set if it ended (a part of a
        split one: if the job's parts are all idle) (``flush_wakes`` in ``scripts/helpers.lua``)."""
        split = bool(self.split(job))
        if not (self.cluster or split):
            return got
        result, woken, ended = got
        ended_here = bool(int(ended)) and not split  # a split job's part only says it is idle
        if woken or ended_here:
            pipe = self.redis.pipeline(transaction=False)
            wake_shards(pipe, self._serving(job, [int(shard) for shard in woken]) if split
                        else [text(shard) for shard in woken])
            if ended_here:
                _take_off_active(pipe, job)
            replies = pipe.execute()
            if ended_here:
                self._back_if_restarted(job, replies)
        if split and int(ended):
            self.end_if_done(job)
        return result

    def admit(self, job: str, entries: Sequence[Entry], shards: int, *, token: str = "",
              budget: int = 0, max_depth: int = 0, host_budget: int = 0, trusted: bool = False,
              now: float | None = None, part: int | None = None, last: bool = True,
              queue_cap: int = 0, counts: Mapping[str, int] | None = None) -> Admitted:
        """Queue the entries whose canonical URL this job has not seen; return those URLs.

        ``token`` names a link batch registered with ``expect``; a batch admitted once is
        ignored when delivered again. ``budget`` caps the URLs a job ever admits (0: none).
        ``max_depth`` (0: none) lets a URL found again by a shorter path be expanded again.
        ``host_budget`` caps the URLs admitted per host (0: none). ``trusted``: the entries were
        judged new already (by the Bloom filter); the exact seen hash is skipped.
        ``part``: these entries are part ``part`` of the batch ``token``, in parts of the same
        composition each time it is delivered; each is admitted once, and the ``last`` one,
        called after all the others, ends the batch. ``queue_cap`` (0: none) caps each host's
        queue in Redis: the URLs over it are staged for the store (``crawler.frontier.spill``).
        ``counts``: to add to the job's counters with the script's own, unless the batch was
        admitted before.
        """
        now = now or time.time()
        k = self.split(job)
        if k:
            return self._admit_split(job, entries, k, token=token, budget=budget, max_depth=max_depth,
                                     host_budget=host_budget, trusted=trusted, now=now, part=part, last=last,
                                     queue_cap=queue_cap, counts=counts)
        args: list[str | int | float] = [token, now, budget, max_depth, host_budget, int(trusted),
                                         "" if part is None else part, int(last), queue_cap, *_counts_args(counts)]
        # Hosts of a shard that is down queue on its backup (a stale view is swept: rebalance).
        down = liveshards.down(self.redis, shards)
        for e in entries:
            args += [e.url, host_key(e.url), shard_of_url(e.url, shards, down), e.encode()]
        got = self._call(self._admit, job, *args)
        out = Admitted(text(u) for u in got[0]) if got else Admitted()
        out.spilled = int(got[1]) if got else 0
        return out

    def _admit_split(self, job: str, entries: Sequence[Entry], k: int, *, token: str, budget: int,
                     max_depth: int, host_budget: int, trusted: bool, now: float, part: int | None,
                     last: bool, queue_cap: int, counts: Mapping[str, int] | None) -> Admitted:
        """``admit`` on a split frontier: each part admits its hosts' entries in a call of its
        own. A link batch is registered in every part (``expect``), so the call that ends it
        goes to every part; a part admits under ``max_pages`` what the job's tag allots it, and
        gives back what it did not use (see ``docs/capacity.md``)."""
        groups: dict[int, list[Entry]] = {}
        for e in entries:
            groups.setdefault(shard_of_url(e.url, k), []).append(e)
        ends = bool(token) and (part is None or last)
        calls = set(groups)
        if ends:  # the batch ends in each part it is registered in (``expect``), entries or none
            known = self._pending_at.pop((job, token))  # as ``pending`` just read it, if it did
            calls.update(known or self._pending_parts(self.spaces(job), token))
        out = Admitted()
        unbudgeted = 0
        for p in sorted(calls):
            space = self.space_of_shard(job, p)
            group = groups.get(p, [])

            def call(token: str, allowance: str | int, group: list[Entry], counts: Mapping[str, int] | None,
                     p: int = p, space: str = space) -> tuple[list[str], int, list[str]]:
                args: list[str | int | float] = [token, now, allowance, max_depth, host_budget, int(trusted),
                                                 "" if part is None else part, int(last), queue_cap,
                                                 *_counts_args(counts)]
                for e in group:
                    args += [e.url, host_key(e.url), p, e.encode()]
                got = self._call(self._admit, job, *args, space=space)
                return ([text(u) for u in got[0]] if got else [], int(got[1]) if got else 0,
                        [text(u) for u in got[2]] if got and len(got) > 2 else [])

            if budget <= 0:
                new, spilled, _ = call(token, budget, group, counts)
                unbudgeted += len(new)
            else:
                # Under max_pages, nothing is reserved for URLs that turn out duplicates (another
                # part's admission could find the budget spent meanwhile): the part first says
                # which are new, then admits those within what the job's tag allots it.
                new, spilled, wanting = call(token, "w0", group, None)
                grant = int(self._allot(keys=[keys.counters(job)], args=[len(wanting), budget])) if wanting else 0
                if wanting or token:  # the second call ends the batch in the part, and counts
                    by_url = {e.url: e for e in group}
                    new2, spilled2, _ = call(token, f"a{grant}", [by_url[u] for u in wanting], counts)
                    if grant > len(new2):
                        self._allot(keys=[keys.counters(job)], args=[len(new2) - grant, budget])
                    new, spilled = new + new2, spilled + spilled2
                elif counts:
                    self.count(job, **counts)
            counts = None  # the caller's counts are added once
            out.extend(new)
            out.spilled += spilled
        if unbudgeted:
            # Counted with no budget too: a max_pages set later allots only what is left.
            self.redis.hincrby(keys.counters(job), "allotted", unbudgeted)
        if ends:
            self.redis.hdel(keys.pending_link_bodies(job), token)
        return out

    def pending(self, job: str, token: str) -> bool:
        """Whether link batch ``token`` is registered and not yet wholly admitted."""
        spaces = self.spaces(job)
        if len(spaces) == 1:
            return self.redis.zscore(keys.pending_links(spaces[0]), token) is not None
        at = self._pending_parts(spaces, token)
        self._pending_at.put((job, token), at)  # for the admission that follows (``_admit_split``)
        return bool(at)

    def _pending_parts(self, spaces: Sequence[str], token: str) -> tuple[int, ...]:
        """The parts (by number) link batch ``token`` is registered in, in one round trip."""
        pipe = self.redis.pipeline(transaction=False)
        for space in spaces:
            pipe.zscore(keys.pending_links(space), token)
        return tuple(p for p, score in enumerate(pipe.execute()) if score is not None)

    def expect(self, job: str, batches: Mapping[str, Any] | Sequence[str], lease_timeout: float = 60.0,
               shards: Mapping[str, int] | None = None) -> None:
        """Register link batches on their way to dedup, so the job is not done before them.
        With their links (``{token: links}``), a batch whose message is lost (a worker killed
        between taking it off the queue and recording it as unacknowledged) is sent again by
        the dispatcher after ``lease_timeout`` (``overdue_links``)."""
        if not batches:
            return
        deadline = time.time() + lease_timeout
        # On a cluster, written to the job's master itself and waited on until a replica has it:
        # a batch whose record a failover lost would be taken for one admitted before.
        # A split frontier registers the batch in every part (each admits its own hosts' links
        # once) and keeps its links once, under the job's own tag.
        spaces = self.spaces(job)
        split = spaces != [job]
        bodies = {t: json.dumps(v) for t, v in batches.items()} if isinstance(batches, Mapping) else {}
        if split and bodies:  # first: a part's record is never without them
            replicated_write(self.redis, keys.pending_link_bodies(job),
                             lambda pipe: pipe.hset(keys.pending_link_bodies(job), mapping=bodies))
        # ``shards``: the shard whose hosts' links each batch holds; a split frontier registers
        # it in that part alone, else (a batch of any hosts) in every part.
        where: dict[str, list[str]] = {}
        for t in batches:
            for space in [spaces[shards[t]]] if split and shards and t in shards else spaces:
                where.setdefault(space, []).append(t)
        for space, tokens in where.items():

            def fill(pipe: Any, space: str = space, tokens: list[str] = tokens) -> None:
                pipe.zadd(keys.pending_links(space), dict.fromkeys(tokens, deadline))
                if split:
                    pipe.hincrby(keys.counters(space), "link_batches", len(tokens))
                elif bodies:
                    pipe.hset(keys.pending_link_bodies(job), mapping=bodies)

            replicated_write(self.redis, keys.pending_links(space), fill)

    def overdue_links(self, job: str, lease_timeout: float, now: float | None = None,
                      limit: int = 100) -> list[tuple[str, list[Any]]]:
        """Link batches registered and still not admitted after their deadline: (token, links)
        to send to dedup again (admission is once per token, so a late original is harmless)."""
        now = time.time() if now is None else now
        tokens: list[str] = []
        for space in self.spaces(job):
            pend = keys.pending_links(space)
            got = [text(t) for t in self.redis.zrangebyscore(pend, "-inf", now, start=0, num=limit)]
            if got:
                self.redis.zadd(pend, dict.fromkeys(got, now + lease_timeout), xx=True)
            tokens += [t for t in got if t not in tokens]
        if not tokens:
            return []
        raw = self.redis.hmget(keys.pending_link_bodies(job), tokens)
        return [(t, json.loads(r)) for t, r in zip(tokens, raw, strict=True) if r is not None]

    def dispatch(self, job: str, shard: int, *, max_urls: int, per_host: int, delay: float,
                 lease_timeout: float, concurrency: int, per_ip: int = 0, now: float | None = None,
                 batch: int = 0, min_free: int = 0, token: str | None = None, offset: int = 0,
                 depths: bool = True, run: int = 1, run_wait: float = 0.0) -> Dispatched:
        """Lease the URLs of due hosts within the host, address and job budgets; ``batch``: URLs
        per fetch task (see ``Dispatched.batches``); ``min_free``: while requests are in flight,
        lease nothing until this many slots are free. ``token`` and ``offset``: lease under a token
        an earlier call (for another shard) used, numbering batches on from its ``offset`` requests
        (the earlier call's ``Dispatched.leased``),
        so one dispatcher's shards fill fetch tasks together (see ``merged_batches``). ``depths``
        False: the job's seen set keeps no depths (a Bloom filter's job), none are looked up.
        ``run`` > 1: a host that may have one request in flight gives up to this many URLs, as
        long as its delay between them adds up to ``run_wait`` seconds at most, fetched one
        after another by one task under the host's one slot (see ``Confirmed``)."""
        now = time.time() if now is None else now
        token = token or new_token(now)
        flat, nxt, slots, inflight, leased = self._call(
            self._dispatch, job, shard, now, max_urls, per_host, delay, now + lease_timeout, token, concurrency,
            per_ip, batch, min_free, offset, int(depths), run, run_wait, space=self.space_of_shard(job, shard))
        items = [(Entry.decode(flat[i]), flat[i + 1].decode()) for i in range(0, len(flat), 3)]
        numbers = tuple(int(flat[i]) for i in range(2, len(flat), 3))
        due = float(nxt) if nxt else None
        return Dispatched(token, items, due if due is not None and due < lua.PARKED else None, int(slots) == 0,
                          batch, int(inflight), numbers, int(leased))

    def confirm(self, job: str, leases: Sequence[Lease], lease_timeout: float) -> Confirmed:
        """Before fetching: which of these leases the caller still holds (a redelivered batch
        whose leases expired and went to someone else must not fetch them again), and which of
        them are runs' (``Confirmed.runs``); renews those it holds for ``lease_timeout``."""
        out = Confirmed()
        out.runs = {}
        if not leases:
            return out
        now = time.time()
        deadline = _deadline(now, lease_timeout, [t for _, t in leases])
        res: list[Any] = [None] * len(leases)
        for space, at in self._by_space(job, leases, _lease_host).items():
            got = self._call(self._confirm, job, deadline, *_flat(leases[i] for i in at), space=space)
            for i, r in zip(at, got, strict=True):
                res[i] = r
        for i, r in enumerate(res):
            if isinstance(r, bytes):  # b"r", the host's own delay, a space, its override
                own, _, override = r[1:].decode().partition(" ")
                out.runs[i] = RunPace(float(own) if own else None,
                                      HostOverride.decode(override).delay if override else None)
            out.append(bool(r))
        return out

    def renew(self, job: str, leases: Sequence[Lease], lease_timeout: float, *, extra: float = 0.0,
              since: float | None = None) -> int:
        """Keep the leases this holder still owns (fetched or not) for ``lease_timeout`` more
        seconds, plus ``extra`` (a store retry's wait), so pages that parse and store are
        holding do not expire back to the frontier. Never shortens a lease. Returns how many,
        or -1 when nothing was asked of Redis: ``since`` is a time after which every one of these
        leases had at least ``1 - FRESH`` of ``lease_timeout`` left (the earliest fetch of their
        pages: ``fetched`` renews a lease older than that), and less than ``FRESH`` of it has
        passed, so a renewal would buy little (the usual page, parsed and stored within a
        second)."""
        if not leases:
            return 0
        now = time.time()
        if since is not None and not extra and now - since < lease_timeout * FRESH:
            return -1
        deadline = now + lease_timeout + extra
        return sum(int(self._call(self._renew, job, deadline, *_flat(leases[i] for i in at), space=space))
                   for space, at in self._by_space(job, leases, _lease_host).items())

    def fetched(self, job: str, done: Sequence[Fetched], *, lease_timeout: float, delay: float,
                pipe: Any = None, delays: Mapping[str, float] | None = None,
                counts: Mapping[str, int] | None = None) -> None:
        """The requests are over: free their hosts' slots (the host may go again after its
        delay), learn the hosts' addresses, renew the leases until the pages are stored, and send
        those with a ``retry_at`` to wait out their backoff. ``delays``: the hosts' own delays
        as the caller has just set them (``set_host_delays``), so the script need not read them.
        ``pipe``: the caller's pipeline (not a transaction), which gets the script last and is
        executed here, raising its first error as ``execute`` would. ``counts``: to add to the
        job's counters, with the script's own (a write of them all)."""
        if not done and counts:
            self.count(job, pipe=pipe, **counts)
        calls: list[tuple[str, list[str | int | float]]] = []  # (space, args) per part
        if done:
            now = time.time()
            own = delays or {}
            deadline = _deadline(now, lease_timeout, [f.token for f in done])
            for space, at in self._by_space(job, done, lambda f: host_key(f.url)).items():
                calls.append((space, [now, deadline, delay, *_counts_args(counts),
                                      *(part for f in (done[i] for i in at) for host in (host_key(f.url),)
                                        for part in (f.url, f.token, f.retry_at, f.ip,
                                                     own.get(host, "") if own else "", host))]))
                counts = None  # added once
        if pipe is None:
            for space, args in calls:
                self._call(self._fetched, job, *args, space=space)
            return
        # A cluster's pipeline takes no scripts, nor one on a split frontier (``_unwrap``'s work).
        in_pipe = bool(calls) and not self.cluster and calls[0][0] == job
        if in_pipe:
            queue_script(pipe, self._fetched, lua.job_keys(job), [keys.prefix(job), job, *calls[0][1]])
        results = pipe.execute(raise_on_error=False)
        if in_pipe and isinstance(results[-1], NoScriptError):  # a Redis restarted or failed over
            results[-1] = self._call(self._fetched, job, *calls[0][1])
        failed = next((r for r in results if isinstance(r, Exception)), None)
        if failed is not None:
            raise failed
        if not in_pipe:
            for space, args in calls:
                self._call(self._fetched, job, *args, space=space)  # last, as they would have run in it

    def host_politeness(self, job: str, hosts: Sequence[str]) -> tuple[list[HostOverride | None], list[float | None]]:
        """The operator's overrides and the hosts' own delays, in one round trip."""
        if not hosts:
            return [], []
        pipe = self.redis.pipeline(transaction=False)
        groups = self._by_space(job, hosts, _same)
        for space, at in groups.items():
            pipe.hmget(keys.host_overrides(space), [hosts[i] for i in at])
            pipe.hmget(keys.host_delays(space), [hosts[i] for i in at])
        got = pipe.execute()
        overrides: list[Any] = [None] * len(hosts)
        delays: list[Any] = [None] * len(hosts)
        for n, at in enumerate(groups.values()):
            for i, o, d in zip(at, got[2 * n], got[2 * n + 1], strict=True):
                overrides[i], delays[i] = o, d
        return ([None if raw is None else HostOverride.decode(text(raw)) for raw in overrides],
                [None if raw is None else float(raw) for raw in delays])

    def release(self, job: str, leases: Sequence[Lease], *, delay: float, max_depth: int = 0,
                counts: Mapping[str, int] | None = None) -> int:
        """The pages are stored: end their leases. Returns how many this call ended. ``counts``:
        to add to the job's counters, with the script's own."""
        return int(self._released(job, leases, delay, max_depth, counts, tell=False)[0])

    def release_stored(self, job: str, leases: Sequence[Lease], *, delay: float, max_depth: int = 0,
                       counts: Mapping[str, int] | None = None) -> list[str]:
        """``release``, returning the URLs whose leases this call ended as stored: not one whose
        lease had expired and gone to another fetch, nor one queued again for a shorter path."""
        return [text(u) for u in self._released(job, leases, delay, max_depth, counts, tell=True)[1]]

    def _released(self, job: str, leases: Sequence[Lease], delay: float, max_depth: int,
                  counts: Mapping[str, int] | None, tell: bool) -> tuple[int, list[Any]]:
        if not leases:
            if counts:
                self.count(job, **counts)
            return 0, []
        total, stored = 0, []
        now = time.time()
        for space, at in self._by_space(job, leases, _lease_host).items():
            n, done = self._call(self._release, job, now, delay, max_depth, int(tell), *_counts_args(counts),
                                 *_flat(leases[i] for i in at), space=space)
            counts = None  # added once
            total += int(n)
            stored += done
        return total, stored

    def reap(self, job: str, *, delay: float, max_attempts: int, now: float | None = None,
             limit: int = 1000) -> Reaped:
        """Return expired leases to the front of their host queues, one more attempt counted;
        those out of attempts are re-leased under ``Reaped.token`` for the caller to store as
        failed (``lease_expired``)."""
        token = new_token()
        returned, abandoned = 0, []
        for space in self.spaces(job):
            back, gone = self._call(self._reap, job, now or time.time(), delay, limit, max_attempts, token,
                                    space=space)
            returned += int(back)
            abandoned += [(Entry.decode(gone[i]), int(gone[i + 1])) for i in range(0, len(gone), 2)]
        return Reaped(returned, token, abandoned)

    def readiness(self, job: str, shards: Sequence[int], now: float,
                  count_busy: bool = True) -> tuple[dict[int, Readiness], int]:
        """Per shard, its hosts due now, its hosts not parked and when the earliest of those is
        due; and the job's requests in flight or held (0 unless ``count_busy``): what the
        dispatcher weighs before leasing, in one round trip for all its shards."""
        pipe = self.redis.pipeline(transaction=False)
        unparked = f"({lua.PARKED:.0f}"
        for shard in shards:
            ready = keys.ready(self.space_of_shard(job, shard), shard)
            pipe.zcount(ready, "-inf", now)
            pipe.zcount(ready, "-inf", unparked)
            pipe.zrangebyscore(ready, "-inf", unparked, start=0, num=1, withscores=True)
        # A split frontier's parts count their own requests: those of the dispatcher's shards.
        counted = sorted({self.space_of_shard(job, shard) for shard in shards}) if self.split(job) else [job]
        for space in counted if count_busy else []:
            pipe.hmget(keys.counters(space), "inflight", "held")
        got = pipe.execute()
        busy = sum(int(n or 0) for pair in got[3 * len(shards):] for n in pair)
        out = {}
        for i, shard in enumerate(shards):
            due, live, first = got[3 * i: 3 * i + 3]
            out[shard] = Readiness(int(due), int(live), float(first[0][1]) if first else None)
        return out, busy

    def part_busy(self, job: str) -> list[int]:
        """Requests in flight or held in each part of a split frontier, by shard, in one round trip."""
        pipe = self.redis.pipeline(transaction=False)
        for space in self.spaces(job):
            pipe.hmget(keys.counters(space), "inflight", "held")
        return [int(a or 0) + int(b or 0) for a, b in pipe.execute()]

    def promote(self, job: str, *, now: float | None = None, limit: int = 1000) -> float | None:
        """Move retries whose backoff is over back to their host queues; return when the next
        one is due, if any."""
        due = [float(nxt) for space in self.spaces(job)
               for _moved, nxt in [self._call(self._promote, job, now or time.time(), limit, space=space)] if nxt]
        return min(due) if due else None

    def queued(self, job: str, shard: int) -> int:
        """Hosts waiting in a shard's ready set (for status and tests)."""
        return int(self.redis.zcard(keys.ready(self.space_of_shard(job, shard), shard)))

    # -- the store's share of the queues (``crawler.frontier.spill``) ------------------------

    def staged(self, job: str, limit: int = 5000, older_than: float | None = None) -> list[tuple[str, str, int, str]]:
        """URLs staged for the store, oldest first: (member, host, seq, entry). ``older_than``:
        only those staged before then."""
        hi: float | str = "+inf" if older_than is None else older_than
        out: list[tuple[str, str, int, str]] = []
        for space in self.spaces(job):
            for raw in self.redis.zrangebyscore(keys.spill_staged(space), "-inf", hi, start=0, num=limit - len(out)):
                member = text(raw)
                seq, host, entry = member.split(" ", 2)
                out.append((member, host, int(seq), entry))
            if len(out) >= limit:
                break
        return out

    def unstage(self, job: str, members: Sequence[str]) -> None:
        """The staged URLs are in the store now."""
        for space, at in self._by_space(job, members, lambda m: m.split(" ", 2)[1]).items():
            for i in range(0, len(at), 1000):
                self.redis.zrem(keys.spill_staged(space), *(members[j] for j in at[i:i + 1000]))

    def hosts_to_refill(self, job: str, low: int) -> list[tuple[str, int, int]]:
        """(host, refilled seq, sent seq) of hosts with URLs in the store and at most ``low`` in Redis."""
        return [(text(flat[i]), int(flat[i + 1]), int(flat[i + 2])) for space in self.spaces(job)
                for flat in [self._call(self._spill_low, job, low, space=space)] for i in range(0, len(flat), 3)]

    def refill(self, job: str, host: str, shard: int, rows: Sequence[tuple[int, str]],
               now: float | None = None) -> int:
        """Queue the host's next URLs read back from the store, each once and in order (see
        ``lua.REFILL``). Returns the host's refilled sequence number."""
        flat = [x for seq, entry in rows for x in (seq, entry)]
        space = self.space_of_host(job, host)
        if space != job:
            shard = shard_of_host(host, self.split(job))  # a part's hosts are served by its shard
        return int(self._call(self._refill, job, now or time.time(), host, shard, *flat, space=space))

    def start_refill(self, job: str, ttl: float) -> bool:
        """True for the one caller that is to send the job's refill task now (the claim lapses
        after ``ttl`` seconds, should the task be lost)."""
        return bool(self.redis.set(keys.spill_lock(job), "1", nx=True, ex=max(1, int(ttl))))

    def end_refill(self, job: str) -> None:
        self.redis.delete(keys.spill_lock(job))

    def spill_counts(self, job: str) -> tuple[int, int]:
        """(URLs queued in Redis, URLs waiting in the store or on their way to it)."""
        c = self.counters(job, ("queued", "spilled", "refilled"))
        return c["queued"], c["spilled"] - c["refilled"]

    def counters(self, job: str, names: Sequence[str] = ()) -> dict[str, int]:
        """The job's counters (only ``names``, if given): those under its own tag, plus each
        part's of a split frontier."""
        spaces = self.spaces(job)
        pipe = self.redis.pipeline(transaction=False)
        for space in [job, *(spaces if spaces != [job] else [])]:
            if names:
                pipe.hmget(keys.counters(space), list(names))
            else:
                pipe.hgetall(keys.counters(space))
        out: dict[str, int] = dict.fromkeys(names, 0)
        for got in pipe.execute():
            for k, v in zip(names, got, strict=True) if names else got.items():
                if v is not None:
                    out[text(k)] = out.get(text(k), 0) + int(v)
        return out

    # -- what other modules need of the frontier's records --------------------------------

    def active_jobs(self) -> list[str]:
        """Jobs that may have work to dispatch (the admit and done scripts keep the set)."""
        return sorted(text(m) for m in self.redis.smembers(keys.JOBS))

    def drop_if_final(self, job: str) -> bool:
        """Take a job whose status is final off the active set. On a Redis Cluster the script
        that ends a job only says so and its caller takes it off (``_unwrap``): a caller lost in
        between would leave it there, looked at by every dispatcher tick for ever."""
        if text(self.redis.hget(keys.meta(job), "status") or b"") not in FINAL:
            return False
        self.redis.srem(keys.JOBS, job)
        return True

    def drop_if_unrecorded(self, job: str) -> bool:
        """Take a job Redis holds no record of off the active set."""
        if self.redis.exists(keys.meta(job)):
            return False
        self.redis.srem(keys.JOBS, job)
        return True

    def count(self, job: str, pipe: Any = None, **deltas: int) -> None:
        """Add to the job's counters, beside those the scripts keep. ``pipe``: a pipeline to add
        them to, executed by the caller."""
        own = pipe is None
        pipe = self.redis.pipeline(transaction=False) if own else pipe
        for name, delta in deltas.items():
            if delta:
                pipe.hincrby(keys.counters(job), name, delta)
        if own:
            pipe.execute()

    def host_stats(self, job: str, scan_queues: bool = True) -> list[HostStats]:
        """Every host the job has admitted URLs of, fetched from, a delay or an override of its
        own for, requests in flight to, or a queue for, by name. ``scan_queues`` False skips
        the SCAN for queues of hosts none of the others name (there are none while the per-host
        budget is on, which counts every admission): a SCAN walks the whole keyspace."""
        table = [h for space in self.spaces(job) for h in self._host_stats(job, space, scan_queues)]
        return sorted(table, key=lambda h: h.host)

    def _host_stats(self, job: str, space: str, scan_queues: bool) -> list[HostStats]:
        pipe = self.redis.pipeline(transaction=False)
        for key in (keys.host_delays(space), keys.host_inflight(space), keys.host_admitted(space),
                    keys.host_fetched(space), keys.host_errors(space), keys.host_overrides(space),
                    keys.spill_seq(space), keys.spill_refilled(space)):
            pipe.hgetall(key)
        raw = [{text(k): text(v) for k, v in h.items()} for h in pipe.execute()]
        delays, inflight, admitted, fetched, errors, overrides, sent, refilled = raw
        names = set().union(*raw)
        if scan_queues:
            cut = len(keys.host_queue(space, ""))
            names.update(text(k)[cut:] for k in self.redis.scan_iter(keys.host_queue_pattern(space), count=1000))
        ordered = sorted(names)
        lengths: list[int] = []
        for i in range(0, len(ordered), 10_000):  # each call holds Redis for a few ms at most
            lengths += self._call(self._queue_lengths, job, *ordered[i:i + 10_000], space=space)
        return [HostStats(h, float(delays[h]) if h in delays else None, int(inflight.get(h, 0)), int(q),
                          admitted=int(admitted.get(h, 0)), fetched=int(fetched.get(h, 0)),
                          errors=int(errors.get(h, 0)),
                          override=HostOverride.decode(overrides[h]) if h in overrides else None,
                          in_store=int(sent.get(h, 0)) - int(refilled.get(h, 0)))
                for h, q in zip(ordered, lengths, strict=True)]

    def count_hosts(self, job: str, errors: Mapping[str, int], pipe: Any) -> None:
        """Add to the hosts' error counts (in the caller's pipeline); ``fetched`` counts the pages
        fetched from each."""
        for host, n in errors.items():
            pipe.hincrby(keys.host_errors(self.space_of_host(job, host)), host, n)

    def host_known(self, job: str, host: str) -> bool:
        """Whether the job has admitted a URL of the host, fetched from it or has one in flight."""
        pipe = self.redis.pipeline(transaction=False)
        space = self.space_of_host(job, host)
        for key in (keys.host_admitted(space), keys.host_fetched(space), keys.host_inflight(space)):
            pipe.hexists(key, host)
        pipe.exists(keys.host_queue(space, host))
        return any(pipe.execute())

    def hosts_like(self, job: str, host: str, limit: int = 3) -> list[str]:
        """Up to ``limit`` hosts of the job named ``host`` with a port."""
        found = itertools.chain.from_iterable(
            self.redis.hscan_iter(keys.host_admitted(space), match=f"{_glob_escape(host)}:*", count=1000)
            for space in self.spaces(job))
        return sorted(text(h) for h, _ in itertools.islice(found, limit))

    def host_overrides(self, job: str, hosts: Sequence[str]) -> list[HostOverride | None]:
        """The operator's overrides of these hosts (None where there is none)."""
        return self.host_politeness(job, hosts)[0]

    def set_host_override(self, job: str, host: str, override: HostOverride, shards: int) -> None:
        """Give one host its own delay and/or in-flight limit. The delay becomes the host's
        current delay at once (adaptive politeness then moves it from there, never below it),
        and a host waiting out a longer delay may go when the new one has passed."""
        space = self.space_of_host(job, host)
        pipe = self.redis.pipeline(transaction=True)
        pipe.hset(keys.host_overrides(space), host, override.encode())
        if override.delay is not None:
            pipe.hset(keys.host_delays(space), host, override.delay)
        pipe.execute()
        if override.delay is not None:
            self.retime(job, {host: override.delay}, shards)
        if override.per_host is not None:
            self._call(self._unpark, job, time.time(), self._ready_sets(job, shards), host, space=space)
        self.wake(shards)

    def clear_host_override(self, job: str, host: str, shards: int) -> bool:
        """The job's settings apply to the host again (its adaptive delay starts over)."""
        space = self.space_of_host(job, host)
        pipe = self.redis.pipeline(transaction=True)
        pipe.hdel(keys.host_overrides(space), host)
        pipe.hdel(keys.host_delays(space), host)
        gone, _ = pipe.execute()
        self._call(self._unpark, job, time.time(), self._ready_sets(job, shards), host, space=space)
        self.wake(shards)
        return bool(gone)

    def retime(self, job: str, delays: Mapping[str, float], shards: int, now: float | None = None) -> int:
        """Hosts waiting out a delay longer than the one given here may go once it has passed.
        Returns how many were brought forward."""
        now = time.time() if now is None else now
        moved = 0
        items = list(delays.items())
        for space, at in self._by_space(job, items, lambda it: it[0]).items():
            for i in range(0, len(at), 500):
                flat = [x for host, d in (items[j] for j in at[i:i + 500]) for x in (host, d)]
                moved += int(self._call(self._retime, job, now, self._ready_sets(job, shards), *flat, space=space))
        return moved

    def rebase_delays(self, job: str, old: float, new: float) -> list[str]:
        """The job's delay changed from ``old`` to ``new``: hosts whose adaptive delay sits at the
        old floor (healthy ones) take the new one at once; hosts backing off (above it) and hosts
        with an operator's override keep theirs. Returns the hosts rebased."""
        rebased = []
        for space in self.spaces(job):
            overridden = set(text(h) for h in self.redis.hkeys(keys.host_overrides(space)))
            at_floor = [text(h) for h, d in self.redis.hgetall(keys.host_delays(space)).items()
                        if text(h) not in overridden and abs(float(d) - old) <= max(1e-3, old * 0.01)]
            for i in range(0, len(at_floor), 1000):
                self.redis.hdel(keys.host_delays(space), *at_floor[i:i + 1000])
            rebased += at_floor
        return rebased

    def waiting_hosts(self, job: str) -> list[str]:
        """Hosts with a next-allowed time recorded (those a shorter delay could bring forward)."""
        return [text(h) for space in self.spaces(job) for h in self.redis.hkeys(keys.host_next(space))]

    def wake(self, shards: int) -> None:
        """Make the shards' dispatchers look again now."""
        pipe = self.redis.pipeline(transaction=False)
        wake_shards(pipe, range(shards))
        pipe.execute()

    def host_delays(self, job: str, hosts: Sequence[str]) -> list[float | None]:
        """The hosts' own delays (None: the job's applies)."""
        return self.host_politeness(job, hosts)[1]

    def set_host_delays(self, job: str, delays: Mapping[str, float], pipe: Any = None) -> None:
        """Give hosts delays of their own (adaptive politeness); dispatch applies them.
        ``pipe``: a pipeline to add the write to, executed by the caller."""
        hosts = list(delays)
        for space, at in self._by_space(job, hosts, _same).items():
            fields: dict[FieldT, EncodableT] = {hosts[i]: delays[hosts[i]] for i in at}
            (pipe or self.redis).hset(keys.host_delays(space), mapping=fields)

    def hold_bodies(self, job: str, token: str, bodies: Mapping[str, bytes], ttl: float,
                    pipe: Any = None) -> dict[str, str]:
        """Keep fetched pages' bodies (by URL) for parse and store, for ``ttl`` seconds at most, in
        one hash for the task (``keys.body_batch``); returns the reference each travels under in
        messages. ``pipe``: a pipeline to add the writes to."""
        if not bodies:
            return {}
        key = keys.body_batch(job, token)
        target = pipe if pipe is not None else self.redis.pipeline(transaction=False)
        target.hset(key, mapping={keys.body_field(url): body for url, body in bodies.items()})
        target.expire(key, int(ttl))
        if pipe is None:
            target.execute()
        return {url: keys.body_ref(job, token, url) for url in bodies}

    def hold_body(self, job: str, token: str, url: str, body: bytes, ttl: float, pipe: Any = None) -> str:
        """``hold_bodies`` for one page."""
        return self.hold_bodies(job, token, {url: body}, ttl, pipe)[url]

    def bodies(self, refs: Sequence[str]) -> list[bytes | None]:
        """The bodies under ``refs`` (None for one that expired or that Redis lost, and for "" or
        "-"): one HMGET per task's hash, one MGET for keys of their own (from before hashes)."""
        out: list[bytes | None] = [None] * len(refs)
        grouped, plain = _by_body_hash(refs)
        if plain:
            # The client does not decode responses: values come back as bytes.
            for (i, _), value in zip(plain, mget(self.redis, [k for _, k in plain]), strict=True):
                out[i] = value
        if grouped:
            pipe = self.redis.pipeline(transaction=False)
            for key, items in grouped.items():
                pipe.hmget(key, [field for _, field in items])
            for items, values in zip(grouped.values(), pipe.execute(), strict=True):
                for (i, _), value in zip(items, values, strict=True):
                    out[i] = value
        return out

    def drop_bodies(self, refs: Sequence[str], pipe: Any = None) -> None:
        """The pages are stored: their bodies go (a task's hash goes with its last field)."""
        grouped, plain = _by_body_hash(refs)
        target = pipe or self.redis
        if plain:
            unlink_all(target, [k for _, k in plain])
        for key, items in grouped.items():
            target.hdel(key, *(field for _, field in items))

    def claim_sitemaps(self, job: str, origin: str) -> bool:
        """True for the one caller that is to read the origin's sitemaps for the job."""
        return bool(self.redis.sadd(keys.sitemaps(job), origin))

    def host_admitted(self, job: str, hosts: Sequence[str]) -> list[int]:
        """URLs admitted so far for each host (its page budget's count)."""
        out = [0] * len(hosts)
        for space, at in self._by_space(job, hosts, _same).items():
            for i, n in zip(at, self.redis.hmget(keys.host_admitted(space), [hosts[i] for i in at]), strict=True):
                out[i] = int(n or 0)
        return out

    def add_host_admitted(self, job: str, per_host: Mapping[str, int]) -> None:
        """Count URLs as admitted for their hosts' page budgets (a rebuilt job's stored pages)."""
        pipe = self.redis.pipeline(transaction=False)
        for host, n in per_host.items():
            pipe.hincrby(keys.host_admitted(self.space_of_host(job, host)), host, n)
        pipe.execute()

    def mark_seen(self, job: str, marks: Mapping[str, str]) -> None:
        """Set URLs' marks in the exact seen set: ``x<depth>`` stored, ``s`` skipped this cycle
        (see ``lua``)."""
        urls = list(marks)
        for space, at in self._by_space(job, urls, host_key).items():
            fields: dict[FieldT, EncodableT] = {urls[i]: marks[urls[i]] for i in at}
            self.redis.hset(keys.seen(space), mapping=fields)

    def clear_seen(self, job: str) -> int:
        """Forget which URLs the job has seen in the exact set. Returns keys deleted."""
        return sum(int(self.redis.delete(keys.seen(space))) for space in self.spaces(job))

    def reset_admitted(self, job: str) -> None:
        """Restart the count the job's page budget (``max_pages``) is checked against."""
        for space in self.spaces(job):
            self.redis.hset(keys.counters(space), "admitted", 0)
        if self.split(job):  # what the parts were allotted of it (``_ALLOT``), and a rebuild's count
            self.redis.hset(keys.counters(job), mapping={"allotted": 0, "admitted": 0})

    def reset_seen(self, job: str) -> None:
        """Forget which URLs the job has seen and how many each host had admitted (a periodic
        job's new cycle)."""
        for space in self.spaces(job):
            self.redis.delete(keys.seen(space), keys.host_admitted(space))

    def pause(self, job: str) -> str:
        """Running or waiting -> paused. Returns the status the job had ('' if none)."""
        now = time.time()
        was = text(self._call(self._pause, job, now) or b"")
        # The job's own first: it is what is shown. Its parts only if it took: a job starting a
        # cycle is not paused, and its parts, perhaps running already, must run with it.
        for space in self.spaces(job) if self.split(job) and was in ("running", "waiting", "paused") else []:
            self._call(self._pause, job, now, space=space)
        return was

    def resume(self, job: str, shards: int) -> str:
        """Paused -> what it was, its ``shards`` woken. Returns the status the job had."""
        now = time.time()
        # The parts first, then the job's own: a split job is ended once that runs again.
        for space in self.spaces(job) if self.split(job) else []:
            self._call(self._resume, job, now, shards, space=space)
        was = self._call(self._resume, job, now, shards)
        return was.decode() if was else ""

    def claim_cycle(self, job: str, now: float, following: float, stale: float) -> tuple[int, bool] | None:
        """Start the periodic job's next cycle if it is due, once however many callers race:
        (cycle, True) to the winner, (cycle, False) for a start that crashed and is older than
        ``stale`` seconds, None otherwise. ``following``: when the cycle after it is due."""
        got = self._call(self._claim_cycle, job, now, following, stale)
        if not got:
            return None
        if self.split(job):
            # Its parts wait with it; they run once the cycle's work is queued (``run_cycle``).
            pipe = self.redis.pipeline(transaction=False)
            for space in self.spaces(job):
                pipe.hset(keys.meta(space), mapping={"status": "starting", "cycle": int(got[0])})
            pipe.execute()
        return int(got[0]), bool(int(got[1]))

    def run_cycle(self, job: str, shards: int) -> bool:
        """A starting cycle's work is queued: the job runs, its shards woken (done at once if
        nothing is open). False if the job was not starting."""
        self.start_parts(job, shards)  # first: a split job is ended once the job's own runs again
        return bool(self._call(self._run_cycle, job, time.time(), shards))

    def start_parts(self, job: str, shards: int) -> None:
        """A split job's parts go from starting to running (its seeds or rebuilt queues are in)."""
        now = time.time()
        spaces = self.spaces(job) if self.split(job) else []
        for space in spaces:
            self._call(self._run_cycle, job, now, shards, space=space)
        status = text(self.redis.hget(keys.meta(job), "status") or b"") if spaces else ""
        if status == "paused":
            for space in spaces:  # paused while they started, when a part had nothing to pause
                self._call(self._pause, job, now, space=space)
        elif status in FINAL:
            # Stopped while they started (``jobs.stop`` wrote their status before this did).
            pipe = self.redis.pipeline(transaction=False)
            for space in spaces:
                pipe.hset(keys.meta(space), mapping={"status": status, "finished_at": now})
            pipe.execute()
