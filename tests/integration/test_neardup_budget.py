"""The near-duplicate index's budget: it answers as a scan of the pages it keeps would, holds at
most its budget of pages however long the crawl, and what the budget costs in detection."""

from __future__ import annotations

import json
import random
import sqlite3
from collections.abc import Callable
from pathlib import Path

import redis

from crawler import jobs
from crawler.config.settings import Settings
from crawler.dedup.neardup import NearDuplicates
from crawler.state import keys
from crawler.testweb import TestWeb
from tests.conftest import Workers, wait_done
from tests.web import handlers as hw


def _variant(rnd: random.Random, h: int, bits: int) -> int:
    for bit in rnd.sample(range(64), bits):
        h ^= 1 << bit
    return h


def _reference(pages: list[tuple[str, int]], distance: int, budget: int) -> list[str | None]:
    """What a bounded index must answer: the earliest page within ``distance`` bits among those
    numbered in the current generation (of budget // 3 numbers) and the one before."""
    gen = max(1, budget // 3)
    indexed: list[tuple[int, str, int]] = []  # (number, url, hash)
    out: list[str | None] = []
    for url, h in pages:
        g = len(indexed) // gen  # the generation of the next number
        window = [(u, x) for n, u, x in indexed if (n - 1) // gen >= g - 1]
        found = next((u for u, x in window if u != url and (h ^ x).bit_count() <= distance), None)
        out.append(found)
        if found is None:
            indexed.append((len(indexed) + 1, url, h))
    return out


def _held(r: redis.Redis, job: str) -> tuple[int, int]:
    """(records, largest number of entries in one band) the index of ``job`` holds."""
    records = entries = 0
    per_band: dict[str, int] = {}
    for key in r.scan_iter(keys.simhash_band_pattern(job), count=1000):
        name = key.decode()
        if name.startswith(keys.simhash_pages(job, "")):
            records += sum(1 for rec in r.lrange(key, 0, -1) if rec)
        elif ":" + keys.SIMHASH_BAND + "g" in name:  # under the band's own tag
            band = name.split(":")[-2]  # ...:sh:g<gen>:<band>:<k>
            assert name.startswith(keys.neardup_band_prefix(job, band)), name
            n = sum(len(v) // 12 for v in r.hvals(key))
            per_band[band] = per_band.get(band, 0) + n
            entries += n
    assert per_band or not records, "no band entries found: the index's key names moved"
    return records, max(per_band.values(), default=0)


def test_a_bounded_index_answers_as_a_scan_of_the_pages_it_keeps(r: redis.Redis) -> None:
    rnd = random.Random(11)
    pages: list[tuple[str, int]] = []
    for i in range(2000):
        if i < 100 or rnd.random() < 0.5:
            h = rnd.getrandbits(64)
        else:  # a variant of a page some time ago, within the distance or just past it
            h = _variant(rnd, rnd.choice(pages[-rnd.choice((50, 300, 1500)):])[1], rnd.randint(0, 5))
        pages.append((f"http://127.0.2.{i % 50}/docs/page-{i}.html", h))
    nd = NearDuplicates(r)
    got: list[str | None] = []
    for k in range(0, len(pages), 64):
        got += nd.find_or_add("j", pages[k:k + 64], 3, budget=300)
    assert got == _reference(pages, 3, 300)
    assert 300 < sum(g is not None for g in got) < 1000


def test_the_index_holds_at_most_its_budget_on_ten_times_as_many_pages(r: redis.Redis) -> None:
    rnd = random.Random(3)
    nd = NearDuplicates(r)
    budget = 500
    for k in range(0, 10 * budget, 100):
        nd.find_or_add("j", [(f"http://h{i % 7}/p{i}", rnd.getrandbits(64)) for i in range(k, k + 100)], 3,
                       budget=budget)
        records, band_entries = _held(r, "j")
        assert records <= budget and band_entries <= budget, (k, records, band_entries)
    assert int(r.get(keys.simhash_seq("j")) or 0) == 10 * budget  # every page was indexed once
    assert records >= budget // 2  # and it is still an index
    assert nd.reset("j") > 0 and not list(r.scan_iter(keys.job_pattern("j")))


def test_numbers_skipped_by_a_call_that_died_still_forget_their_share(r: redis.Redis) -> None:
    rnd = random.Random(4)
    nd = NearDuplicates(r)
    for k in range(0, 2000, 50):
        if k % 400 == 0:
            r.incrby(keys.simhash_seq("j"), 37)  # numbers taken, never recorded
        nd.find_or_add("j", [(f"http://h/p{i}", rnd.getrandbits(64)) for i in range(k, k + 50)], 3, budget=200)
        records, band_entries = _held(r, "j")
        assert records <= 200 and band_entries <= 200


def test_the_budget_is_the_jobs_and_a_job_from_before_budgets_keeps_its_unbounded_index(r: redis.Redis) -> None:
    values = Settings.from_env(near_duplicate_budget=600).job_settings()
    r.hset(keys.meta("new-job"), "settings", json.dumps(values))
    del values["near_duplicate_budget"]
    r.hset(keys.meta("old-job"), "settings", json.dumps(values))
    nd = NearDuplicates(r)
    assert nd.budget("new-job") == 600 and nd.budget("old-job") == 0
    assert nd.budget("no-such-job") == Settings().near_duplicate_budget
    nd.find_or_add("old-job", [("http://a/", 1 << 40)], 3)
    assert r.exists(keys.simhash_band("old-job", 0, 0)) and not r.exists(keys.neardup_prefix("old-job") + "sh:f")


def detection(r: redis.Redis, budget: int, lags: list[int], seed: int = 1) -> float:
    """Share of near-duplicates found when each comes ``lag`` original pages after its original
    (lags taken in turn), with ``budget`` (0: unbounded)."""
    rnd = random.Random(seed)
    nd = NearDuplicates(r)
    due: dict[int, list[tuple[str, int]]] = {}
    found = total = 0
    for i in range(max(lags) * 3):
        page = (f"http://h{i % 13}/p{i}", rnd.getrandbits(64))
        batch = [page, *due.pop(i, [])]
        answers = nd.find_or_add("d", batch, 3, budget=budget)
        total += len(batch) - 1
        found += sum(a is not None for a in answers[1:])
        due.setdefault(i + lags[i % len(lags)], []).append((page[0] + "?v", _variant(rnd, page[1], 2)))
    nd.reset("d")
    return found / total


def test_detection_with_a_budget_is_complete_within_its_window(r: redis.Redis) -> None:
    lags = [10, 60, 150, 400]
    # Unbounded, or a budget above every lag: every near-duplicate found.
    assert detection(r, 0, lags) == 1.0
    assert detection(r, 1500, lags) == 1.0
    # Budget 300: a page is compared with the last 100 to 200 pages, so lags 10 and 60 always,
    # 150 about half the time, 400 never.
    rate = detection(r, 300, lags)
    assert 0.55 < rate < 0.7, rate


def _page(text: str, links: list[str]) -> hw.Handler:
    return hw.body(hw.html("t", links, f"<p>{text}</p>"))


def test_a_crawl_ten_times_the_budget_keeps_the_index_within_it(
        make_web: Callable[..., TestWeb], workers: Workers, r: redis.Redis, tmp_path: Path) -> None:
    rnd = random.Random(8)
    web = make_web(1, 1)
    n, budget = 300, 30
    words = [f"w{i}" for i in range(5000)]
    web.route(0, "/", _page(" ".join(rnd.choices(words, k=300)), [f"/p{i}" for i in range(1, n)]))
    for i in range(1, n):
        web.route(0, f"/p{i}", _page(" ".join(rnd.choices(words, k=300)), []))
    workers.start("w", "shard-0,shard-1,shard-2,shard-3")
    db = tmp_path / "c.db"
    job_id = jobs.submit(r, Settings.from_env(store=f"sqlite:///{db}", near_duplicate_budget=budget),
                         web.seeds())
    st = wait_done(r, job_id)
    assert st["counters"]["stored"] == n
    assert sqlite3.connect(db).execute("SELECT count(*) FROM pages").fetchone()[0] == n
    records, band_entries = _held(r, job_id)
    assert 0 < records <= budget and band_entries <= budget
    assert int(r.get(keys.simhash_seq(job_id)) or 0) == n  # every page went through the index
