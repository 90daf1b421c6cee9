from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import redis

from crawler import jobs
from crawler.dedup.neardup import NearDuplicates
from crawler.dedup.simhash import simhash
from crawler.settings import Settings
from crawler.testweb import TestWeb
from tests.conftest import Workers, wait_done
from tests.unit.test_simhash import ARTICLE
from tests.web import handlers as hw


def test_index_finds_the_earlier_page_within_the_distance(r: redis.Redis) -> None:
    nd = NearDuplicates(r)
    base = simhash(ARTICLE)
    assert nd.find_or_add("j", [("http://a/", base)], 3) == [None]
    assert nd.find_or_add("j", [("http://b/", base ^ 0b101), ("http://c/", base ^ (1 << 63) ^ 1)], 3) == \
        ["http://a/", "http://a/"]
    far = base ^ 0xFF
    assert nd.find_or_add("j", [("http://d/", far)], 3) == [None]
    assert nd.find_or_add("other-job", [("http://e/", base)], 3) == [None]  # per job
    assert nd.find_or_add("j", [("http://a/", base)], 3) == [None]  # a page is not its own duplicate


def _page(text: str, links: list[str] = ()) -> hw.Handler:
    return hw.body(hw.html("t", links, f"<p>{text}</p>"))


def test_pages_differing_in_a_date_or_an_ad_are_marked(make_web: Callable[..., TestWeb], workers: Workers,
                                                       r: redis.Redis, tmp_path: Path) -> None:
    web = make_web(1, 1)
    web.route(0, "/", hw.body(hw.html("index", ["/a"])))
    web.route(0, "/a", _page(ARTICLE + " Monday 24 November 2026", ["/b", "/c", "/d"]))
    web.route(0, "/b", _page(ARTICLE + " Tuesday 25 November 2026", ["/only-b"]))
    web.route(0, "/c", _page(ARTICLE + " Monday 24 November 2026 Buy shoes now best deals click here"))
    web.route(0, "/d", _page(" ".join(f"other{i}" for i in range(600))))
    web.route(0, "/only-b", _page("unique"))
    workers.start("w", "shard-0,shard-1,shard-2,shard-3")
    for follow in (True, False):
        db = tmp_path / f"{follow}.db"
        job_id = jobs.submit(r, Settings.from_env(store=f"sqlite:///{db}", follow_near_duplicates=follow),
                             web.seeds())
        st = wait_done(r, job_id)
        rows = {u: d for u, d in sqlite3.connect(db).execute("SELECT url, near_duplicate_of FROM pages")}
        a = web.url(0, "/a")
        assert rows[web.url(0, "/b")] == a and rows[web.url(0, "/c")] == a
        assert rows[a] is None and rows[web.url(0, "/d")] is None
        assert (web.url(0, "/only-b") in rows) is follow
        assert st["counters"]["near_duplicates"] == 2
