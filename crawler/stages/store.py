"""The store stage: pages in, their items through the job's pipelines (``crawler.stages.pipelines``),
rows (and WARC records) written, leases ended."""

from __future__ import annotations

from collections import Counter
from typing import Any

from crawler import jobs
from crawler.config import schedule
from crawler.config.settings import Settings
from crawler.stages import pipelines
from crawler.stages.context import Context
from crawler.stages.messages import FetchedPage
from crawler.stages.redirects import redirect_claims
from crawler.stages.retry_policy import store_cap, store_wait
from crawler.state import store_errors
from crawler.state.jobconf import Job
from crawler.store import PageRecord, StoreUnavailable
from crawler.store.base import CONTENT_COLUMNS, ContentRecord
from crawler.store.warc import WarcFiles


def store_stage(ctx: Context, job: Job, token: str, pages: list[FetchedPage], retried: bool = False) -> int:
    """Write rows (and WARC records for new ones), then end the leases. Returns rows written.
    Raises ``StoreUnavailable`` (nothing written, leases untouched) while the store is down:
    see ``hold_for_retry``; SpiderUnavailable when the job's spider or item pipelines cannot be
    loaded here. ``retried``: this batch waited out a store error (its success ends it)."""
    s = job.settings
    ctx.frontier.renew(job.id, [(p.url, token) for p in pages], s.lease_timeout,
                       since=min((p.fetched_at for p in pages), default=None))
    store = ctx.page_store(s.store)
    previous = store.previous(job.id, [p.url for p in pages]) if s.periodic else {}
    records = [to_record(job.id, token, ctx.node, p) for p in pages]
    pipes = pipelines.job_pipelines(ctx, job)
    piped: list[str] = []
    if pipes:
        # Only pages whose fetch is not stored yet: a redelivered batch sends nothing twice.
        stored = previous if s.periodic else store.previous(job.id, [r.url for r in records if r.items])
        piped = pipelines.fields(records)
        with pipelines.leases_kept(ctx, job, [(p.url, token) for p in pages]):
            pipelines.run(ctx.redis, job.id, pipes,
                          [r for r in records if (stored.get(r.url) or {}).get("fetch_id") != r.fetch_id])
    outcomes = {r.url: plan_visit(r, previous.get(r.url), p, s) for r, p in zip(records, pages, strict=True)}
    by_url = {p.url: p for p in pages}
    warc_dir = s.warc_dir if s.warc else ""
    written: list[PageRecord] = []
    archived: list[tuple[WarcFiles, tuple[str, int]]] = []

    def archive(new: list[PageRecord]) -> None:
        if not warc_dir:
            return
        want = [r for r in new if by_url[r.url].body_key or r.status is not None]
        bodies = ctx.bodies([by_url[r.url].body_key or "-" for r in want])
        doms = ctx.bodies([by_url[r.url].rendered_key or "-" for r in want]) if any(
            by_url[r.url].rendered_key for r in want) else [None] * len(want)
        warc = ctx.warc(warc_dir, s.warc_max_size)
        archived.append((warc, warc.mark()))
        for r, body, dom in zip(want, bodies, doms, strict=False):
            p = by_url[r.url]
            warc.write(r, http_version=p.http_version, request_headers=list(p.request_headers),
                       response_headers=list(p.headers), body=body or b"", rendered=dom)

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
        jobs.count_cycle(ctx.redis, job.id, pages[0].cycle, new=tally[schedule.NEW],
                         changed=tally[schedule.CHANGED], unchanged=tally[schedule.UNCHANGED],
                         gone=tally[schedule.GONE])
    leases = [(p.url, token) for p in pages]
    claims = redirect_claims(pages, s)
    if not claims:  # most batches: nothing to let go, so no URLs need come back
        ctx.frontier.release(job.id, leases, delay=s.delay, max_depth=s.max_depth)
    else:
        # Stored, and its lease ended here: a page redirected elsewhere will not be parsed again,
        # its claim's answer can go. One whose lease had expired is being fetched again by someone
        # else, who must get the same answer (else it is stored as a duplicate of its own target).
        ended = set(ctx.frontier.release_stored(job.id, leases, delay=s.delay, max_depth=s.max_depth))
        gone = [c for c in claims if c.page in ended]
        if gone:
            ctx.seen_set(job).forget_claims(gone)
    pipe = ctx.redis.pipeline(transaction=False)
    body_keys = [k for p in pages for k in (p.body_key, p.rendered_key) if k]
    if body_keys:
        ctx.frontier.drop_bodies(body_keys, pipe)
    store_errors.clear(pipe, job.id, force=retried)
    if piped:
        pipe.hdel(pipelines.key(job.id), *piped)
    pipe.execute()
    pipelines.after_batch(ctx.redis, job.id, has_pipelines=pipes is not None)
    return len(written)


def hold_for_retry(ctx: Context, job: Job, token: str, pages: list[FetchedPage], error: StoreUnavailable,
                   attempt: int) -> float | None:
    """The store stage failed (try ``attempt + 1``) with the store down: keep the pages' leases
    until after the next try, show the error in ``status``, and return the seconds to wait
    before that try; None when ``store_retry_for`` is spent (the leases then run out and the
    pages come back to the frontier)."""
    s = job.settings
    wait = store_wait(attempt, s)
    if wait is None:
        return None
    ctx.frontier.renew(job.id, [(p.url, token) for p in pages], s.lease_timeout, extra=wait)
    # Forgotten soon after the last worker stops reporting it (a store task that gave up).
    store_errors.report(ctx.redis, job.id, str(error), ctx.node, ttl=wait + 2 * store_cap(s))
    return wait


def plan_visit(rec: PageRecord, previous: dict[str, Any] | None, page: FetchedPage, s: Settings) -> str:
    """Classify one visit against the page's stored row and set its revisit schedule. A visit
    that found nothing new (304, the same bytes, a failure) keeps the stored content; a page
    that went keeps it too, marked with the cycle it went in."""
    outcome = schedule.classify(previous, status=rec.status, sha1=rec.content_sha1, error=rec.error,
                                not_modified=page.not_modified)
    rec.cycle = page.cycle
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
    rec.next_visit = (page.cycle_base or rec.fetched_at) + rec.revisit_interval
    return outcome


def to_record(job_id: str, token: str, node: str, p: FetchedPage) -> PageRecord:
    return PageRecord(
        url=p.url, job_id=job_id, fetch_id=token, final_url=p.final_url, status=p.status,
        content_type=p.content_type, title=p.title, depth=p.depth, referrer=p.referrer,
        fetched_at=p.fetched_at, content_length=p.content_length, content_sha1=p.content_sha1,
        outlinks=list(p.outlinks), error=p.error, fetched_by=p.fetched_by or node,
        redirects=[list(hop) for hop in p.redirects],
        canonical=p.canonical, noindex=p.noindex, nofollow=p.nofollow,
        simhash=f"{p.simhash:016x}" if p.simhash is not None else None,
        near_duplicate_of=p.near_duplicate_of, etag=p.etag, last_modified=p.last_modified,
        content=ContentRecord(p.main_format, p.main_text or "", title=p.main_title, author=p.main_author,
                              date=p.main_date, language=p.main_language) if p.main_format else None,
        items=list(p.items) if p.items_parsed else None,
        render=p.render,
        requests=[list(r) for r in p.requests], request=p.request,
    )
