"""What the fetch stage asks before and after it fetches: robots.txt, scope of redirect hops,
validators for conditional revisits, Crawl-delay, the adaptive per-host delay, and sitemaps.
One instance per worker process (it keeps parsed robots.txt files); the state every worker
shares lives in Redis.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Iterable, Sequence
from typing import Any

from redis import Redis

from crawler import errors
from crawler.config.settings import Settings
from crawler.errors import Reason
from crawler.fetch.client import FetchConfig, Fetcher, FetchResult, HopCheck
from crawler.fetch.robots import (
    ROBOTS_MAX_BYTES,
    SITEMAP_MAX_BYTES,
    RobotsCache,
    RobotsPolicy,
    origin_of,
    parse_sitemap,
    policy_from_fetch,
    robots_scope,
)
from crawler.frontier import Frontier
from crawler.stages.ratecontrol import next_delay, parse_retry_after
from crawler.state.jobconf import Job
from crawler.urls import domain_of, host_key

SITEMAPS_PER_HOST = 10


class Politeness:
    def __init__(self, redis: Redis, settings: Settings | None = None) -> None:
        self.redis = redis
        self._frontier = Frontier(redis)
        s = settings or Settings.from_env()
        self.robots = RobotsCache(redis, s.robots_cache_size, s.robots_cache_bytes)

    # -- robots.txt --------------------------------------------------------------------------
    async def _fetch_robots(self, origins: Iterable[str], fetcher: Fetcher, config: FetchConfig,
                            job: Job) -> dict[str, RobotsPolicy]:
        origins = list(origins)
        cfg = dataclasses.replace(config, max_redirects=5, html_only=False, max_body=ROBOTS_MAX_BYTES)
        results = await fetcher.fetch_many([o + "/robots.txt" for o in origins], cfg)
        s = job.settings
        return {o: policy_from_fetch(r.status, r.body, r.error, ttl=s.robots_ttl, retry_ttl=s.robots_retry,
                                     unreachable_ttl=s.retry_base, redirected=bool(r.redirects))
                for o, r in zip(origins, results, strict=True)}

    def policies(self, urls: Sequence[str], job: Job, fetcher: Fetcher, config: FetchConfig,
                 run: Any) -> tuple[dict[str, RobotsPolicy], dict[str, RobotsPolicy]]:
        """(policy per origin of these URLs, the ones fetched just now)."""
        origins = {origin_of(u) for u in urls}
        scope = robots_scope(config.allow_networks, config.resolve)
        found = self.robots.lookup(origins, scope)
        missing = origins - found.keys()
        fresh: dict[str, RobotsPolicy] = {}
        if missing:
            fresh = run(self._fetch_robots(sorted(missing), fetcher, config, job))
            self.robots.save(fresh, scope)
            found.update(fresh)
        return found, fresh

    def robots_blocks(self, urls: Sequence[str], job: Job, fetcher: Fetcher, config: FetchConfig,
                      run: Any) -> tuple[dict[str, RobotsPolicy], dict[str, RobotsPolicy], dict[str, str]]:
        """(policy per origin, the ones fetched just now, reason per URL robots.txt blocks);
        all empty for a job that does not obey robots.txt."""
        s = job.settings
        if not s.obey_robots:
            return {}, {}, {}
        policies, fresh = self.policies(urls, job, fetcher, config, run)
        blocked: dict[str, str] = {}
        for url in urls:
            reason = policies[origin_of(url)].block_reason(url, s.robots_user_agent)
            if reason:
                blocked[url] = reason
        return policies, fresh, blocked

    def hop_check(self, job: Job, fetcher: Fetcher, config: FetchConfig, fresh: dict[str, RobotsPolicy]) -> HopCheck:
        """Vets a redirect target: in scope, and allowed by its own origin's robots.txt."""
        robots = self.robots_check(job, fetcher, config, fresh)

        async def check(url: str) -> str | None:
            if job.allowed and domain_of(url) not in job.allowed:
                return errors.OutOfScope.reason
            return await robots(url)

        return check

    def robots_check(self, job: Job, fetcher: Fetcher, config: FetchConfig,
                     fresh: dict[str, RobotsPolicy] | None = None) -> HopCheck:
        """Vets a URL against its origin's robots.txt (fetched once if this process has not
        got it): the reason it is blocked, or None. For a rendered page's own requests, whose
        hosts need not be the job's."""
        s = job.settings
        scope = robots_scope(config.allow_networks, config.resolve)
        got: dict[str, RobotsPolicy] = {} if fresh is None else fresh

        async def fetch(origin: str) -> RobotsPolicy:
            policy = (await self._fetch_robots([origin], fetcher, config, job))[origin]
            self.robots.save({origin: policy}, scope)
            return policy

        async def check(url: str) -> str | None:
            if not s.obey_robots:
                return None
            origin = origin_of(url)
            # The shared cache first, as the fetch stage has it (a render worker's own copy
            # starts empty); then one fetch per origin, however many requests wait on it.
            policy = got.get(origin) or self.robots.lookup([origin], scope).get(origin)
            if policy is None:
                policy = await self.robots.once(scope, origin, fetch)
                got[origin] = policy
            return policy.block_reason(url, s.robots_user_agent)

        return check

    # -- revisits ---------------------------------------------------------------------------
    @staticmethod
    def validators(previous: dict[str, dict[str, Any]]) -> dict[str, list[tuple[str, str]]]:
        """Conditional request headers per URL from what its last visit stored."""
        return {u: conditional_headers(row) for u, row in previous.items()}

    # -- delays ------------------------------------------------------------------------------
    def delay_updates(self, job: Job, results: Sequence[FetchResult],
                      policies: dict[str, RobotsPolicy]) -> dict[str, float]:
        """New delay per host from its Crawl-delay and (when adaptive) its responses."""
        s = job.settings
        hosts: dict[str, list[FetchResult]] = {}
        for r in results:
            hosts.setdefault(host_key(r.url), []).append(r)
        names = list(hosts)
        # An operator's delay for a host replaces the job's as that host's floor.
        if s.autothrottle:
            overrides, current = self._frontier.host_politeness(job.id, names)
        else:
            overrides, current = self._frontier.host_overrides(job.id, names), []
        floors = {host: delay_floor(s, override.delay if override is not None else None,
                                    policies.get(origin_of(hosts[host][0].url)))
                  for host, override in zip(names, overrides, strict=True)}
        if not s.autothrottle:
            owned = {h for h, o in zip(names, overrides, strict=True) if o is not None and o.delay is not None}
            return {h: f for h, f in floors.items() if f > s.delay or h in owned}
        out: dict[str, float] = {}
        for host, own in zip(names, current, strict=True):
            d = own if own is not None else floors[host]
            for r in hosts[host]:
                if not r.sent or (r.status is None and r.error in (
                        Reason.ROBOTS, Reason.ROBOTS_UNAVAILABLE, Reason.OUT_OF_SCOPE, Reason.BLOCKED_NETWORK,
                        Reason.BAD_URL)):
                    continue  # no request was made to this host
                retry_after = parse_retry_after(r.header("retry-after")) if r.status in (429, 503) else None
                d = next_delay(d, floor=floors[host], latency=r.elapsed, status=r.status,
                               retry_after=retry_after, max_delay=s.max_delay)
            out[host] = round(d, 4)
        return out

    # -- sitemaps ----------------------------------------------------------------------------
    def sitemap_urls(self, job: Job, policies: dict[str, RobotsPolicy], fetcher: Fetcher, config: FetchConfig,
                     run: Any) -> tuple[list[tuple[str, str]], int]:
        """((page URL, sitemap URL) from the sitemaps robots.txt lists, URLs past the cap left
        out). Each origin's sitemaps are read once per job, one file at a time (a site listing
        many sitemaps costs one connection, not a burst), and at most ``sitemap_max_urls``
        page URLs are taken from one origin."""
        todo: dict[str, list[str]] = {}
        for origin, policy in policies.items():
            maps = policy.sitemaps()[:SITEMAPS_PER_HOST]
            if maps and self._frontier.claim_sitemaps(job.id, origin):
                todo[origin] = maps
        if not todo:
            return [], 0
        cap = job.settings.sitemap_max_urls
        cfg = dataclasses.replace(config, html_only=False, max_body=SITEMAP_MAX_BYTES)
        check = self.hop_check(job, fetcher, config, {})
        found: list[tuple[str, str]] = []
        dropped = 0

        async def read_origin(maps: list[str]) -> None:
            nonlocal dropped
            taken = 0
            level = maps
            for _depth in range(2):  # a sitemap index and the sitemaps it lists
                children: list[str] = []
                for url in level:
                    if taken >= cap:
                        return
                    if await check(url) is not None:
                        continue
                    [r] = await fetcher.fetch_many([url], cfg)
                    if r.status != 200 or not r.body:
                        continue
                    pages, subs = parse_sitemap(r.body)
                    keep = pages[:cap - taken]
                    dropped += len(pages) - len(keep)
                    taken += len(keep)
                    found.extend((p, url) for p in keep)
                    children += subs[:SITEMAPS_PER_HOST]
                level = children
                if not level:
                    return

        async def gather() -> None:
            for maps in todo.values():
                await read_origin(maps)

        try:
            run(asyncio.wait_for(gather(), timeout=config.deadline * 2))
        except TimeoutError:
            pass  # what was read in time is kept; these origins are not read again for the job
        return found, dropped


def conditional_headers(row: dict[str, Any]) -> list[tuple[str, str]]:
    if row.get("status") != 200 or row.get("gone_cycle"):
        return []
    out = []
    if row.get("etag"):
        out.append(("If-None-Match", row["etag"]))
    if row.get("last_modified"):
        out.append(("If-Modified-Since", row["last_modified"]))
    return out


def delay_floor(s: Settings, override: float | None, policy: RobotsPolicy | None) -> float:
    """The least delay a host may have: an operator's for it (``override``), else the job's, and
    never less than its robots.txt's Crawl-delay (up to ``max_delay``)."""
    crawl_delay = policy.crawl_delay(s.robots_user_agent) if policy is not None and s.obey_robots else None
    return max(s.delay if override is None else override, min(crawl_delay or 0.0, s.max_delay))


def blocked_result(url: str, reason: str) -> FetchResult:
    """The result of a request robots.txt (or our own rules) kept from being sent."""
    return FetchResult(url=url, final_url=url, error=reason, fetched_at=time.time(), sent=False)
