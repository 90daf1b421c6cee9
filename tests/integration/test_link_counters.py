"""The parse stage counts each kind of href it does not follow under its own name, and a
Context built from parts (as tests inject them) runs the stages."""

from __future__ import annotations

from pathlib import Path

import redis

from crawler import jobs
from crawler.config.settings import Settings
from crawler.dedup import SeenCache
from crawler.dedup.neardup import NearDuplicates
from crawler.frontier import Frontier
from crawler.stages import Context, dedup_stage, parse_stage
from crawler.stages.messages import FetchedPage, LinkGroup
from crawler.stages.politeness import Politeness

A = "http://a.example/"


def test_a_fragment_a_mailto_and_a_broken_url_count_one_each_under_their_names(r: redis.Redis,
                                                                                tmp_path: Path) -> None:
    settings = Settings.from_env(store=f"sqlite:///{tmp_path}/c.db", obey_robots=False)
    job_id = jobs.submit(r, settings, [A])
    ctx = Context(r, frontier=Frontier(r), politeness=Politeness(r, settings), cache=SeenCache(10),
                  near_dups=NearDuplicates(r))
    r.set("body", b'<a href="#x">x</a><a href="mailto:a@b.c">m</a><a href="http://[::1">b</a><a href="/ok">ok</a>')
    page = FetchedPage(url=A, final_url=A, status=200, content_type="text/html", body_key="body")
    [parsed], _ = parse_stage(ctx, jobs.load(r, job_id), "t", [page])
    assert parsed.outlinks == (A + "ok",)
    c = jobs.status(r, job_id)["counters"]
    assert (c["links_fragment_only"], c["links_not_http"], c["bad_url"]) == (1, 1, 1)
    ctx.close()


def test_nofollow_and_pattern_denied_links_are_counted_under_their_names(r: redis.Redis, tmp_path: Path) -> None:
    settings = Settings.from_env(store=f"sqlite:///{tmp_path}/c.db", obey_robots=False, deny_urls=[r"\.pdf$"])
    job_id = jobs.submit(r, settings, [A])
    ctx = Context(r, frontier=Frontier(r), politeness=Politeness(r, settings), cache=SeenCache(10),
                  near_dups=NearDuplicates(r))
    r.set("body", b'<a rel="nofollow" href="/ad">ad</a><a href="/a.pdf">pdf</a><a href="/ok">ok</a>')
    page = FetchedPage(url=A, final_url=A, status=200, content_type="text/html", body_key="body")
    [parsed], batches = parse_stage(ctx, jobs.load(r, job_id), "t", [page])
    assert parsed.outlinks == (A + "a.pdf", A + "ok")  # stored as found; the pattern decides following
    assert [u for groups in batches.values() for g in groups for u in g.urls] == [A + "ok"]
    c = jobs.status(r, job_id)["counters"]
    assert (c["links_nofollow"], c["links_denied_pattern"]) == (1, 1)
    ctx.close()


def test_a_link_batch_delivered_twice_is_counted_once(r: redis.Redis, tmp_path: Path) -> None:
    settings = Settings.from_env(store=f"sqlite:///{tmp_path}/c.db", obey_robots=False)
    job_id = jobs.submit(r, settings, [A])
    ctx = Context(r, frontier=Frontier(r), politeness=Politeness(r, settings), cache=SeenCache(10),
                  near_dups=NearDuplicates(r))
    job = jobs.load(r, job_id)
    links = [LinkGroup.single(A + "x", 1, A), LinkGroup.single(A + "x", 1, A), LinkGroup.single("http://[::1", 1, A),
             LinkGroup.single(A, 1, A)]
    ctx.frontier.expect(job_id, ["b1"])
    assert dedup_stage(ctx, job, "b1", links) == [A + "x"]
    counted = jobs.status(r, job_id)["counters"]
    assert (counted["bad_url"], counted["cache_lookups"], counted["duplicates"]) == (1, 2, 1)
    assert dedup_stage(ctx, job, "b1", links) == []  # delivered again: admitted before
    assert jobs.status(r, job_id)["counters"] == counted
    ctx.close()
