"""Rebuild a job on a Redis that lost it, from its store (as Nutch rebuilds from its crawldb).

Redis holds what is hot: the frontier, leases, the seen-set, counters, and the task messages
themselves. The store holds the pages and the job's definition (recorded at submission). From
those alone: every stored page is marked seen, the in-scope outlinks of stored pages that were
never stored are queued one hop deeper than their referrer (as parse would have followed them),
seeds never stored are queued again, and counters restart from the store's rows. Nothing depends
on the messages that were in Redis: a page fetched but not stored when Redis died is simply
queued again (the store is idempotent per job and URL).

A periodic job resumes the cycle it was in (the highest cycle among its rows): pages stored in
that cycle are seen, older pages due for a revisit are queued and those not due are marked seen.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from redis import Redis
from redis.typing import EncodableT, FieldT

from crawler import jobs
from crawler.config.redact import strip_password
from crawler.config.schedule import next_cycle
from crawler.config.scope import url_patterns
from crawler.config.settings import Settings
from crawler.dedup import seen_set
from crawler.dedup.neardup import NearDuplicates
from crawler.errors import CrawlerError, JobNotFound
from crawler.frontier import Frontier
from crawler.spiders.request import strip_mark
from crawler.stages import Context, dedup_stage
from crawler.stages.messages import LinkGroup
from crawler.stages.redirects import redirect_target
from crawler.state.jobconf import Job
from crawler.store import JobDefinition, PageStore
from crawler.urls import domain_of, host_key, paged_variant, query_variant

CHUNK = 2000


class RecoverError(CrawlerError, ValueError):
    pass


@dataclass(frozen=True)
class Recovered:
    job_id: str
    cycle: int  # the cycle resumed (0: a one-off job)
    stored: int  # rows of the job in the store
    seen: int  # stored pages marked seen (this cycle's, for a periodic job)
    not_due: int  # a periodic job's older pages not due for a visit, marked seen
    queued: int  # URLs queued: outlinks never stored, seeds never stored, due revisits
    status: str  # the job's status once rebuilt (done at once if nothing was left)


@dataclass
class _Row:
    url: str
    depth: int
    cycle: int
    next_visit: float
    fetched_at: float
    outlinks: list[str]
    error: str | None
    nofollow: bool
    near_duplicate_of: str | None
    simhash: str | None
    requests: dict[str, str] | None = None  # key -> spec of the outlinks that are spiders' requests
    request: str = ""  # the spec of the request the page answers
    final_url: str = ""


def _rows(store: PageStore, job_id: str) -> list[_Row]:
    return [_Row(p["url"], int(p["depth"] or 0), int(p["cycle"] or 0), float(p["next_visit"] or 0.0),
                 float(p["fetched_at"] or 0.0), list(p["outlinks"] or []), p["error"], bool(p.get("nofollow")),
                 p["near_duplicate_of"], p["simhash"],
                 {str(k): str(v) for k, v in p["requests"]} if p.get("requests") else None,
                 p.get("request") or "", p.get("final_url") or "")
            for p in store.pages(job_id)]


def _chunks(items: list[Any]) -> Iterable[list[Any]]:
    for i in range(0, len(items), CHUNK):
        yield items[i : i + CHUNK]


def _clear(redis: Redis, job_id: str) -> int:
    """Delete what workers wrote for the job since Redis came back empty (Bloom bits, link
    batches, counters of tasks that were in flight): the rebuild starts from nothing."""
    return jobs.purge(redis, job_id)


def _followed(row: _Row, s: Settings, allowed: frozenset[str]) -> list[str]:
    """The outlinks parse would have sent to dedup (see ``stages.parse.parse_stage``)."""
    if row.nofollow or (s.max_depth and row.depth + 1 > s.max_depth):
        return []
    if row.near_duplicate_of and not s.follow_near_duplicates:
        return []
    # A trap's page: parse followed only a spider's requests from it, within the variants' cap.
    # Neither the cap's count nor which plain links the spider yielded is kept: with a spider
    # its links are followed (the cap holds for the pages they lead to), else none.
    if (row.near_duplicate_of and not s.spider and query_variant(row.url, row.near_duplicate_of)
            and not paged_variant(row.url, row.near_duplicate_of)):
        return []
    out = []
    patterns = url_patterns(s.allow_urls, s.deny_urls)
    for link in row.outlinks:
        url = strip_mark(link)  # a request key's URL (``crawler.spiders.request``)
        try:
            if (not allowed or domain_of(url) in allowed) and patterns.follows(url):
                out.append(link)
        except ValueError:
            continue
    return out


def recover(redis: Redis, store: PageStore, job_id: str, now: float | None = None,
            shards: int | None = None) -> Recovered:
    """Rebuild ``job_id`` in ``redis`` from ``store``. KeyError if the store has no such job;
    RecoverError if Redis still has it (there is nothing to rebuild, and rebuilding a live job
    would queue its work twice). ``shards``: the shard count the job had last, if ``crawler
    shards set`` changed it after submission (the store keeps the submitted definition)."""
    now = time.time() if now is None else now
    definition = store.job(job_id)
    if definition is None:
        raise JobNotFound(f"no job {job_id} is recorded in the store")
    if shards is not None:
        definition.settings["shards"] = shards
    # A definition recorded before submissions stripped store passwords may still hold one.
    definition.settings["store"] = strip_password(definition.settings.get("store") or "")
    status = jobs.raw_status(redis, job_id)
    if status is not None:
        raise RecoverError(f"job {job_id} is in Redis already (status {status}): "
                           "recover rebuilds only a job that Redis lost")
    # A job recorded before frontier_split keeps its frontier under its own tag (``jobconf.load``).
    definition.settings.setdefault("frontier_split", False)
    s = Settings.from_env(**definition.settings)
    job = Job(job_id, s, frozenset(definition.settings.get("allow_domains") or ()))
    rows = _rows(store, job_id)
    cycle = max((r.cycle for r in rows), default=0)
    if s.periodic:
        cycle = max(cycle, 1)
    current = [r for r in rows if r.cycle == cycle or not s.periodic]
    older = [r for r in rows if s.periodic and r.cycle != cycle]

    _clear(redis, job_id)
    # URLs that waited in the store's frontier table are found again below, from the stored
    # pages' links, under new sequence numbers: the old rows would shadow them.
    store.spill_clear(job_id)
    _write_meta(redis, job, definition, cycle, current, now)
    _restart_counters(redis, job, rows, current)
    stored_depth = {r.url: r.depth for r in current}
    # A page's redirect target is its (parse claimed it): a link to it is not followed again.
    redirected: dict[str, int] = {}
    for r in current:
        # Only a page that won its claim holds its target: one stored as the target's duplicate
        # lost it to a link or a queue, and the target may never have been fetched.
        target = redirect_target(r.url, r.final_url, s) if r.error is None else None
        if target is not None and r.near_duplicate_of != target:
            redirected[target] = min(r.depth, redirected.get(target, r.depth))
    for target, depth in redirected.items():
        stored_depth.setdefault(target, depth)
    due = [r for r in older if r.next_visit <= now and r.url not in stored_depth]
    not_due = [r.url for r in older if r.next_visit > now and r.url not in stored_depth]
    _mark_seen(redis, job, current, not_due, redirected)
    if s.near_duplicates:
        _index_near_duplicates(redis, job, current)

    # Shortest depth per URL, as the exact seen-set would keep it.
    best: dict[str, tuple[int, str, str]] = {}

    def offer(url: str, depth: int, referrer: str, spec: str = "") -> None:
        have = stored_depth.get(url)
        # A stored page is not fetched again, unless it was too deep to follow its links and this
        # path is short enough to (the admit script decides, as it does for live links).
        if have is not None and not (s.max_depth and have >= s.max_depth and depth < have):
            return
        # A spider's request (its callback and data) wins over a plain link to the same key.
        if url not in best or (depth < best[url][0] and (spec or not best[url][2])) or (spec and not best[url][2]):
            best[url] = (depth, referrer, spec)

    for seed in definition.seeds:
        offer(seed, 0, "")
    for r in due:
        offer(r.url, r.depth, "", r.request)
    for r in current:
        specs = r.requests or {}
        for link in _followed(r, s, job.allowed):
            offer(link, r.depth + 1, r.url, specs.get(link, ""))
    ctx = Context.default(redis)
    queued = 0
    for chunk in _chunks([LinkGroup.single(url, d, ref, spec) for url, (d, ref, spec) in best.items()]):
        queued += len(dedup_stage(ctx, job, "", chunk))

    # starting -> running: the shards are woken, and a job with nothing left is done at once.
    Frontier(redis).run_cycle(job_id, s.shards)
    if s.periodic:
        jobs.add_periodic(redis, job_id)
    jobs.forget(job_id)
    final = jobs.raw_status(redis, job_id) or ""
    return Recovered(job_id, cycle if s.periodic else 0, len(rows), len(current), len(not_due), queued, final)


def _write_meta(redis: Redis, job: Job, definition: JobDefinition, cycle: int, current: list[_Row],
                now: float) -> None:
    s = job.settings
    # ``starting``: admissions are accepted but nothing is dispatched and the job cannot be
    # found done before its frontier is rebuilt. A new epoch makes every worker forget what
    # its local cache remembers as seen from before.
    meta: dict[FieldT, EncodableT] = {"id": job.id, "status": jobs.STARTING, "created_at": definition.created_at,
                            "settings": json.dumps(definition.settings), "seeds": json.dumps(definition.seeds),
                            "epoch": uuid.uuid4().hex[:12], "recovered_at": now}
    record: tuple[int, dict[FieldT, EncodableT]] | None = None
    if s.periodic:
        # When the cycle was due is not stored; its first fetch is the closest record of it.
        due = min((r.fetched_at for r in current if r.fetched_at), default=now)
        meta.update(cycle=cycle, cycle_started_at=due, cycle_due_at=due,
                    next_cycle_at=next_cycle(s.every, s.cron, due, now))
        record = (cycle, {"started_at": due, "recovered_at": now})
    jobs.write_meta(redis, job.id, meta, record, settings=s)


def _restart_counters(redis: Redis, job: Job, rows: list[_Row], current: list[_Row]) -> None:
    errors: dict[str, int] = {}
    for r in rows:
        if r.error:
            errors[f"error:{r.error}"] = errors.get(f"error:{r.error}", 0) + 1
    # HINCRBY, not HSET: admissions by workers may already be counting on top.
    # A split frontier's parts are allotted the job's page budget from ``allotted``.
    split = {"allotted": len(current)} if Frontier(redis).split(job.id) else {}
    jobs.count(redis, job.id, stored=len(rows), fetched=len(rows), failed=sum(errors.values()),
               admitted=len(current), recovered=1, **split, **errors)
    if job.settings.max_pages_per_host:
        per_host: dict[str, int] = {}
        for r in current:
            per_host[host_key(r.url)] = per_host.get(host_key(r.url), 0) + 1
        Frontier(redis).add_host_admitted(job.id, per_host)


def _mark_seen(redis: Redis, job: Job, current: list[_Row], not_due: list[str], redirected: dict[str, int]) -> None:
    seen = seen_set(redis, Frontier(redis), job.id, job.settings)
    for chunk in _chunks(not_due):
        seen.mark_skipped(chunk)
    # After the skipped ones: a page both stored and not due is marked stored.
    own = {r.url for r in current}
    stored = [(r.url, r.depth) for r in current] + [(t, d) for t, d in redirected.items() if t not in own]
    for pages in _chunks(stored):
        seen.mark_stored(pages)


def _index_near_duplicates(redis: Redis, job: Job, current: list[_Row]) -> None:
    """Later pages are compared with the originals stored before Redis was lost."""
    originals = [(r.url, int(r.simhash, 16)) for r in current if r.simhash and not r.near_duplicate_of]
    index = NearDuplicates(redis)
    for chunk in _chunks(originals):
        index.find_or_add(job.id, chunk, job.settings.near_duplicate_distance)
