"""The fetch stage: leased entries in, fetched pages out (bodies parked in Redis)."""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

from crawler import errors, jobs
from crawler.fetch import FetchConfig
from crawler.fetch.client import FetchResult, RequestSpec, runtime
from crawler.fetch.robots import origin_of
from crawler.frontier import Entry, Fetched
from crawler.frontier.core import UNTRIED_AT, token_time
from crawler.parse import is_html
from crawler.render import decide
from crawler.spiders.base import Spider
from crawler.spiders.request import MARK, from_spec, strip_mark
from crawler.spiders.run import overrides, render_wish
from crawler.stages.context import Context
from crawler.stages.dedup import dedup_stage
from crawler.stages.messages import FetchedPage, LinkGroup
from crawler.stages.politeness import blocked_result
from crawler.stages.retry_policy import RetryPolicy
from crawler.stages.runs import plan as plan_runs
from crawler.stages.session import REFETCH_AFTER, open_session, spider_headers
from crawler.stages.stragglers import fetch_reporting_early, is_untried
from crawler.state import keys, nodes
from crawler.state.jobconf import Job
from crawler.store import StoreUnavailable
from crawler.urls import domain_of, host_key

# How long a fetched body may wait in Redis for parse and store: past any lease.
BODY_TTL = 3600
WANTED = "wanted"  # a page's ``render`` mark on its way to the render queue
IF_NEEDED = WANTED + "?"  # render=auto: render unless the page's host is decided ``no`` by then
# Render timeouts a page bound for the browser may wait in its queue past its lease, per round of
# ``render_pages`` pages its batch takes in the browser (the batches ahead of it are much alike).
RENDER_WAIT = 4


def fetch_config(job: Job) -> FetchConfig:
    s = job.settings
    # Settings checked every entry is HOST=IP.
    resolve = tuple((host, ip) for host, _, ip in (item.partition("=") for item in s.resolve))
    return FetchConfig(user_agent=s.user_agent, connect_timeout=s.connect_timeout, read_timeout=s.read_timeout,
                       deadline=s.request_deadline, max_redirects=s.max_redirects, max_body=s.max_body,
                       allow_networks=tuple(s.allow_networks), resolve=resolve,
                       dns_ttl=s.dns_ttl,
                       # A spider's callbacks get every response (JSON, XML, text, binary) but
                       # the types the job refuses; without one only HTML bodies are read.
                       html_only=not s.spider,
                       refuse_types=tuple(t.strip().lower() for t in s.refuse_types if t.strip()))


def fetch_stage(ctx: Context, job: Job, token: str, raw_entries: Sequence[str]) -> list[FetchedPage]:
    """Fetch the leased entries concurrently, within robots.txt; retryable failures go back to
    the frontier to wait out a backoff, everything else comes back as pages for parse and
    store. Bodies go to Redis under keys with a TTL."""
    s = job.settings
    ctx.check_places(job)
    entries = [Entry.decode(e) for e in raw_entries]
    confirmed_at = time.time()
    held = ctx.frontier.confirm(job.id, [(e.url, token) for e in entries], s.lease_timeout)
    todo = [e for e, ok in zip(entries, held, strict=True) if ok]
    paces = [held.runs.get(i) for i, ok in enumerate(held) if ok]
    if len(todo) < len(entries):
        jobs.count(ctx.redis, job.id, stale_leases=len(entries) - len(todo))
    if not todo:
        return []
    config = fetch_config(job)
    rt = runtime()
    fetcher = ctx.fetcher or rt.fetcher(config)
    # A request key's marker (``#~...``: another method, a body, dont_filter) never reaches the
    # network: the URL is fetched. Plain links pay one substring test.
    marked = any(MARK in e.url for e in todo)
    urls = [strip_mark(e.url) for e in todo] if marked else [e.url for e in todo]
    policies, fresh, blocked = ctx.politeness.robots_blocks(urls, job, fetcher, config, rt.run)
    go_at = [i for i, u in enumerate(urls) if u not in blocked]
    go_keys = [todo[i].url for i in go_at]
    go = [urls[i] for i in go_at]
    runs = plan_runs(todo, paces, go_at, policies, s, token, confirmed_at)
    check = ctx.politeness.hop_check(job, fetcher, config, fresh)
    cycle, cycle_base = jobs.cycle_of(ctx.redis, job.id) if s.periodic else (0, 0.0)
    # Revisits are conditional: what the last visit stored goes back as validators.
    previous = _previous(ctx, job, go_keys) if cycle > 1 and go else {}
    validators = ctx.politeness.validators({k: v for k, v in previous.items() if MARK not in k})
    spider = ctx.spider(job)
    session = open_session(ctx, job, spider, fetcher, config, rt.run) if go else None
    hook_counts: Counter[str] = Counter()
    extra_headers = session.first_hop_headers(go) if session is not None else spider_headers(spider, go, hook_counts)
    for url, extra in extra_headers.items():
        validators[url] = [*validators.get(url, []), *extra]
    hops = session.hops if session is not None else None
    specs = [_request_spec(todo[i].spec, hook_counts) if todo[i].spec else None for i in go_at]
    archive = bool(s.warc and s.warc_dir)
    # A spider's hooks read the response headers (page.headers) even when no WARC is kept.
    with_headers = archive or bool(s.spider)
    retry = RetryPolicy.of(s)
    settled = _Settled()
    host_errors: Counter[str] = Counter()
    early: list[tuple[str, str]] = []  # leases of the pages reported before the task's end

    def settle(positions: Sequence[int], results: Sequence[FetchResult], pipe: Any, at: float) -> list[Fetched]:
        """The requests at ``positions`` of ``todo`` are over: their pages, bodies and counts
        into ``settled``, their reports for the frontier returned."""
        done: list[Fetched] = []
        for i, r in zip(positions, results, strict=True):
            e = todo[i]
            settled.positions.add(i)
            if is_untried(r):
                done.append(Fetched(e.url, token, UNTRIED_AT))
                continue
            # Fetched again after the next login, not stored as the login form it came back as.
            if session is not None and session.ended(e, r) and session.refetch(e, s.max_attempts):
                done.append(Fetched(e.url, token, at + REFETCH_AFTER, r.ip))
                continue
            robots = policies.get(origin_of(e.url))
            wait = retry.wait(e.attempts, r, robots.expires - at if robots is not None else 0.0)
            if wait is not None:
                done.append(Fetched(e.url, token, at + wait, r.ip))
                jobs.count(pipe, job.id, **{f"retry:{r.error}": 1})
                if r.error == errors.RobotsUnavailable.reason and robots is not None:
                    # Nothing else says why the crawl sits still for robots_retry (5 minutes).
                    why = robots.error or (f"HTTP {robots.status}" if robots.status else "no answer")
                    jobs.note_robots_wait(pipe, job.id, origin_of(e.url), at + wait, why, at)
                continue
            done.append(Fetched(e.url, token, 0.0, r.ip))
            body_key = ""
            if r.body:
                settled.bodies[e.url] = r.body
                body_key = keys.body_ref(job.id, token, e.url)
            settled.nbytes += len(r.body)
            settled.failed += r.error is not None
            if r.error:
                jobs.count(pipe, job.id, **{f"error:{r.error}": 1})
                host_errors[host_key(e.url)] += 1
            settled.pages[i] = _page(ctx, e, r, body_key, with_headers, archive, cycle, cycle_base,
                                     previous.get(e.url))
            settled.not_modified += r.status == 304
        delays = ctx.politeness.delay_updates(job, results, policies)
        ctx.frontier.set_host_delays(job.id, delays, pipe)
        settled.delays.update(delays)
        ctx.frontier.count_hosts(job.id, host_errors, pipe)  # the pages fetched, the frontier's script counts
        host_errors.clear()
        return done

    def report(positions: list[int], results: list[FetchResult]) -> None:
        # Requests over while others are still out free their hosts now (``stragglers``), and
        # the URLs robots.txt kept from the network with the first of them.
        at = [go_at[i] for i in positions]
        # The URLs robots.txt kept from the network go with the first report, but a run's go
        # with the last of its requests (``TaskRuns.report_now``).
        over = settled.positions.union(at)
        kept_back = {i for i in range(len(todo)) if urls[i] in blocked}
        at += [i for i in sorted(kept_back - settled.positions)
               if runs.report_now(i, over, kept_back, first=not settled.positions)]
        results = [*results, *(blocked_result(urls[i], blocked[urls[i]]) for i in at[len(positions):])]
        pipe = ctx.redis.pipeline(transaction=False)
        now = time.time()
        done = settle(at, results, pipe, now)
        if session is not None:
            session.share(now)
        ctx.frontier.fetched(job.id, done, lease_timeout=s.lease_timeout, delay=s.delay, pipe=pipe,
                             delays=settled.delays)
        early.extend((f.url, token) for f in done if not f.retry_at)

    def pace(i: int, wait: float, r: FetchResult) -> float | None:
        ended = session is not None and session.ended(todo[go_at[i]], r)
        return runs.pace(i, wait, r, s, stop=retry.retries(r) or ended)

    got = fetch_reporting_early(rt, fetcher, go, config, check, validators, hops, specs if any(specs) else None,
                                report, runs=runs.go, pace=pace) if go else []
    fetched = dict(zip(go_keys, got, strict=True))
    rest = [i for i in range(len(todo)) if i not in settled.positions]
    results = [fetched.get(todo[i].url) or blocked_result(urls[i], blocked[urls[i]]) for i in rest]
    pipe = ctx.redis.pipeline(transaction=False)
    now = time.time()
    done = settle(rest, results, pipe, now)
    pages = [settled.pages[i] for i in sorted(settled.pages)]
    ctx.frontier.hold_bodies(job.id, token, settled.bodies, BODY_TTL, pipe)
    if session is not None:
        session.finish(now)
        jobs.count(pipe, job.id, **session.counts)
    jobs.count(pipe, job.id, **hook_counts)
    jobs.count_cycle(pipe, job.id, cycle, fetched=len(pages), bytes=settled.nbytes,
                     not_modified=settled.not_modified)
    nodes.count_fetched(pipe, ctx.node, len(pages))
    # Written by the frontier's script with its own counters.
    counts = {"fetched": len(pages), "failed": settled.failed, "bytes": settled.nbytes,
              "not_modified": settled.not_modified, "fetch_tasks": 1}
    ctx.frontier.fetched(job.id, done, lease_timeout=s.lease_timeout, delay=s.delay, pipe=pipe,
                         delays=settled.delays, counts=counts)
    # The final report renews the leases it names; those reported early, as fresh then, keep
    # their dispatch's expiry, which the straggler may have spent much of.
    ctx.frontier.renew(job.id, early, s.lease_timeout, since=token_time(token))
    if s.render != "never":
        pages = _mark_for_render(ctx, job, token, spider, pages)
    if s.sitemaps and policies:
        found, over_cap = ctx.politeness.sitemap_urls(job, policies, fetcher, config, rt.run)
        _admit_sitemaps(ctx, job, found)
        jobs.count(ctx.redis, job.id, dropped_sitemap_cap=over_cap)
    return pages


@dataclasses.dataclass
class _Settled:
    """What a fetch task's requests over so far came to (``fetch_stage``): its pages for parse
    and store by position in the task, their bodies by URL, the hosts' new delays."""

    positions: set[int] = dataclasses.field(default_factory=set)  # of every request over, pages or not
    pages: dict[int, FetchedPage] = dataclasses.field(default_factory=dict)
    bodies: dict[str, bytes] = dataclasses.field(default_factory=dict)
    delays: dict[str, float] = dataclasses.field(default_factory=dict)
    nbytes: int = 0
    failed: int = 0
    not_modified: int = 0


def _page(ctx: Context, e: Entry, r: FetchResult, body_key: str, with_headers: bool, archive: bool, cycle: int,
          cycle_base: float, previous: dict[str, Any] | None) -> FetchedPage:
    sha1 = r.sha1  # hashed on each read: once a page
    return FetchedPage(
        url=e.url, depth=e.depth, referrer=e.referrer, final_url=r.final_url, status=r.status,
        http_version=r.http_version,
        # Headers travel on only for the WARC records and a spider: they are most of a message's bytes.
        headers=tuple(r.headers) if with_headers else (),
        request_headers=tuple(r.request_headers) if archive else (),
        error=r.error, fetched_at=r.fetched_at, elapsed=round(r.elapsed, 4), redirects=tuple(r.redirects),
        body_key=body_key, content_length=len(r.body), content_sha1=sha1, content_type=r.content_type,
        fetched_by=ctx.node, attempts=e.attempts + 1, request=e.spec,
        etag=r.header("etag") or "", last_modified=r.header("last-modified") or "",
        cycle=cycle, cycle_base=cycle_base, not_modified=r.status == 304,
        # The same bytes as last time: nothing to parse again.
        unchanged=r.status == 200 and not r.error and (previous or {}).get("content_sha1") == sha1,
    )


def _request_spec(spec: str, counts: Counter[str]) -> RequestSpec | None:
    """What the client sends for a request's spec: None for a plain GET (or a spec that does
    not read, counted ``spider_error:request_spec``: the URL is fetched with a GET)."""
    try:
        req = from_spec(spec, "-")
    except (ValueError, TypeError):
        counts["spider_error"] += 1
        counts["spider_error:request_spec"] += 1
        return None
    if req.method == "GET" and not req.body and not req.headers:
        return None
    return req.method, req.body, list(req.headers.items())


def _mark_for_render(ctx: Context, job: Job, token: str, spider: Spider | None,
                     pages: list[FetchedPage]) -> list[FetchedPage]:
    """Mark the HTML pages a browser is to render (``render``: ``wanted[:<selector>]``, or
    ``wanted?``: only if the host, still sampling, turns out to need it): the job's ``render``
    setting decides, per host for ``auto``, unless the spider says otherwise."""
    s = job.settings
    html = [p for p in pages if p.status == 200 and p.body_key and not p.unchanged and is_html(p.content_type)]
    counts: Counter[str] = Counter()
    asks = spider is not None and overrides(spider, "render")
    wishes = [render_wish(spider, p.url, counts) if asks and spider is not None else None for p in html]
    # Only pages the spider leaves to the setting take a sample or a recheck.
    left = [p for p, wish in zip(html, wishes, strict=True) if wish is None]
    picks = iter(decide.choose(ctx.redis, job.id, s, [host_key(p.url) for p in left]))
    marks: dict[str, str] = {}
    for p, wish in zip(html, wishes, strict=True):
        if wish is None:
            pick = next(picks)
            if pick:
                marks[p.url] = WANTED if pick == decide.NOW else IF_NEEDED
        elif wish is not False:
            marks[p.url] = WANTED + (f":{wish}" if isinstance(wish, str) and wish else "")
    if marks or counts:
        jobs.count(ctx.redis, job.id, render_queued=len(marks), **counts)
    if marks:
        # They may wait behind other pages for a browser: hold them longer than a parse would.
        rounds = -(-len(marks) // max(1, s.render_pages))  # ceil
        ctx.frontier.renew(job.id, [(p.url, token) for p in html if p.url in marks], s.lease_timeout,
                           extra=RENDER_WAIT * s.render_timeout * rounds)
    return [dataclasses.replace(p, render=marks[p.url]) if p.url in marks else p for p in pages]


def _previous(ctx: Context, job: Job, urls: list[str]) -> dict[str, dict[str, Any]]:
    try:
        return ctx.page_store(job.settings.store).previous(job.id, urls)
    except StoreUnavailable:
        # With the store down, fetch unconditionally rather than not at all: store compares
        # against the stored row again when it is back.
        jobs.count(ctx.redis, job.id, unconditional_fetches=len(urls))
        return {}


def _admit_sitemaps(ctx: Context, job: Job, found: list[tuple[str, str]]) -> None:
    links = [LinkGroup.single(url, 1, sitemap) for url, sitemap in found if not job.allowed or _in_scope(url, job)]
    if links:
        admitted = dedup_stage(ctx, job, "", links)
        jobs.count(ctx.redis, job.id, sitemap_urls=len(admitted))


def _in_scope(url: str, job: Job) -> bool:
    try:
        return domain_of(url) in job.allowed
    except ValueError:
        return False
