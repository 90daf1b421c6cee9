"""The four stages as plain functions. Celery tasks (``crawler.tasks``) only decode messages,
call these and send what they return on; tests call these directly.

Each stage is idempotent, because with acks_late any of them may run twice:
fetch skips URLs whose lease it no longer holds, dedup admits each link batch once (by token),
store skips records whose fetch id is already stored, and leases end once.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from redis import Redis

from crawler import errors, jobs, keys, schedule, storeretry
from crawler.dedup import BloomSeen, SeenCache, admit_links, bloom_for
from crawler.dedup.neardup import NearDuplicates
from crawler.dedup.simhash import simhash
from crawler.errors import BadURL
from crawler.fetch import FetchConfig, Fetcher
from crawler.fetch.client import runtime
from crawler.fetch.robots import RobotsPolicy, origin_of
from crawler.frontier import Entry, Fetched, Frontier
from crawler.frontier.ratecontrol import backoff, parse_retry_after
from crawler.jobs import Job
from crawler.lru import LRU
from crawler.parse import is_html, parse_html
from crawler.politeness import Politeness, blocked_result, is_retryable
from crawler.settings import Settings
from crawler.sharding import shard_of_url
from crawler.store import PageRecord, Store, StoreRefused, StoreUnavailable, open_store
from crawler.store.base import CONTENT_COLUMNS
from crawler.store.warc import WarcFiles
from crawler.storeplace import place_dir, place_store
from crawler.urls import canonicalize, domain_of, query_variant, repeated_segments

log = logging.getLogger(__name__)

# How long a fetched body may wait in Redis for parse and store: past any lease.
BODY_TTL = 3600

Page = dict[str, Any]  # a fetched page as it travels in messages (no body: that is in Redis)
Link = list[Any]  # [url, depth, referrer]: one link (sitemaps, recover, messages from before groups)
# [referrer, depth, [url, ...]]: the links of one page to one shard, its URL sent once, not per link.
LinkGroup = list[Any]


@dataclass
class Context:
    """Per-process resources, opened once and reused across tasks. Those opened per job, store
    or WARC directory are bounded (``job_cache_size``, ``open_stores``): a worker serves job
    after job for days, and the least recently used are closed to make room."""

    redis: Redis
    node: str = field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}")
    fetcher: Fetcher | None = None  # None: the process-wide httpx client

    def __post_init__(self) -> None:
        settings = Settings.from_env()
        self.frontier = Frontier(self.redis)
        self.politeness = Politeness(self.redis, settings)
        self.cache = SeenCache(settings.local_cache_size or 1)
        # From this worker's environment, never from a job: where jobs may make it write.
        self.store_root, self.store_hosts = settings.store_root, tuple(settings.store_hosts)
        self.near_dups = NearDuplicates(self.redis)
        self._blooms: LRU[str, BloomSeen] = LRU(settings.job_cache_size)
        self._stores: LRU[str, Store] = LRU(settings.open_stores, on_evict=lambda _url, s: s.close())
        self._warcs: LRU[str, WarcFiles] = LRU(settings.open_stores, on_evict=lambda _dir, w: w.close())

    def bloom(self, job: Job) -> BloomSeen:
        b = self._blooms.get(job.id)
        if b is None:
            b = bloom_for(self.redis, job.id, job.settings)
            self._blooms.put(job.id, b)
        return b

    def store(self, url: str) -> Store:
        """The store a job names, opened once; StoreNotAllowed (nothing opened or created) if
        this worker's store_root / store_hosts exclude it."""
        s = self._stores.get(url)
        if s is None:
            s = open_store(place_store(url, self.store_root, self.store_hosts))
            self._stores.put(url, s)
        return s

    def warc(self, directory: str, max_size: int) -> WarcFiles:
        w = self._warcs.get(directory)
        if w is None:
            w = WarcFiles(place_dir(directory, self.store_root), max_size)
            self._warcs.put(directory, w)
        return w

    def check_places(self, job: Job) -> None:
        """StoreNotAllowed if the job's store or WARC directory is not this worker's to use:
        asked before fetching, so no page is fetched that could not be stored."""
        s = job.settings
        if s.store not in self._stores:
            place_store(s.store, self.store_root, self.store_hosts)
        if s.warc and s.warc_dir and s.warc_dir not in self._warcs:
            place_dir(s.warc_dir, self.store_root)

    def close(self) -> None:
        for s in self._stores.clear():
            s.close()
        for w in self._warcs.clear():
            w.close()


def fetch_config(job: Job) -> FetchConfig:
    s = job.settings
    resolve = tuple(tuple(item.split("=", 1)) for item in s.resolve)
    return FetchConfig(user_agent=s.user_agent, connect_timeout=s.connect_timeout, read_timeout=s.read_timeout,
                       deadline=s.request_deadline, max_redirects=s.max_redirects, max_body=s.max_body,
                       allow_networks=tuple(s.allow_networks), resolve=resolve,  # type: ignore[arg-type]
                       dns_ttl=s.dns_ttl)


def fetch_stage(ctx: Context, job: Job, token: str, raw_entries: Sequence[str]) -> list[Page]:
    """Fetch the leased entries concurrently, within robots.txt; retryable failures go back to
    the frontier to wait out a backoff, everything else comes back as pages for parse and
    store. Bodies go to Redis under keys with a TTL."""
    s = job.settings
    ctx.check_places(job)
    entries = [Entry.decode(e) for e in raw_entries]
    held = ctx.frontier.confirm(job.id, [(e.url, token) for e in entries], s.lease_timeout)
    todo = [e for e, ok in zip(entries, held, strict=True) if ok]
    if len(todo) < len(entries):
        jobs.count(ctx.redis, job.id, stale_leases=len(entries) - len(todo))
    if not todo:
        return []
    config = fetch_config(job)
    rt = runtime()
    fetcher = ctx.fetcher or rt.fetcher(config)
    policies: dict[str, RobotsPolicy] = {}
    fresh: dict[str, RobotsPolicy] = {}
    blocked: dict[str, str] = {}
    if s.obey_robots:
        policies, fresh = ctx.politeness.policies([e.url for e in todo], job, fetcher, config, rt.run)
        for e in todo:
            reason = policies[origin_of(e.url)].block_reason(e.url, s.robots_user_agent)
            if reason:
                blocked[e.url] = reason
    go = [e.url for e in todo if e.url not in blocked]
    check = ctx.politeness.hop_check(job, fetcher, config, fresh)
    cycle, cycle_base = jobs.cycle_of(ctx.redis, job.id) if s.periodic else (0, 0.0)
    # Revisits are conditional: what the last visit stored goes back as validators.
    previous = _previous(ctx, job, go) if cycle > 1 and go else {}
    validators = {u: conditional_headers(row) for u, row in previous.items()}
    fetched = dict(zip(go, rt.run(fetcher.fetch_many(go, config, check, validators)), strict=True)) if go else {}
    results = [fetched.get(e.url) or blocked_result(e.url, blocked[e.url]) for e in todo]

    now = time.time()
    archive = bool(s.warc and s.warc_dir)
    pipe = ctx.redis.pipeline(transaction=False)
    pages: list[Page] = []
    done: list[Fetched] = []
    nbytes = failed = not_modified = 0
    for e, r in zip(todo, results, strict=True):
        if is_retryable(r.error) and e.attempts + 1 < s.max_attempts:
            retry_after = parse_retry_after(r.header("retry-after")) if r.status in (429, 503) else None
            if r.error == errors.RobotsUnavailable.reason:
                retry_after = max(0.0, policies[origin_of(e.url)].expires - now)
            wait = backoff(e.attempts, base=s.retry_base, cap=s.max_delay * 10, retry_after=retry_after)
            done.append(Fetched(e.url, token, now + wait, r.ip))
            pipe.hincrby(keys.counters(job.id), f"retry:{r.error}", 1)
            continue
        done.append(Fetched(e.url, token, 0.0, r.ip))
        body_key = ""
        if r.body:
            body_key = keys.body(job.id, token, e.url)
            pipe.set(body_key, r.body, ex=BODY_TTL)
        nbytes += len(r.body)
        failed += r.error is not None
        if r.error:
            pipe.hincrby(keys.counters(job.id), f"error:{r.error}", 1)
        pages.append({
            "url": e.url, "depth": e.depth, "referrer": e.referrer, "final_url": r.final_url,
            # Headers travel on only for the WARC records: they are most of a message's bytes.
            "status": r.status, "http_version": r.http_version, "headers": r.headers if archive else [],
            "request_headers": r.request_headers if archive else [], "error": r.error, "fetched_at": r.fetched_at,
            "elapsed": round(r.elapsed, 4), "redirects": r.redirects, "body_key": body_key,
            "content_length": len(r.body), "content_sha1": r.sha1, "content_type": r.content_type,
            "fetched_by": ctx.node, "attempts": e.attempts + 1,
            "etag": r.header("etag") or "", "last_modified": r.header("last-modified") or "",
            "cycle": cycle, "cycle_base": cycle_base, "not_modified": r.status == 304,
            # The same bytes as last time: nothing to parse again.
            "unchanged": r.status == 200 and not r.error and previous.get(e.url, {}).get("content_sha1") == r.sha1,
        })
        not_modified += r.status == 304
    delays = ctx.politeness.delay_updates(job, results, policies)
    ctx.frontier.set_host_delays(job.id, delays, pipe)
    jobs.count(pipe, job.id, fetched=len(pages), failed=failed, bytes=nbytes, not_modified=not_modified,
               fetch_tasks=1)
    jobs.count_cycle(pipe, job.id, cycle, fetched=len(pages), bytes=nbytes, not_modified=not_modified)
    pipe.hincrby(keys.NODE_FETCHED, ctx.node, len(pages))
    ctx.frontier.fetched(job.id, done, lease_timeout=s.lease_timeout, delay=s.delay, pipe=pipe)
    pipe.execute()
    if s.sitemaps and policies:
        found, over_cap = ctx.politeness.sitemap_urls(job, policies, fetcher, config, rt.run)
        _admit_sitemaps(ctx, job, found)
        jobs.count(ctx.redis, job.id, dropped_sitemap_cap=over_cap)
    return pages


def refuse(ctx: Context, job: Job, error: StoreRefused) -> None:
    """The job names a store this worker may not use (or that refuses it): stop it, counted and with the reason
    for ``status``, rather than fetch pages it cannot store."""
    log.error("job %s: stopped: %s", job.id, error)
    jobs.count(ctx.redis, job.id, store_not_allowed=1)
    jobs.stop(ctx.redis, job.id, error=f"{ctx.node}: {error}")
    jobs.forget(job.id)


def _previous(ctx: Context, job: Job, urls: list[str]) -> dict[str, dict[str, Any]]:
    try:
        return ctx.store(job.settings.store).previous(job.id, urls)
    except StoreUnavailable:
        # With the store down, fetch unconditionally rather than not at all: store compares
        # against the stored row again when it is back.
        jobs.count(ctx.redis, job.id, unconditional_fetches=len(urls))
        return {}


def conditional_headers(row: dict[str, Any]) -> list[tuple[str, str]]:
    if row.get("status") != 200 or row.get("gone_cycle"):
        return []
    out = []
    if row.get("etag"):
        out.append(("If-None-Match", row["etag"]))
    if row.get("last_modified"):
        out.append(("If-Modified-Since", row["last_modified"]))
    return out


def _admit_sitemaps(ctx: Context, job: Job, found: list[tuple[str, str]]) -> None:
    links = [[url, 1, sitemap] for url, sitemap in found if not job.allowed or _in_scope(url, job)]
    if links:
        admitted = dedup_stage(ctx, job, "", links)
        jobs.count(ctx.redis, job.id, sitemap_urls=len(admitted))


def _in_scope(url: str, job: Job) -> bool:
    try:
        return domain_of(url) in job.allowed
    except ValueError:
        return False


def parse_stage(ctx: Context, job: Job, token: str,
                pages: list[Page]) -> tuple[list[Page], dict[int, list[LinkGroup]]]:
    """Parse HTML pages; return the pages annotated for the store, and the links to follow
    grouped by the shard that owns their domain, then by the page they came from. Link batches
    are registered with the frontier (``expect``) before the caller sends them, so the job
    cannot end before them."""
    s = job.settings
    # The pages are this task's now: their leases run from here, not from the end of the fetch.
    ctx.frontier.renew(job.id, [(p["url"], token) for p in pages], s.lease_timeout)
    want = [p for p in pages if p["body_key"] and p["status"] == 200 and is_html(p["content_type"])
            and not p.get("unchanged")]
    bodies = ctx.redis.mget([p["body_key"] for p in want]) if want else []
    batches: dict[int, list[LinkGroup]] = defaultdict(list)
    bad = out_of_scope = near = capped = dropped = query_traps = 0
    hashed: list[Page] = []
    parsed_pages: list[tuple[Page, bool]] = []
    lost: set[str] = set()
    for page, body in zip(want, bodies, strict=True):
        if body is None:
            # The body expired or Redis lost it: storing the page now would record it without
            # its links (and ``crawler recover`` would then never follow them). Its lease
            # expires, or the rebuilt frontier holds it, and it is fetched again.
            lost.add(page["url"])
            continue
        parsed = parse_html(page["final_url"], body, page["content_type"], s.max_links_per_page)
        capped += parsed.dropped_links > 0
        dropped += parsed.dropped_links
        outlinks: list[str] = []
        for link in parsed.links:
            try:
                outlinks.append(canonicalize(link, s.max_url_length))
            except BadURL:
                bad += 1
        page.update(title=parsed.title, canonical=parsed.canonical, noindex=parsed.noindex,
                    nofollow=parsed.nofollow, outlinks=outlinks)
        bad += parsed.skipped_links
        if s.near_duplicates:
            page["simhash"] = simhash(parsed.text)
            hashed.append(page)
        parsed_pages.append((page, parsed.nofollow))
    if hashed:
        originals = ctx.near_dups.find_or_add(job.id, [(p["url"], p["simhash"]) for p in hashed],
                                              s.near_duplicate_distance)
        for page, original in zip(hashed, originals, strict=True):
            page["near_duplicate_of"] = original
            near += original is not None
    for page, nofollow in parsed_pages:
        child_depth = page["depth"] + 1
        if nofollow or (s.max_depth and child_depth > s.max_depth):
            continue
        original = page.get("near_duplicate_of")
        if original and not s.follow_near_duplicates:
            continue
        if original and query_variant(page["url"], original):
            # The same page again under another session id or sort order: its links are the
            # original's, plus the next variant's, and following them is how such traps grow.
            query_traps += 1
            continue
        by_shard: dict[int, list[str]] = defaultdict(list)
        for link in page["outlinks"]:
            if job.allowed and domain_of(link) not in job.allowed:
                out_of_scope += 1
                continue
            by_shard[shard_of_url(link, s.shards)].append(link)
        for shard, urls in by_shard.items():
            batches[shard].append([page["url"], child_depth, urls])
    jobs.count(ctx.redis, job.id, parsed=len(want) - len(lost), bad_url=bad, links_out_of_scope=out_of_scope,
               near_duplicates=near, skipped_unchanged=sum(1 for p in pages if p.get("unchanged")),
               body_lost=len(lost), links_capped=capped, links_dropped=dropped,
               **{"dropped_trap:near_duplicate_query": query_traps})
    jobs.count_cycle(ctx.redis, job.id, pages[0].get("cycle", 0) if pages else 0, parsed=len(parsed_pages))
    ctx.frontier.expect(job.id, {link_token(token, shard): links for shard, links in batches.items()},
                        s.lease_timeout)
    return [p for p in pages if p["url"] not in lost], dict(batches)


def link_token(token: str, shard: int) -> str:
    """Deterministic, so a redelivered parse re-sends batches that dedup recognises."""
    return f"{token}:{shard}"


def unpack_links(items: Sequence[LinkGroup | Link]) -> Iterator[tuple[str, int, str]]:
    """(url, depth, referrer) of each link in a batch of groups, or of single links (as
    sitemaps, ``crawler recover`` and messages from before groups send them)."""
    for item in items:
        if isinstance(item[2], list):
            referrer, depth = item[0], item[1]
            for url in item[2]:
                yield url, depth, referrer
        else:
            yield item[0], item[1], item[2]


def dedup_stage(ctx: Context, job: Job, token: str, links: Sequence[LinkGroup | Link]) -> list[str]:
    """Canonicalise links and admit the ones this job has not seen; return those URLs."""
    s = job.settings
    best: dict[str, Entry] = {}
    bad = traps = 0
    for url, depth, referrer in unpack_links(links):
        try:
            canon = canonicalize(url, s.max_url_length)
        except BadURL:
            bad += 1
            continue
        # A URL with no more path segments than the limit cannot repeat one past it.
        if (s.max_repeated_segments and canon.count("/") - 2 > s.max_repeated_segments
                and repeated_segments(canon) > s.max_repeated_segments):
            traps += 1
            continue
        prev = best.get(canon)
        if prev is None or depth < prev.depth:
            best[canon] = Entry(canon, depth, referrer)
    # The cache may not answer for depth-limited jobs: a URL seen again by a shorter path must
    # reach the exact set, which keeps shortest depths.
    cache = ctx.cache if s.local_cache_size and not s.max_depth else None
    # KeyError if the job is gone (Redis lost it): nothing may be marked seen in a Bloom filter
    # until ``crawler recover`` has rebuilt the job. The cache answers only within one cycle and
    # one rebuild of the job: what this process saw before either is not seen after it.
    space = jobs.seen_space(ctx.redis, job.id)
    queued, hits = admit_links(ctx.redis, ctx.frontier, job.id, s, list(best.values()), token=token, cache=cache,
                               bloom=ctx.bloom(job) if s.uses_bloom else None, cache_space=space)
    jobs.count(ctx.redis, job.id, bad_url=bad, dropped_trap=traps, cache_lookups=len(best) if cache else 0,
               cache_hits=hits)
    return queued


def store_stage(ctx: Context, job: Job, token: str, pages: list[Page]) -> int:
    """Write rows (and WARC records for new ones), then end the leases. Returns rows written.
    Raises ``StoreUnavailable`` (nothing written, leases untouched) while the store is down:
    see ``hold_for_retry``."""
    s = job.settings
    ctx.frontier.renew(job.id, [(p["url"], token) for p in pages], s.lease_timeout)
    store = ctx.store(s.store)
    previous = store.previous(job.id, [p["url"] for p in pages]) if s.periodic else {}
    records = [to_record(job.id, token, ctx.node, p) for p in pages]
    outcomes = {r.url: plan_visit(r, previous.get(r.url), p, s) for r, p in zip(records, pages, strict=True)}
    by_url = {p["url"]: p for p in pages}
    warc_dir = s.warc_dir if s.warc else ""
    written: list[PageRecord] = []
    archived: list[tuple[WarcFiles, tuple[str, int]]] = []

    def archive(new: list[PageRecord]) -> None:
        if not warc_dir:
            return
        want = [r for r in new if by_url[r.url]["body_key"] or r.status is not None]
        bodies = ctx.redis.mget([by_url[r.url]["body_key"] or "-" for r in want]) if want else []
        warc = ctx.warc(warc_dir, s.warc_max_size)
        archived.append((warc, warc.mark()))
        for r, body in zip(want, bodies, strict=False):
            p = by_url[r.url]
            warc.write(r, http_version=p["http_version"], request_headers=p["request_headers"],
                       response_headers=p["headers"], body=body or b"")

    try:
        written = store.put(records, before_commit=archive)
    except StoreUnavailable:
        # The records went out but the rows did not commit: take the records back, so the retry
        # does not archive them twice.
        for warc, mark in archived:
            warc.rollback(mark)
        raise
    for warc, _ in archived:
        warc.flush()  # rotation only once the rows are in, so a rollback finds its file
    if s.periodic:
        tally = Counter(outcomes[r.url] for r in written)
        jobs.count_cycle(ctx.redis, job.id, pages[0].get("cycle", 0), new=tally[schedule.NEW],
                         changed=tally[schedule.CHANGED], unchanged=tally[schedule.UNCHANGED],
                         gone=tally[schedule.GONE])
    ctx.frontier.release(job.id, [(p["url"], token) for p in pages], delay=s.delay, max_depth=s.max_depth)
    pipe = ctx.redis.pipeline(transaction=False)
    body_keys = [p["body_key"] for p in pages if p["body_key"]]
    if body_keys:
        pipe.unlink(*body_keys)
    storeretry.clear(pipe, job.id)
    pipe.execute()
    return len(written)


def hold_for_retry(ctx: Context, job: Job, token: str, pages: list[Page], error: StoreUnavailable,
                   attempt: int) -> float | None:
    """The store stage failed (try ``attempt + 1``) with the store down: keep the pages' leases
    until after the next try, show the error in ``status``, and return the seconds to wait
    before that try; None when ``store_retry_for`` is spent (the leases then run out and the
    pages come back to the frontier)."""
    s = job.settings
    wait = storeretry.next_wait(attempt, s)
    if wait is None:
        return None
    ctx.frontier.renew(job.id, [(p["url"], token) for p in pages], s.lease_timeout, extra=wait)
    # Forgotten soon after the last worker stops reporting it (a store task that gave up).
    storeretry.report(ctx.redis, job.id, str(error), ctx.node, ttl=wait + 2 * storeretry.cap(s))
    return wait


def plan_visit(rec: PageRecord, previous: dict[str, Any] | None, page: Page, s: Settings) -> str:
    """Classify one visit against the page's stored row and set its revisit schedule. A visit
    that found nothing new (304, the same bytes, a failure) keeps the stored content; a page
    that went keeps it too, marked with the cycle it went in."""
    outcome = schedule.classify(previous, status=rec.status, sha1=rec.content_sha1, error=rec.error,
                                not_modified=bool(page.get("not_modified")))
    rec.cycle = page.get("cycle", 0)
    if previous is not None and outcome != schedule.NEW and outcome != schedule.CHANGED:
        keep = [c for c in CONTENT_COLUMNS if outcome in (schedule.UNCHANGED, schedule.FAILED) or c != "status"]
        for column in keep:
            setattr(rec, column, previous[column])
        rec.etag = rec.etag or previous.get("etag") or ""
        rec.last_modified = rec.last_modified or previous.get("last_modified") or ""
        if outcome == schedule.UNCHANGED:
            rec.error = None
        rec.gone_cycle = previous.get("gone_cycle")
    else:
        rec.changed_at = rec.fetched_at
    if outcome == schedule.GONE:
        rec.gone_cycle = rec.cycle
    initial = schedule.period(s.every, s.cron, rec.fetched_at) if s.periodic else s.revisit_max
    rec.revisit_interval = schedule.next_interval(
        (previous or {}).get("revisit_interval"), outcome, initial=initial,
        low=schedule.revisit_floor(s.revisit_min, initial, s.revisit_max),
        high=s.revisit_max, grow=s.revisit_grow, shrink=s.revisit_shrink)
    # From when the cycle was due, not when the page was fetched, so a page revisited every
    # period is due at the start of the next cycle.
    rec.next_visit = (page.get("cycle_base") or rec.fetched_at) + rec.revisit_interval
    return outcome


def failed_page(raw_entry: str, reason: str) -> Page:
    """A page that was never fetched, to be stored with its reason."""
    e = Entry.decode(raw_entry)
    return {"url": e.url, "depth": e.depth, "referrer": e.referrer, "final_url": e.url, "status": None,
            "http_version": "HTTP/1.1", "headers": [], "request_headers": [], "error": reason,
            "fetched_at": time.time(), "elapsed": 0.0, "redirects": [], "body_key": "", "content_length": 0,
            "content_sha1": "", "content_type": "", "attempts": e.attempts}


def to_record(job_id: str, token: str, node: str, p: Page) -> PageRecord:
    return PageRecord(
        url=p["url"], job_id=job_id, fetch_id=token, final_url=p["final_url"], status=p["status"],
        content_type=p["content_type"], title=p.get("title", ""), depth=p["depth"], referrer=p["referrer"],
        fetched_at=p["fetched_at"], content_length=p["content_length"], content_sha1=p["content_sha1"],
        outlinks=p.get("outlinks", []), error=p["error"], fetched_by=p.get("fetched_by", node),
        redirects=p["redirects"],
        canonical=p.get("canonical"), noindex=bool(p.get("noindex")), nofollow=bool(p.get("nofollow")),
        simhash=f"{p['simhash']:016x}" if p.get("simhash") is not None else None,
        near_duplicate_of=p.get("near_duplicate_of"), etag=p.get("etag", ""),
        last_modified=p.get("last_modified", ""),
    )
