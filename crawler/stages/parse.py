"""The parse stage: fetched pages in, pages annotated for the store and link groups out."""

from __future__ import annotations

import dataclasses
from collections import Counter, defaultdict
from typing import Any

from crawler import jobs
from crawler.config.scope import url_patterns
from crawler.config.settings import Settings
from crawler.dedup.simhash import simhash
from crawler.errors import BadURL
from crawler.extract import noisefilter
from crawler.extract.maintext import Format, MainText, extract_main_text
from crawler.frontier.sharding import shard_of_url
from crawler.parse import ParsedPage, is_html, parse_html
from crawler.spiders.base import Spider
from crawler.spiders.page import Page
from crawler.spiders.request import MARK, Request, from_spec, origin_of, request_key, strip_mark
from crawler.spiders.run import HookResult, allowed, overrides, request_spec, run_page_hook
from crawler.stages.context import Context
from crawler.stages.messages import FetchedPage, LinkGroup, groups_to_json
from crawler.stages.redirects import redirect_claims
from crawler.state.jobconf import Job
from crawler.urls import canonicalize, domain_of, paged_variant, query_variant

# Pages a browser rendered are parsed as UTF-8 (the DOM is serialised so), whatever the response said.
RENDERED_TYPE = "text/html; charset=utf-8"


def link_token(token: str, shard: int) -> str:
    """Deterministic, so a redelivered parse re-sends batches that dedup recognises. The link
    batches of a fetch's rendered pages (parsed in a message of their own, under the same lease
    token) are told apart by a suffix on the token: ``token + RENDERED``."""
    return f"{token}:{shard}"


RENDERED = "r"


def parse_stage(ctx: Context, job: Job, token: str, pages: list[FetchedPage],
                links_as: str = "") -> tuple[list[FetchedPage], dict[int, list[LinkGroup]]]:
    """Parse HTML pages; return the pages annotated for the store, and the links to follow
    grouped by the shard that owns their domain (of a split frontier, by its part), then by the
    page they came from. Link batches are registered with the frontier (``expect``) before the
    caller sends them, so the job cannot end before them. ``links_as``: a suffix for the link
    batches' tokens (``RENDERED`` for pages parsed apart from the rest of their fetch)."""
    s = job.settings
    # The pages are this task's now: their leases run from here, not from the end of the fetch.
    ctx.frontier.renew(job.id, [(p.url, token) for p in pages], s.lease_timeout,
                       since=min((p.fetched_at for p in pages), default=None))
    spider = ctx.spider(job)
    if spider is None:
        want = [p for p in pages if p.body_key and p.status == 200 and is_html(p.content_type) and not p.unchanged]
    else:
        # Every response reaches the spider: JSON, XML, text, binary, an empty 204 too.
        want = [p for p in pages if not p.error and p.status is not None and 200 <= p.status < 300
                and not p.unchanged and (p.body_key or not is_html(p.content_type))]
    # A page whose fetch ended at a URL the job had seen (linked, or redirected to by another
    # page) is that URL's duplicate, as Scrapy's duplicate filter drops a redirected request:
    # not parsed, no callback, stored as the target's duplicate.
    claims = redirect_claims(want, s)
    answers = ctx.seen_set(job).claim_targets(claims) if claims else []
    seen_first = {c.page: c.target for c, new in zip(claims, answers, strict=True) if not new}
    if seen_first:
        want = [p for p in want if p.url not in seen_first]
    hooks: Counter[str] = Counter()
    parsing = {p.url for p in want}
    failed = [p for p in pages if p.error and p.url not in parsing and spider is not None
              and (overrides(spider, "on_error") or _errback(p.request))]
    # A page a browser rendered is parsed from the DOM it built.
    fetched = ctx.bodies([p.rendered_key or p.body_key or "-" for p in want] + [p.body_key or "-" for p in failed])
    bodies, failed_bodies = fetched[:len(want)], fetched[len(want):]
    # key -> spec of the outlinks that are requests with more than a URL (per page)
    page_specs: dict[str, dict[str, str]] = {}
    batches: dict[int, list[LinkGroup]] = defaultdict(list)
    bad = fragment = not_http = out_of_scope = near = capped = dropped = query_traps = 0
    drop = s.dropped_params
    nofollow_links = denied = noise_block = noise_pattern = 0
    # page URL -> the outlinks to follow, when noise_links=skip (outlinks themselves stay complete)
    unnoisy: dict[str, set[str]] = {}
    patterns = url_patterns(s.allow_urls, s.deny_urls)
    annotated: dict[str, FetchedPage] = {}
    nofollows: dict[str, bool] = {}
    lost: set[str] = set()
    extracted: Counter[str] = Counter()
    for page, body in zip(want, bodies, strict=True):
        if body is None and (page.body_key or page.rendered_key):
            # The body expired or Redis lost it: storing the page now would record it without
            # its links (and ``crawler recover`` would then never follow them). Its lease
            # expires, or the rebuilt frontier holds it, and it is fetched again.
            lost.add(page.url)
            continue
        body = body or b""
        if spider is not None and not page.rendered_key and not is_html(page.content_type):
            # Not HTML: no tree, no links of the crawler's own; the request's callback gets it.
            req = _request_of(page, hooks)
            got = run_callback(spider, req.callback or "parse", hook_page(page, body, None, req), s, None)
            outlinks, specs = _outlinks(spider, page, got, [], s, drop, hooks) if got is not None else ([], {})
            bad += outlinks.count("")
            outlinks = [u for u in outlinks if u]
            page_specs[page.url] = specs
            annotated[page.url] = dataclasses.replace(page, outlinks=tuple(outlinks),
                                                      requests=tuple((k, specs[k]) for k in outlinks if k in specs))
            if got is not None:
                annotated[page.url] = dataclasses.replace(annotated[page.url], items=tuple(got.items),
                                                          items_parsed=True)
            nofollows[page.url] = False
            continue
        parsed = parse_html(page.final_url, body, RENDERED_TYPE if page.rendered_key else page.content_type,
                            s.max_links_per_page, s.follow_nofollow)
        capped += parsed.dropped_links > 0
        dropped += parsed.dropped_links
        links = parsed.links
        spider_items: tuple[dict[str, Any], ...] | None = None
        specs = {}
        if spider is not None:
            req = _request_of(page, hooks)
            got = run_callback(spider, req.callback or "parse", hook_page(page, body, parsed, req), s, parsed)
            if got is not None:
                outlinks, specs = _outlinks(spider, page, got, parsed.links if spider.follow_links else [], s,
                                            drop, hooks)
                spider_items = tuple(got.items)
            elif not spider.follow_links:
                outlinks = []
            else:
                outlinks, _ = _outlinks(spider, page, None, parsed.links, s, drop, hooks)
            bad += outlinks.count("")
            outlinks = [u for u in outlinks if u]
        else:
            outlinks = []
            for link in links:
                try:
                    outlinks.append(canonicalize(link, s.max_url_length, drop))
                except BadURL:
                    bad += 1
        page_specs[page.url] = specs
        bad += parsed.bad_links
        fragment += parsed.fragment_links
        not_http += parsed.not_http_links
        nofollow_links += parsed.nofollow_links
        annotated[page.url] = dataclasses.replace(
            page, title=parsed.title, canonical=parsed.canonical, noindex=parsed.noindex, nofollow=parsed.nofollow,
            outlinks=tuple(outlinks), simhash=simhash(parsed.raw_text) if s.near_duplicates else None,
            requests=tuple((k, specs[k]) for k in outlinks if k in specs) if specs else ())
        if spider_items is not None:
            annotated[page.url] = dataclasses.replace(annotated[page.url], items=spider_items, items_parsed=True)
        nofollows[page.url] = parsed.nofollow
        if s.noise_links == "skip" and not parsed.nofollow:
            kept, noise = noisefilter.filter_noise(parsed, outlinks, job.id, noisefilter.CLUSTERS, s.max_url_length,
                                                   drop)
            unnoisy[page.url] = set(kept)
            noise_block += noise.block
            noise_pattern += noise.pattern
        if s.extract:
            annotated[page.url] = with_main_text(annotated[page.url], body, s.extract, extracted)
    for page, maybe_body in zip(failed, failed_bodies, strict=True):
        assert spider is not None  # only pages of a spider that handles errors are in ``failed``
        req = _request_of(page, hooks)
        errback = req.errback or "on_error"
        got = run_page_hook(spider, errback, hook_page(page, maybe_body or b"", None, req), s.max_items_per_page,
                            s.max_item_bytes)
        outlinks, specs = _outlinks(spider, page, got, [], s, drop, hooks)
        bad += outlinks.count("")
        outlinks = [u for u in outlinks if u]
        page_specs[page.url] = specs
        annotated[page.url] = dataclasses.replace(page, outlinks=tuple(outlinks), items=tuple(got.items),
                                                  items_parsed=True,
                                                  requests=tuple((k, specs[k]) for k in outlinks if k in specs))
        nofollows[page.url] = False
    hashed = [p for p in annotated.values() if p.simhash is not None]
    if hashed:
        originals = ctx.near_dups.find_or_add(job.id, [(p.url, p.simhash) for p in hashed if p.simhash is not None],
                                              s.near_duplicate_distance)
        for page, original in zip(hashed, originals, strict=True):
            annotated[page.url] = dataclasses.replace(page, near_duplicate_of=original)
            near += original is not None
    spider_allows = spider if spider is not None and overrides(spider, "allow") else None
    spider_chooses = spider is not None and not spider.follow_links  # every link it follows, it yielded
    denied_spider = 0
    expanded = [p for p in annotated.values() if not nofollows[p.url] and not (s.max_depth and p.depth >= s.max_depth)
                and not (p.near_duplicate_of and not s.follow_near_duplicates)]
    # A near-duplicate of a page of the same path under another query is the same page under
    # another session id or sort order: its links are the original's plus the next variant's,
    # and following them is how such traps grow. Two kinds are followed all the same, up to
    # ``max_query_variants`` pages of a host, path and parameter names: pagination
    # (``urls.paged_variant``), and a spider's own requests from a page of the other kind.
    variant_of = {p.url: p.near_duplicate_of for p in expanded
                  if p.near_duplicate_of and query_variant(p.url, p.near_duplicate_of)}
    paged = {url for url, of in variant_of.items() if paged_variant(url, of)}
    capped_variants = ctx.variants.pages_over_cap(
        job.id, [(url, "paged" if url in paged else "spider") for url in variant_of
                 if url in paged or spider is not None], s.max_query_variants)
    # A batch holds the links of one shard's hosts; of a split frontier, of one part's, which
    # the job's shard count, once it went down, no longer matches (see ``sharding.standby``).
    home = ctx.frontier.split(job.id) or s.shards
    for page in expanded:
        child_depth = page.depth + 1
        specs = page_specs.get(page.url) or {}
        trapped = page.url in variant_of and page.url not in paged
        if page.url in capped_variants or (trapped and spider is None):
            query_traps += 1
            continue
        query_traps += trapped
        # From a trap's page, a spider's own requests only (all it follows, for most spiders).
        only_specs = trapped and not spider_chooses
        by_shard: dict[int, list[str]] = defaultdict(list)
        keep = unnoisy.get(page.url)
        for link in page.outlinks:
            if link not in specs and (only_specs or (keep is not None and link not in keep)):
                continue
            url = strip_mark(link) if specs and MARK in link else link
            if job.allowed and domain_of(url) not in job.allowed:
                out_of_scope += 1
                continue
            if not patterns.empty and not patterns.follows(url):
                denied += 1
                continue
            if spider_allows is not None and not allowed(spider_allows, url, hooks):
                denied_spider += 1
                continue
            by_shard[shard_of_url(url, home)].append(link)
        for shard, urls in by_shard.items():
            batches[shard].append(LinkGroup(page.url, child_depth, tuple(urls),
                                            tuple((u, specs[u]) for u in urls if u in specs) if specs else ()))
    # The counters in one round trip: one HINCRBY each would be a round trip each.
    pipe = ctx.redis.pipeline(transaction=False)
    jobs.count(pipe, job.id, parsed=len(want) - len(lost), bad_url=bad, links_fragment_only=fragment,
               links_not_http=not_http, links_out_of_scope=out_of_scope,
               near_duplicates=near, skipped_unchanged=sum(1 for p in pages if p.unchanged),
               body_lost=len(lost), links_capped=capped, links_dropped=dropped,
               links_nofollow=nofollow_links, links_denied_pattern=denied, links_denied_spider=denied_spider,
               links_noise_block=noise_block, links_noise_pattern=noise_pattern,
               items=sum(len(p.items) for p in annotated.values()), redirect_duplicates=len(seen_first), **hooks,
               **{"dropped_trap:near_duplicate_query": query_traps}, **extracted)
    jobs.count_cycle(pipe, job.id, pages[0].cycle if pages else 0, parsed=len(annotated))
    pipe.execute()
    ctx.frontier.expect(job.id, {link_token(token + links_as, shard): groups_to_json(links)
                                 for shard, links in batches.items()},
                        s.lease_timeout, shards={link_token(token + links_as, shard): shard for shard in batches})
    out = [annotated.get(p.url) or (_redirect_duplicate(p, seen_first[p.url], spider is not None)
                                    if p.url in seen_first else p) for p in pages if p.url not in lost]
    return out, dict(batches)


def _redirect_duplicate(page: FetchedPage, target: str, spider: bool) -> FetchedPage:
    """A page whose redirect ended at ``target``, seen before it: stored as its duplicate. A
    spider's items for it are none (a periodic job's row would keep the last cycle's)."""
    if spider:
        return dataclasses.replace(page, near_duplicate_of=target, items=(), items_parsed=True)
    return dataclasses.replace(page, near_duplicate_of=target)


def with_main_text(page: FetchedPage, body: bytes, fmt: str, tally: Counter[str]) -> FetchedPage:
    """``page`` with its main text (as ``fmt``, the job's ``extract``), counted in ``tally`` as
    ``extracted``; or ``page`` with ``main_format`` but no ``main_text``, counted
    ``extract:<reason>``. The extractor never raises for a page, so a page without text loses
    only its text, never its row."""
    wanted: Format = "markdown" if fmt == "markdown" else "text"
    got = extract_main_text(body, page.final_url or page.url, wanted, content_type=page.content_type)
    if not isinstance(got, MainText):
        tally[f"extract:{got.reason}"] += 1
        # The format without a text says "looked, found none": the store drops an older text.
        return dataclasses.replace(page, main_format=wanted)
    tally["extracted"] += 1
    return dataclasses.replace(page, main_text=got.text, main_format=got.format, main_title=got.title,
                               main_author=got.author, main_date=got.date, main_language=got.language)


def hook_page(page: FetchedPage, body: bytes, parsed: ParsedPage | None = None, req: Request | None = None) -> Page:
    """What a spider's hooks see of ``page``: the tree ``parsed`` already built, if any, and the
    request it answers."""
    return Page(page.url, final_url=page.final_url, status=page.status, headers=page.headers, body=body,
                content_type=RENDERED_TYPE if page.rendered_key else page.content_type, error=page.error,
                depth=page.depth, referrer=page.referrer, parsed=parsed, request=req,
                protocol=page.http_version if page.status is not None else "", latency=page.elapsed,
                attempts=max(1, page.attempts), redirects=len(page.redirects))


def _errback(spec: str) -> bool:
    return bool(spec) and '"eb":' in spec


def _request_of(page: FetchedPage, counts: Counter[str]) -> Request:
    """The request ``page`` answers: its spec, or a plain GET of its URL."""
    if not page.request:
        return Request(strip_mark(page.url))
    try:
        return from_spec(page.request, page.url)
    except (ValueError, TypeError):
        counts["spider_error"] += 1
        counts["spider_error:request_spec"] += 1
        return Request(strip_mark(page.url))


def run_callback(spider: Spider, callback: str, page: Page, s: Settings,
                 parsed: ParsedPage | None) -> HookResult | None:
    """The request's callback on ``page`` with its ``cb_kwargs``; None when there is nothing to
    run (``parse`` left as the base class's no-op)."""
    if callback == "parse" and not overrides(spider, "parse"):
        return None
    return run_page_hook(spider, callback, page, s.max_items_per_page, s.max_item_bytes,
                         page.request.cb_kwargs or None)


def _outlinks(spider: Spider, page: FetchedPage, got: HookResult | None, extracted: list[str], s: Settings,
              drop: frozenset[str], counts: Counter[str]) -> tuple[list[str], dict[str, str]]:
    """The keys to follow from a page (the crawler's links, then the spider's requests), "" for
    each that is not a URL (counted ``bad_url`` by the caller), and the specs of those that are
    requests with more than a URL to them. A request with the key of a plain link replaces it."""
    links = [*extracted, *(got.links if got is not None else ())]
    out: list[str] = []
    for link in dict.fromkeys(links):
        try:
            out.append(canonicalize(link, s.max_url_length, drop))
        except BadURL:
            out.append("")
    specs: dict[str, str] = {}
    if got is not None:
        counts.update(got.counts)
        for position, req in enumerate(got.requests):
            try:
                canon = canonicalize(req.url, s.max_url_length, drop)
            except BadURL:
                out.append("")
                continue
            spec = request_spec(req, s.max_request_bytes, counts, spider, page.url)
            if spec is None:
                continue
            # A dont_filter key comes from this fetch of this page and the request's place among
            # those its callback yielded: a repeat parse of the fetch gives the same keys.
            key = request_key(req, canon, origin_of(page.url, page.cycle, position))
            if key not in specs:
                specs[key] = spec
                out.append(key)
    if specs:
        out = list(dict.fromkeys(out))
    return out, specs
