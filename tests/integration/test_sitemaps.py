"""Sitemaps are read one file at a time, and an origin gives at most ``sitemap_max_urls`` page
URLs: a robots.txt listing many large sitemaps is neither a burst of requests nor a flood of
URLs. Real Redis, real HTTP client, a loopback server."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable

import redis

from crawler.config.settings import Settings
from crawler.fetch.client import runtime
from crawler.fetch.robots import RobotsPolicy
from crawler.stages import fetch_config
from crawler.stages.politeness import Politeness
from crawler.state.jobconf import Job
from crawler.testweb import TestWeb
from tests.web import handlers as hw

NS = "http://www.sitemaps.org/schemas/sitemap/0.9"


def test_sitemaps_one_at_a_time_and_capped_per_origin(make_web: Callable[..., TestWeb], r: redis.Redis) -> None:
    web = make_web(1, 1)
    maps = [web.url(0, f"/s{i}.xml") for i in range(4)]
    index = web.url(0, "/index.xml")
    web.route(0, "/index.xml", hw.slow(0.1, hw.body(
        (f"<sitemapindex xmlns='{NS}'>" + "".join(f"<sitemap><loc>{m}</loc></sitemap>" for m in maps[2:])
         + "</sitemapindex>").encode(), ctype="application/xml")))
    for i in range(len(maps)):
        urls = "".join(f"<url><loc>{web.url(0, f'/p{i}-{n}.html')}</loc></url>" for n in range(30))
        web.route(0, f"/s{i}.xml", hw.slow(0.1, hw.body(f"<urlset xmlns='{NS}'>{urls}</urlset>".encode(),
                                                          ctype="application/xml")))
    robots = "User-agent: *\nAllow: /\n" + "".join(f"Sitemap: {m}\n" for m in [maps[0], index, maps[1]])
    job = Job("j1", Settings.from_env(sitemap_max_urls=100), frozenset())
    config = fetch_config(job)
    rt = runtime()
    policies = {web.origin(0): RobotsPolicy(200, robots, time.time() + 60)}

    found, dropped = Politeness(r).sitemap_urls(job, policies, rt.fetcher(config), config, rt.run)

    # s0 (30), s1 (30), then the index's s2 (30) and 10 of s3: 100 taken, 20 left out.
    assert len(found) == 100 and len(set(found)) == 100 and dropped == 20
    assert {s for _, s in found} == set(maps)
    spans = sorted((h.start, h.end) for h in web.hits() if h.path.endswith(".xml"))
    assert len(spans) == 5
    assert all(prev_end <= start for (_, prev_end), (start, _) in itertools.pairwise(spans)), spans
    # Read once per job: a second look at the same origin fetches nothing.
    assert Politeness(r).sitemap_urls(job, policies, rt.fetcher(config), config, rt.run) == ([], 0)
