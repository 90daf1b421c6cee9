"""Cycles of periodic jobs (an incremental crawl re-run on a timer by one coordinator): the beat's tick starts
each due job's next cycle; a cycle re-enqueues the seeds and every stored page whose revisit
time has come, with a fresh seen-set, so what cycle k saw does not block cycle k+1.

Starting a cycle is claimed atomically in Redis (``CLAIM_CYCLE``), so however many beats or
ticks run at once, each cycle starts once. The work is queued while the job is ``starting``,
which nothing dispatches, and only then does the job run: a cycle cannot end half-queued.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from redis import Redis

from crawler import jobs
from crawler.config.schedule import next_cycle
from crawler.dedup import admit_links, seen_set
from crawler.dedup.neardup import NearDuplicates
from crawler.dedup.variants import QueryVariants
from crawler.frontier import Entry, Frontier
from crawler.spiders.request import urgent_spec
from crawler.state import joblog
from crawler.state.jobconf import Job
from crawler.store import PageRows, PageStore

log = logging.getLogger(__name__)

CHUNK = 1000
STALE_START = 300.0  # a start still unfinished after this long crashed: hand it out again

OpenStore = Callable[[str], PageStore]


def tick(redis: Redis, open_store: OpenStore, now: float | None = None) -> list[tuple[str, int]]:
    """Start the next cycle of every periodic job whose time has come; return (job, cycle)s."""
    now = time.time() if now is None else now
    started = []
    for job_id in jobs.periodic(redis):
        try:
            jobs.note_cycle_end(redis, job_id)
            cycle = start_cycle(redis, job_id, open_store, now)
        except KeyError:
            jobs.drop_periodic(redis, job_id)  # the job was deleted
            continue
        except Exception:  # one broken job must not keep the others from their cycles
            log.exception("job %s: could not start its next cycle", job_id)
            continue
        if cycle:
            started.append((job_id, cycle))
    return started


def start_cycle(redis: Redis, job_id: str, open_store: OpenStore, now: float) -> int:
    """Start the job's next cycle if it is due; return its number, or 0."""
    status, due = jobs.cycle_schedule(redis, job_id)
    if status not in (jobs.WAITING, jobs.STARTING):
        return 0
    job = jobs.load(redis, job_id, max_age=0)
    s = job.settings
    following = next_cycle(s.every, s.cron, now if due is None else due, now)
    frontier = Frontier(redis)
    got = frontier.claim_cycle(job_id, now, following, STALE_START)
    if got is None:
        return 0
    cycle, _fresh = got
    if jobs.start_stage(redis, job_id) == "claimed":
        _forget_seen(redis, job)
        jobs.set_start_stage(redis, job_id, "reset")
    queued, skipped = _queue_revisits(redis, job, open_store(s.store), now)
    frontier.run_cycle(job_id, s.shards)
    jobs.count_cycle(redis, job_id, cycle, queued=queued, not_due=skipped)
    log.info("job %s: cycle %d started, %d URLs queued, %d pages not due", job_id, cycle, queued, skipped)
    joblog.log_event(redis, job_id, "cycle_started", f"cycle {cycle}: {queued} URLs queued, {skipped} pages not due")
    return cycle



def _forget_seen(redis: Redis, job: Job) -> None:
    """A fresh seen-set, near-duplicate index and per-cycle budgets for the new cycle."""
    frontier = Frontier(redis)
    frontier.reset_seen(job.id)
    NearDuplicates(redis).reset(job.id)
    seen_set(redis, frontier, job.id, job.settings).reset()
    frontier.reset_admitted(job.id)
    QueryVariants.forget(redis, job.id)


def _queue_revisits(redis: Redis, job: Job, store: PageRows, now: float) -> tuple[int, int]:
    """Queue the seeds and the stored pages due for a visit; mark the pages not due as seen, so
    links to them are skipped this cycle. Idempotent: a repeated start queues nothing twice."""
    s = job.settings
    seeds = [Entry(u) for u in jobs.seeds(redis, job.id)]
    seed_urls = {e.url for e in seeds}
    frontier = Frontier(redis)
    seen = seen_set(redis, frontier, job.id, s)
    queued = skipped = 0
    due: list[Entry] = list(seeds)
    not_due: list[str] = []

    def flush() -> None:
        nonlocal queued, skipped
        if not_due:
            seen.mark_skipped(not_due)
            skipped += len(not_due)
            not_due.clear()
        if due:
            queued += len(admit_links(redis, frontier, job.id, s, due, seen=seen)[0])
            due.clear()

    for url, depth, next_visit, spec in store.revisits(job.id):
        if url in seed_urls:
            continue
        if next_visit <= now:
            # A spider's request is revisited as it was asked for (its callback and data).
            due.append(Entry(url, depth, "", 0, spec, urgent_spec(spec)) if spec else Entry(url, depth))
        else:
            not_due.append(url)
        if len(due) + len(not_due) >= CHUNK:
            flush()
    flush()
    return queued, skipped
