from __future__ import annotations

import random
import sqlite3
from collections.abc import Callable
from pathlib import Path

import redis

from crawler import jobs
from crawler.config.settings import Settings
from crawler.dedup.neardup import NearDuplicates
from crawler.dedup.simhash import simhash
from crawler.state import keys
from crawler.testweb import TestWeb
from tests.conftest import Workers, wait_done
from tests.unit.dedup.test_simhash import ARTICLE
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


def _reference(pages: list[tuple[str, int]], distance: int) -> list[str | None]:
    """What the index must answer: the earliest indexed page within ``distance`` bits (a page
    is never its own duplicate), else None and the page is indexed."""
    indexed: list[tuple[str, int]] = []
    out: list[str | None] = []
    for url, h in pages:
        found = next((u for u, g in indexed if u != url and (h ^ g).bit_count() <= distance), None)
        out.append(found)
        if found is None:
            indexed.append((url, h))
    return out


def test_index_answers_as_a_scan_of_every_earlier_page_would(r: redis.Redis) -> None:
    rnd = random.Random(5)
    pages: list[tuple[str, int]] = []
    for i in range(3000):
        if i < 300 or rnd.random() < 0.3:
            h = rnd.getrandbits(64)
        else:  # a variant of an earlier page, some within the distance and some just past it
            h = rnd.choice(pages)[1]
            for bit in rnd.sample(range(64), rnd.randint(0, 6)):
                h ^= 1 << bit
        url = f"http://127.0.2.{i % 50}/docs/page-{i}.html" if rnd.random() > 0.02 else pages[-1][0]
        pages.append((url, h))
    nd = NearDuplicates(r)
    got: list[str | None] = []
    for k in range(0, len(pages), 128):
        got += nd.find_or_add("j", pages[k:k + 128], 3)
    want = _reference(pages, 3)
    assert got == want
    assert 500 < sum(g is None for g in got) < 2500  # both answers well exercised
    assert nd.reset("j") > 0 and not list(r.scan_iter(keys.job_pattern("j")))


def test_index_memory_is_about_a_url_per_page(r: redis.Redis) -> None:
    # A key per band value with each page's URL in every band took 1.2 KB a page here.
    rnd = random.Random(9)
    nd = NearDuplicates(r)
    before = int(r.info("memory")["used_memory"])
    n = 10_000
    for k in range(0, n, 500):
        nd.find_or_add("j", [(f"http://127.0.2.{i % 200}:8080/docs/section-{i % 97}/page-{i}.html",
                              rnd.getrandbits(64)) for i in range(k, k + 500)], 3)
    per_page = (int(r.info("memory")["used_memory"]) - before) / n
    assert per_page < 200, per_page


def test_records_stay_in_place_after_a_call_that_died_midway(r: redis.Redis) -> None:
    # A call that numbered pages and died before writing their records leaves gaps: later pages'
    # records still sit at their own numbers.
    nd = NearDuplicates(r)
    assert nd.find_or_add("j", [("http://a/", 1 << 40)], 3) == [None]
    r.incrby(keys.simhash_seq("j"), 300)  # numbers 2-301 taken, never recorded
    far = (1 << 64) - 1
    assert nd.find_or_add("j", [("http://b/", far), ("http://c/", 1 << 40 | 1)], 3) == [None, "http://a/"]
    assert nd.find_or_add("j", [("http://d/", far ^ 0b11)], 3) == ["http://b/"]


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
