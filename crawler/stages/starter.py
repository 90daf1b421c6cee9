"""The starter: a job's ``start_requests`` read a batch at a time into its frontier, only while
its backlog has room, by one worker at a time.

A job whose spider defines ``start_requests`` is submitted holding a pending batch
(``crawler.spiders.starts.TOKEN``), so the frontier does not call it done. Each worker's main
process runs a ``Starters`` loop (``crawler.celeryapp.starter``); for each such running job, the
one that holds its lease (``starts.lease``, renewed on every round, lapsing ``LEASE`` seconds
after its holder stops) keeps the spider's generator open (read by a thread of its own,
``StartRequests``) and, while the job's open URLs (queued, in flight, not yet stored) are fewer
than ``start_requests_backlog``, takes up to ``batch`` more of what it has yielded so far (never
waiting on a generator that pauses: the other jobs' turns come first), checks them against the
job's scope like links, and admits them like seeds.
After each batch it records how many values it has read (``consumed``); a worker taking over
after the holder died builds the generator anew and skips that many. When the generator is
exhausted (or raises: a counted ``spider_error:start_requests``), the pending batch is released
and the job may finish.

Counters: ``start_requests`` (values read), ``links_out_of_scope``, ``links_denied_pattern``,
``links_denied_spider``, ``bad_url`` (as for links), ``duplicates`` (by admission).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Sequence

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from crawler import jobs
from crawler.config.scope import url_patterns
from crawler.dedup import admit_links
from crawler.errors import BadURL
from crawler.frontier import Entry
from crawler.spiders import loader
from crawler.spiders import starts as spider_starts
from crawler.spiders.request import Request, request_key, urgent_spec
from crawler.spiders.run import allowed, overrides, request_spec
from crawler.spiders.starts import StartRequests
from crawler.stages.context import Context, refuse
from crawler.stages.dedup import flush_spill
from crawler.state import joblog
from crawler.state.jobconf import Job
from crawler.urls import canonicalize, domain_of

log = logging.getLogger(__name__)

LEASE = 30.0  # seconds a starter's lease lasts without renewal
BATCH = 500  # start requests read and admitted at a time, at most
ROUND = 1.0  # seconds one job's feeding may take per round, so one job does not starve the others
WAIT = 0.05  # seconds a round waits for a job's generator to yield when it has nothing read yet

# KEYS: lease. ARGV: node, ms. 1: renewed (ours already), 2: taken (it was free), 0: another's.
_TAKE = """
local cur = redis.call('GET', KEYS[1])
if cur == ARGV[1] then redis.call('PEXPIRE', KEYS[1], ARGV[2]) return 1 end
if not cur then redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 2 end
return 0
"""
# KEYS: lease. ARGV: node. Let go of it if it is ours.
_GIVE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 0
"""


def admission(reqs: Sequence[Request], job: Job, ctx: Context, live: StartRequests,
              counts: Counter[str], start: int = 0) -> list[Entry]:
    """The frontier entries for ``reqs``: canonical, in the job's scope (domains, URL patterns,
    the spider's ``allow``), each with its spec when it is more than a URL."""
    s = job.settings
    patterns = url_patterns(s.allow_urls, s.deny_urls)
    spider = live.spider
    asks = overrides(spider, "allow")
    out: dict[str, Entry] = {}
    for position, req in enumerate(reqs, start):
        try:
            canon = canonicalize(req.url, s.max_url_length, s.dropped_params)
        except BadURL:
            counts["bad_url"] += 1
            continue
        if job.allowed and domain_of(canon) not in job.allowed:
            counts["links_out_of_scope"] += 1
            continue
        if not patterns.empty and not patterns.follows(canon):
            counts["links_denied_pattern"] += 1
            continue
        if asks and not allowed(spider, canon, counts):
            counts["links_denied_spider"] += 1
            continue
        if req.plain:
            out.setdefault(canon, Entry(canon))
            continue
        spec = request_spec(req, s.max_request_bytes, counts, spider, "start_requests")
        if spec is None:
            continue
        key = request_key(req, canon, f"start:{position}")  # the same after a takeover re-reads it
        out.setdefault(key, Entry(key, 0, "", 0, spec, urgent_spec(spec)))  # the first wins, as in Scrapy
    return list(out.values())


class Starters:
    """This process's starters: the open generators of the jobs whose lease it holds."""

    def __init__(self, ctx: Context, *, batch: int = BATCH, lease: float = LEASE, budget: float = ROUND,
                 wait: float = WAIT) -> None:
        self.ctx = ctx
        self.batch = batch
        self.wait = wait
        self.lease = lease
        self.budget = budget
        self.live: dict[str, StartRequests] = {}
        self._take = ctx.redis.register_script(_TAKE)
        self._give = ctx.redis.register_script(_GIVE)

    def tick(self) -> None:
        """One round over the running jobs that have start requests left."""
        active = set(jobs.active(self.ctx.redis))
        for job_id in list(self.live):
            if job_id not in active:
                self._drop(job_id)
        for job_id in sorted(active):
            try:
                self._round(job_id)
            except KeyError:  # the job went meanwhile
                self._drop(job_id)
            except (RedisConnectionError, RedisTimeoutError):
                raise  # Redis away (a failover): the whole round waits for the next, in one line
            except Exception:  # one job's trouble must not stop the others' starters
                log.exception("job %s: start requests", job_id)

    def _round(self, job_id: str) -> None:
        r = self.ctx.redis
        if not self.ctx.frontier.pending(job_id, spider_starts.TOKEN):
            self._drop(job_id)
            return
        if jobs.raw_status(r, job_id) != jobs.RUNNING:
            return  # paused (or ending): read nothing now, keep what is open
        got = int(self._take(keys=[spider_starts.lease(job_id)], args=[self.ctx.node, int(self.lease * 1000)]))
        if got == 0:
            self._drop(job_id, give=False)  # another worker reads them now
            return
        job = jobs.load(r, job_id)
        consumed = int(r.hget(spider_starts.state(job_id), "consumed") or 0)
        live = self.live.get(job_id)
        if live is None or live.consumed != consumed:
            # Ours anew, or another worker read some meanwhile: start over from the record.
            self._drop(job_id, give=False)
            try:
                spider = self.ctx.spider(job)
            except loader.SpiderUnavailable as exc:
                refuse(self.ctx, job, exc)
                self._drop(job_id, give=True)
                return
            if spider is None:
                self._finish(job, None)
                return
            live = self.live[job_id] = StartRequests(
                spider, skip=consumed, ahead=max(1, min(self.batch, job.settings.start_requests_backlog)))
        self._feed(job, live)

    def _feed(self, job: Job, live: StartRequests) -> None:
        r = self.ctx.redis
        s = job.settings
        deadline = time.monotonic() + self.budget
        while time.monotonic() < deadline:
            c = self.ctx.frontier.counters(job.id, ("open", "admitted"))
            if s.max_pages and c.get("admitted", 0) >= s.max_pages:
                live.close()  # the job admits no more: reading on would only be dropped
            room = s.start_requests_backlog - c.get("open", 0)
            if room <= 0 and not live.exhausted:
                return
            counts: Counter[str] = Counter()
            start = live.consumed
            # What the generator has yielded so far, waiting only a moment: one that pauses or
            # blocks must hold up neither what it already gave nor the other jobs' starters.
            wait = min(self.wait, max(0.0, deadline - time.monotonic()))
            reqs = live.take(min(max(room, 0), self.batch), counts, wait=wait)
            if not reqs and not counts and not live.exhausted and live.consumed == start:
                return  # nothing read yet: the next round looks again
            entries = admission(reqs, job, self.ctx, live, counts, start)
            if entries:
                # A token per position: a worker taking over after a crash re-admits the batch
                # under the same token, and admission takes each URL once anyway.
                token = f"{spider_starts.TOKEN}:{start}"
                self.ctx.frontier.expect(job.id, [token], s.lease_timeout)
                queued, _ = admit_links(r, self.ctx.frontier, job.id, s, entries, token=token,
                                        seen=self.ctx.seen_set(job))
                if queued.spilled:
                    flush_spill(self.ctx, job)
            pipe = r.pipeline(transaction=False)
            pipe.hset(spider_starts.state(job.id), "consumed", live.consumed)
            jobs.count(pipe, job.id, start_requests=live.consumed - start, **counts)
            pipe.execute()
            if live.exhausted:
                self._finish(job, live)
                return
            self._take(keys=[spider_starts.lease(job.id)], args=[self.ctx.node, int(self.lease * 1000)])

    def _finish(self, job: Job, live: StartRequests | None) -> None:
        """The start requests are exhausted: the job may finish once what they queued is done."""
        r = self.ctx.redis
        n = live.consumed if live is not None else 0
        r.hset(spider_starts.state(job.id), mapping={"consumed": n, "done": 1})
        joblog.log_event(r, job.id, "start_requests_done", f"{n} start requests read")
        self.ctx.frontier.admit(job.id, [], job.settings.shards, token=spider_starts.TOKEN)
        self._drop(job.id, give=True)

    def _drop(self, job_id: str, give: bool | None = None) -> None:
        """Close the job's generator here; ``give``: let its lease go (default: if it was open)."""
        live = self.live.pop(job_id, None)
        if live is not None:
            live.close()
        if live is not None if give is None else give:
            self._give(keys=[spider_starts.lease(job_id)], args=[self.ctx.node])

    def close(self) -> None:
        """This process stops: close the generators and let the leases go (another worker takes
        over at once, not after they lapse)."""
        for job_id in list(self.live):
            self._drop(job_id, give=True)
