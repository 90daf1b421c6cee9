"""The render stage: fetched pages that need a browser in, the same pages out with the DOM the
browser built parked beside their HTTP body (``rendered_key``), for parse to read instead.

A page that cannot be rendered (its scripts run past ``render_timeout``, the browser crashes,
no Chromium here) goes on to parse from its HTML with the reason in ``render``: it is stored,
never lost. One still busy at its deadline after its load event goes on with the DOM it had
then (``render_timeout, partial DOM``). With ``render=auto`` each rendered page is compared with
its own HTML and the host's decision learns from it (``crawler.render.decide``); a page that timed
out or failed is counted against its host and not learnt from (it says nothing of what the
browser adds). A page that tried to leave itself (``location``, a form POST) is read as it stood
and noted so; where a GET navigation was going is followed as one of its links. A page marked to render only if
its host needs it (``wanted?``) is let through unrendered once the host is decided ``no``.

The browser's requests to a host keep to that host's politeness: its in-flight limit, and its
delay as fetches have it (an operator's for the host, else the job's, raised by the adaptive one).
"""

from __future__ import annotations

import asyncio
import atexit
import dataclasses
import logging
import os
from collections import Counter
from collections.abc import Sequence
from html import escape
from typing import cast

from crawler import jobs
from crawler.config.settings import Settings
from crawler.fetch.client import HttpFetcher, runtime
from crawler.parse import parse_html
from crawler.render import decide
from crawler.render.browser import Browser, Rendered, RenderUnavailable, chromium_path
from crawler.render.guard import Guard, HostTurns, Limits, Rules
from crawler.stages.context import Context
from crawler.stages.fetch import BODY_TTL, IF_NEEDED, WANTED, fetch_config
from crawler.stages.messages import FetchedPage
from crawler.state.jobconf import Job
from crawler.urls import host_key

RENDERED_TYPE = "text/html; charset=utf-8"

log = logging.getLogger(__name__)

_browser: Browser | None = None
_browser_pid = 0


def browser(s: Settings) -> Browser:
    """This process's browser (RenderUnavailable without Chromium), rebuilt after a fork, and
    closed when the process exits."""
    global _browser, _browser_pid
    if _browser is None or _browser_pid != os.getpid():
        _browser = Browser(chromium_path(s.chromium), s.render_pages, s.render_recycle_pages, s.render_max_rss)
        _browser_pid = os.getpid()
        atexit.register(_close_at_exit, _browser)
    return _browser


def close_browser() -> None:
    """Close this process's browser, if it has one (a prefork child's shutdown: atexit does not
    run there)."""
    if _browser is not None:
        _close_at_exit(_browser)


def _close_at_exit(b: Browser) -> None:
    # A worker's warm shutdown ends here: its browser and driver go with it rather than
    # outliving it for a moment as orphans.
    if _browser is b and _browser_pid == os.getpid():
        try:
            runtime().run(asyncio.wait_for(b.close(), 15.0))
        except Exception:
            log.warning("render: the browser did not close cleanly", exc_info=True)


def wanted(page: FetchedPage) -> bool:
    return page.render.startswith(WANTED)


def wait_selector(page: FetchedPage) -> str:
    return page.render.partition(":")[2]


def render_stage(ctx: Context, job: Job, token: str, pages: list[FetchedPage]) -> list[FetchedPage]:
    """Render the pages marked for it; return every page, rendered or with the reason it was not."""
    s = job.settings
    ctx.frontier.renew(job.id, [(p.url, token) for p in pages], s.lease_timeout)
    maybe = [p for p in pages if p.render == IF_NEEDED]
    decided = decide.decisions(ctx.redis, job.id, [host_key(p.url) for p in maybe])
    unneeded = {p.url for p in maybe if decided.get(host_key(p.url)) == decide.NO}
    if unneeded:
        pages = [dataclasses.replace(p, render="") if p.url in unneeded else p for p in pages]
    todo = [p for p in pages if wanted(p) and p.body_key]
    bodies = ctx.bodies([p.body_key for p in todo])
    counts: Counter[str] = Counter(render_not_needed=len(unneeded))
    try:
        b = browser(s)
    except RenderUnavailable:
        jobs.count(ctx.redis, job.id, render_unavailable=len(todo), render_not_needed=len(unneeded))
        return [dataclasses.replace(p, render="render_unavailable") if wanted(p) else p for p in pages]
    rt = runtime()
    config = fetch_config(job)
    # The guard sends any method a page asks for: the client itself, not the fetch-only protocol.
    fetcher = cast(HttpFetcher, ctx.fetcher or rt.fetcher(config))
    robots = ctx.politeness.robots_check(job, fetcher, config) if s.obey_robots else None
    turns = HostTurns(s.per_host, s.delay, host_limits(ctx, job, [host_key(p.url) for p in todo]))
    rules = Rules(block_types=frozenset(s.render_block_types),
                  cdn_hosts=frozenset(h.lower() for h in s.render_cdn_hosts), domains=job.allowed,
                  max_requests=s.render_max_requests, max_bytes=s.render_max_bytes)
    guards = [Guard(p.final_url or p.url, body or b"", p.content_type, fetcher, config, robots, turns, counts, rules)
              for p, body in zip(todo, bodies, strict=True)]

    leases = [(p.url, token) for p in pages]

    async def keep_leases() -> None:
        # A batch of slow pages may take longer than a lease: hold them while they render.
        while True:
            await asyncio.sleep(s.lease_timeout / 3)
            ctx.frontier.renew(job.id, leases, s.lease_timeout)

    async def render_all() -> list[Rendered]:
        await b.recycle_if_due()
        keeper = asyncio.ensure_future(keep_leases())
        try:
            return list(await asyncio.gather(*(
                b.render(g.url, g, s.render_timeout, s.render_settle, wait_selector(p)) if body is not None
                else _lost() for p, g, body in zip(todo, guards, bodies, strict=True))))
        finally:
            keeper.cancel()

    results = dict(zip([p.url for p in todo], zip(rt.run(render_all()), guards, bodies, strict=True), strict=True))
    pipe = ctx.redis.pipeline(transaction=False)
    out: list[FetchedPage] = []
    for p in pages:
        if p.url not in results:
            out.append(dataclasses.replace(p, render="") if wanted(p) else p)
            continue
        got, guard, body = results[p.url]
        if got.error:
            counts[got.error] += 1
            # Only a render that completed says what the browser gains: one that timed out or
            # failed is counted against its host, never learnt from.
            decide.unfinished(pipe, job.id, host_key(p.url), got.error)
        if not got.html:
            out.append(dataclasses.replace(p, render=got.error))
            continue
        html = got.html
        if guard.target:
            # Where the page sent itself, followed as one of its links (scope and dedup decide).
            at = html.rfind("</body>")
            at = len(html) if at < 0 else at
            html = f'{html[:at]}<a href="{escape(guard.target)}" data-crawler="navigation"></a>{html[at:]}'
        dom = html.encode("utf-8", "replace")
        if len(dom) > s.max_body:
            # Scripts can build a document of any size: past the body cap it is not kept.
            counts["render_too_large"] += 1
            out.append(dataclasses.replace(p, render="render_too_large"))
            continue
        key = ctx.frontier.hold_body(job.id, token, p.url + "#rendered", dom, BODY_TTL, pipe)
        note = ", ".join([f"{got.error}, partial DOM" if got.error else "rendered",
                          *([guard.navigated] if guard.navigated else []),
                          *([f"{guard.popups} popups closed"] if guard.popups else []),
                          *([f"{guard.dialogs} dialogs dismissed"] if guard.dialogs else []),
                          *([f"{guard.downloads} downloads refused"] if guard.downloads else []),
                          *([f"{guard.blocked} requests blocked"] if guard.blocked else [])])
        if not got.error:
            counts["rendered"] += 1
        if s.render == "auto" and body is not None and not got.error:
            decide.learn(ctx.redis, job.id, s, host_key(p.url), compare(p, body, dom, s))
        out.append(dataclasses.replace(p, rendered_key=key, render=note))
    jobs.count(pipe, job.id, **counts)
    pipe.execute()
    return out


def host_limits(ctx: Context, job: Job, hosts: Sequence[str]) -> Limits:
    """Each host's (in-flight limit, delay) for the browser's requests: the operator's limit for
    the host, else the job's; and the operator's delay for the host, else the job's, or the
    host's current (adaptive) delay where that is larger. Read from the frontier for ``hosts``
    now, and for any other host on its first request."""
    s = job.settings
    known: dict[str, tuple[int, float]] = {}

    def load(names: list[str]) -> None:
        delays = ctx.frontier.host_delays(job.id, names)
        overrides = ctx.frontier.host_overrides(job.id, names)
        for host, own, o in zip(names, delays, overrides, strict=True):
            per_host = o.per_host if o is not None and o.per_host is not None else s.per_host
            # As for fetches (crawler.stages.politeness): an operator's delay replaces the job's as the
            # host's floor, and the adaptive delay may only raise it.
            floor = o.delay if o is not None and o.delay is not None else s.delay
            known[host] = (per_host, max(floor, own or 0.0))

    load(sorted(set(hosts)))

    def limits(host: str) -> tuple[int, float]:
        if host not in known:
            load([host])
        return known[host]

    return limits


async def _lost() -> Rendered:
    return Rendered(error="render_body_lost")


def compare(page: FetchedPage, body: bytes, dom: bytes, s: Settings) -> decide.Comparison:
    raw = parse_html(page.final_url or page.url, body, page.content_type, s.max_links_per_page, True)
    rendered = parse_html(page.final_url or page.url, dom, RENDERED_TYPE, s.max_links_per_page, True)
    return decide.Comparison(len(set(raw.links)), len(set(rendered.links)), len(raw.text), len(rendered.text))
