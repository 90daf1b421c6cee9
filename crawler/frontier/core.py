"""The frontier: per-host URL queues and leases in Redis, driven by the scripts in ``lua``.

All politeness state lives here, not in workers: a host is handed out only when its delay has
passed and its in-flight budget allows, and every URL handed out is leased until its page is
stored, so a worker that dies loses nothing.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from redis import Redis

from crawler import keys, liveshards
from crawler.frontier import lua
from crawler.frontier.entry import Entry
from crawler.sharding import shard_of_url
from crawler.urls import host_key

Lease = tuple[str, str]  # (url, token)


@dataclass(frozen=True)
class Dispatched:
    token: str
    items: list[tuple[Entry, str]]  # (entry, host)
    next_due: float | None  # when the shard's earliest waiting host is due, if any
    saturated: bool = False  # the job's concurrency is spent: more is due than could go
    batch: int = 0  # URLs per fetch task; each batch is leased under a token of its own

    def batches(self) -> list[tuple[str, list[Entry]]]:
        """(lease token, entries) per fetch task. Distinct tokens keep the tasks' body keys and
        link batches apart: a link batch is admitted once per token."""
        if not self.batch:
            return [(self.token, [e for e, _ in self.items])] if self.items else []
        return [(f"{self.token}.{k // self.batch}", [e for e, _ in self.items[k : k + self.batch]])
                for k in range(0, len(self.items), self.batch)]


@dataclass(frozen=True)
class Fetched:
    """One finished request, as the frontier needs it."""

    url: str
    token: str
    retry_at: float = 0.0  # > 0: try again then
    ip: str = ""  # the address the host answered from


@dataclass(frozen=True)
class Reaped:
    returned: int
    token: str
    abandoned: list[tuple[Entry, int]]  # (entry, shard), leased under ``token``


def new_token() -> str:
    return uuid.uuid4().hex[:16]


def _flat(leases: Iterable[Lease]) -> list[str]:
    return [part for lease in leases for part in lease]


class Frontier:
    def __init__(self, redis: Redis) -> None:
        self.redis = redis
        self._admit = redis.register_script(lua.ADMIT)
        self._dispatch = redis.register_script(lua.DISPATCH)
        self._begin = redis.register_script(lua.BEGIN)
        self._renew = redis.register_script(lua.RENEW)
        self._fetched = redis.register_script(lua.FETCHED)
        self._release = redis.register_script(lua.RELEASE)
        self._reap = redis.register_script(lua.REAP)
        self._promote = redis.register_script(lua.PROMOTE)

    def admit(self, job: str, entries: Sequence[Entry], shards: int, *, token: str = "",
              budget: int = 0, max_depth: int = 0, host_budget: int = 0, trusted: bool = False,
              now: float | None = None, part: int | None = None, last: bool = True) -> list[str]:
        """Queue the entries whose canonical URL this job has not seen; return those URLs.

        ``token`` names a link batch registered with ``expect``; a batch admitted once is
        ignored when delivered again. ``budget`` caps the URLs a job ever admits (0: none).
        ``max_depth`` (0: none) lets a URL found again by a shorter path be expanded again.
        ``host_budget`` caps the URLs admitted per host (0: none). ``trusted``: the entries were
        judged new already (by the Bloom filter); the exact seen hash is skipped.
        ``part``: these entries are part ``part`` of the batch ``token``, in parts of the same
        composition each time it is delivered; each is admitted once, and the ``last`` one,
        called after all the others, ends the batch.
        """
        args: list[str | int | float] = [keys.prefix(job), job, token, now or time.time(), budget, max_depth,
                                         host_budget, int(trusted), "" if part is None else part, int(last)]
        # Hosts of a shard that is down queue on its backup (a stale view is swept: rebalance).
        down = liveshards.down(self.redis, shards)
        for e in entries:
            args += [e.url, host_key(e.url), shard_of_url(e.url, shards, down), e.encode()]
        return [u.decode() for u in self._admit(args=args)]

    def pending(self, job: str, token: str) -> bool:
        """Whether link batch ``token`` is registered and not yet wholly admitted."""
        return self.redis.zscore(keys.prefix(job) + "pend", token) is not None

    def expect(self, job: str, batches: Mapping[str, Any] | Sequence[str], lease_timeout: float = 60.0) -> None:
        """Register link batches on their way to dedup, so the job is not done before them.
        With their links (``{token: links}``), a batch whose message is lost (a worker killed
        between taking it off the queue and recording it as unacknowledged) is sent again by
        the dispatcher after ``lease_timeout`` (``overdue_links``)."""
        if not batches:
            return
        p = keys.prefix(job)
        deadline = time.time() + lease_timeout
        pipe = self.redis.pipeline(transaction=False)
        pipe.zadd(p + "pend", dict.fromkeys(batches, deadline))
        if isinstance(batches, Mapping):
            pipe.hset(p + "pendb", mapping={t: json.dumps(links) for t, links in batches.items()})
        pipe.execute()

    def overdue_links(self, job: str, lease_timeout: float, now: float | None = None,
                      limit: int = 100) -> list[tuple[str, list[Any]]]:
        """Link batches registered and still not admitted after their deadline: (token, links)
        to send to dedup again (admission is once per token, so a late original is harmless)."""
        now = time.time() if now is None else now
        p = keys.prefix(job)
        tokens = [t.decode() for t in self.redis.zrangebyscore(p + "pend", "-inf", now, start=0, num=limit)]
        if not tokens:
            return []
        self.redis.zadd(p + "pend", dict.fromkeys(tokens, now + lease_timeout), xx=True)
        raw = self.redis.hmget(p + "pendb", tokens)
        return [(t, json.loads(r)) for t, r in zip(tokens, raw, strict=True) if r is not None]

    def dispatch(self, job: str, shard: int, *, max_urls: int, per_host: int, delay: float,
                 lease_timeout: float, concurrency: int, per_ip: int = 0, now: float | None = None,
                 batch: int = 0, min_free: int = 0) -> Dispatched:
        """Lease the URLs of due hosts within the host, address and job budgets; ``batch``: URLs
        per fetch task (see ``Dispatched.batches``); ``min_free``: while requests are in flight,
        lease nothing until this many slots are free."""
        now = time.time() if now is None else now
        token = new_token()
        flat, nxt, slots = self._dispatch(args=[keys.prefix(job), job, shard, now, max_urls, per_host, delay,
                                                now + lease_timeout, token, concurrency, per_ip, batch, min_free])
        items = [(Entry.decode(flat[i]), flat[i + 1].decode()) for i in range(0, len(flat), 2)]
        due = float(nxt) if nxt else None
        return Dispatched(token, items, due if due is not None and due < lua.PARKED else None, int(slots) == 0,
                          batch)

    def begin(self, job: str, leases: Sequence[Lease], lease_timeout: float) -> list[bool]:
        """Which of these leases the caller still holds (a redelivered batch whose leases expired
        and went to someone else must not fetch them again); renews those it holds."""
        if not leases:
            return []
        res = self._begin(args=[keys.prefix(job), job, time.time() + lease_timeout, *_flat(leases)])
        return [bool(r) for r in res]

    def renew(self, job: str, leases: Sequence[Lease], lease_timeout: float, *, extra: float = 0.0) -> int:
        """Keep the leases this holder still owns (fetched or not) for ``lease_timeout`` more
        seconds, plus ``extra`` (a store retry's wait), so pages that parse and store are
        holding do not expire back to the frontier. Never shortens a lease. Returns how many."""
        if not leases:
            return 0
        deadline = time.time() + lease_timeout + extra
        return int(self._renew(args=[keys.prefix(job), job, deadline, *_flat(leases)]))

    def fetched(self, job: str, done: Sequence[Fetched], *, lease_timeout: float, delay: float,
                pipe: object | None = None) -> None:
        """The requests are over: free their hosts' slots (the host may go again after its
        delay), learn the hosts' addresses, renew the leases until the pages are stored, and send
        those with a ``retry_at`` to wait out their backoff."""
        if done:
            now = time.time()
            flat = [part for f in done for part in (f.url, f.token, f.retry_at, f.ip)]
            self._fetched(args=[keys.prefix(job), job, now, now + lease_timeout, delay, *flat],
                          client=pipe or self.redis)

    def release(self, job: str, leases: Sequence[Lease], *, delay: float, max_depth: int = 0) -> int:
        """The pages are stored: end their leases. Returns how many this call ended."""
        if not leases:
            return 0
        return int(self._release(args=[keys.prefix(job), job, time.time(), delay, max_depth, *_flat(leases)]))

    def reap(self, job: str, *, delay: float, max_attempts: int, now: float | None = None,
             limit: int = 1000) -> Reaped:
        """Return expired leases to the front of their host queues, one more attempt counted;
        those out of attempts are re-leased under ``Reaped.token`` for the caller to store as
        failed (``lease_expired``)."""
        token = new_token()
        back, gone = self._reap(args=[keys.prefix(job), job, now or time.time(), delay, limit, max_attempts, token])
        abandoned = [(Entry.decode(gone[i]), int(gone[i + 1])) for i in range(0, len(gone), 2)]
        return Reaped(int(back), token, abandoned)

    def promote(self, job: str, *, now: float | None = None, limit: int = 1000) -> float | None:
        """Move retries whose backoff is over back to their host queues; return when the next
        one is due, if any."""
        _moved, nxt = self._promote(args=[keys.prefix(job), job, now or time.time(), limit])
        return float(nxt) if nxt else None

    def queued(self, job: str, shard: int) -> int:
        """Hosts waiting in a shard's ready set (for status and tests)."""
        return int(self.redis.zcard(keys.ready(job, shard)))
