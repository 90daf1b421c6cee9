"""Item pipelines where items are stored: in order, drops and failures counted, opened and closed
per worker process, and each item seen once by a pipeline writing to a database of its own, even
when the store task is delivered again (a worker killed mid-batch, a store outage, a duplicate)."""

from __future__ import annotations

import sqlite3
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import redis

from crawler import jobs
from crawler.config.settings import Settings
from crawler.spiders.pipelines import PipelineUnavailable
from crawler.stages import Context, store_stage
from crawler.stages.messages import FetchedPage
from crawler.stages.pipelines import OPEN
from crawler.store import PageRecord, PageStore, StoreUnavailable, open_store
from crawler.testweb import TestWeb
from tests.conftest import SPIDER_DIRS, Workers, wait_done

SPIDER = "tests/spiders/pipeline_spiders.py:PipeSpider"


def _seen(db: Path) -> list[tuple[str, int, str]]:
    conn = sqlite3.connect(db)
    try:
        return sorted(conn.execute("SELECT page, i, item FROM seen").fetchall())
    finally:
        conn.close()


def _events(db: Path) -> Counter[str]:
    conn = sqlite3.connect(db)
    try:
        return Counter(what for (what,) in conn.execute("SELECT what FROM events"))
    finally:
        conn.close()


def _stored_items(store_url: str, job_id: str) -> list[dict[str, Any]]:
    store = open_store(store_url)
    try:
        return [r["item"] for r in store.items(job_id)]
    finally:
        store.close()


def _parsed(store_url: str, job_id: str) -> set[str]:
    store = open_store(store_url)
    try:
        return {p["url"] for p in store.pages(job_id) if p["status"] == 200}
    finally:
        store.close()


def _expected(urls: set[str]) -> list[tuple[str, int, str]]:
    # Number drops i == 2 everywhere and fails on i == 3 of the site roots; RecordToDb sees the
    # items Number returns (numbered, not yet stamped: Stamp comes after it).
    return sorted((u, i, repr(sorted(["page", "i", "numbered"]))) for u in urls for i in (0, 1, 3)
                  if not (i == 3 and u.endswith("/")))


def test_each_item_reaches_the_pipelines_once_though_a_worker_dies_mid_batch(
        make_web: Callable[..., TestWeb], workers: Workers, r: redis.Redis, tmp_path: Path) -> None:
    web = make_web(2, 8)
    db, marker = tmp_path / "mine.db", tmp_path / "killed"
    store_url = f"sqlite:///{tmp_path}/c.db"
    workers.start("w", "shard-0,shard-1,shard-2,shard-3", pool="prefork")
    settings = Settings.from_env(store=store_url, spider=SPIDER, spider_args=[f"db={db}", f"kill_at={marker}"],
                                 item_pipelines=["pipeline_spiders:Stamp"])
    job_id = jobs.submit(r, settings, web.seeds())
    st = wait_done(r, job_id, timeout=120)
    assert marker.exists()  # a worker process did die in the middle of a store task
    assert st["counters"]["stored"] == len(web.reachable_urls())
    urls = _parsed(store_url, job_id)
    assert len(urls) > 10
    assert _seen(db) == _expected(urls)  # every item once, none twice, none lost
    c = st["counters"]
    assert c["items_dropped:third_of_the_page"] == len(urls)
    assert c["spider_error:process_item"] == len(web.seeds())
    assert c["items_dropped"] == len(urls)
    # What is stored is what came out of the last pipeline, in order: numbered, then stamped.
    stored = _stored_items(store_url, job_id)
    assert len(stored) == len(_expected(urls))
    assert all(item["numbered"] and item["stamped"] for item in stored)
    workers.stop("w")  # a warm shutdown closes what the surviving processes still hold open
    events = _events(db)
    assert events["open"] >= 2  # the killed process opened them, and its successor
    assert events["close"] == events["open"] - 1  # all but the killed one closed


class _Flaky:
    """A store whose first ``put`` fails after the pipelines ran (the server went away)."""

    def __init__(self, inner: PageStore) -> None:
        self.inner, self.failures = inner, 1

    def put(self, records: Sequence[PageRecord], before_commit: Any = None) -> list[PageRecord]:
        if self.failures:
            self.failures -= 1
            raise StoreUnavailable("connection lost")
        return self.inner.put(records, before_commit)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_a_redelivered_store_task_sends_no_item_twice(r: redis.Redis, tmp_path: Path) -> None:
    db = tmp_path / "mine.db"
    store_url = f"sqlite:///{tmp_path}/c.db"
    job_id = jobs.submit(r, Settings.from_env(store=store_url, spider=SPIDER, spider_args=[f"db={db}"]),
                         ["http://127.0.0.1:9/"])
    job = jobs.load(r, job_id)
    flaky: list[_Flaky] = []

    def opener(url: str) -> PageStore:
        flaky.append(_Flaky(open_store(url)))
        return flaky[-1]  # type: ignore[return-value]

    ctx = Context.default(r)
    ctx.opener = opener
    ctx.spider_paths = tuple(map(str, SPIDER_DIRS))
    pages = [FetchedPage(f"http://127.0.0.1:9/p{n}", status=200, fetched_at=time.time(),
                         items=tuple({"page": f"http://127.0.0.1:9/p{n}", "i": i} for i in range(4)),
                         items_parsed=True) for n in range(3)]
    with pytest.raises(StoreUnavailable):
        store_stage(ctx, job, "tok", pages)  # the pipelines ran, the rows did not commit
    assert len(_seen(db)) == 9
    assert store_stage(ctx, job, "tok", pages) == 3  # the retry: outcomes reused, rows written
    assert store_stage(ctx, job, "tok", pages) == 0  # a duplicate after the commit
    assert len(_seen(db)) == 9  # RecordToDb saw each item once
    assert sorted((i["page"], i["i"]) for i in _stored_items(store_url, job_id)) == sorted(
        (p.url, i) for p in pages for i in (0, 1, 3))
    assert not r.exists(f"c:{{{job_id}}}:pipe")  # the kept outcomes went with the commit
    st = jobs.status(r, job_id)["counters"]
    assert st["items_dropped"] == 3 and "spider_error" not in st  # counted once, not per delivery
    # A later visit (another fetch) goes through them again, and replaces the page's items.
    assert store_stage(ctx, job, "tok2", pages[:1]) == 1
    assert len(_seen(db)) == 12
    OPEN.close(job_id)
    assert _events(db) == Counter(open=1, close=1)


def test_a_pipeline_outside_the_spider_paths_is_refused_at_submit(r: redis.Redis, tmp_path: Path) -> None:
    outside = tmp_path / "p.py"
    outside.write_text("raise SystemExit('never imported')\nclass P:\n    def process_item(self, i, s): return i\n")
    for ref in (f"{outside}:P", "os:path", "nocolon"):
        with pytest.raises(PipelineUnavailable):
            jobs.submit(r, Settings.from_env(store=f"sqlite:///{tmp_path}/c.db", item_pipelines=[ref]),
                        ["http://127.0.0.1:9/"])
    assert not jobs.known(r)  # nothing was created


def test_a_worker_that_cannot_load_a_pipeline_stops_the_job(make_web: Callable[..., TestWeb], workers: Workers,
                                                            r: redis.Redis, tmp_path: Path) -> None:
    web = make_web(1, 3)
    workers.start("w", "shard-0,shard-1,shard-2,shard-3")
    job_id = jobs.submit(r, Settings.from_env(store=f"sqlite:///{tmp_path}/c.db",
                                              item_pipelines=["pipeline_spiders:Iterator"]), web.seeds())
    st = wait_done(r, job_id)  # the name is bound (the submitter saw it), but not to a pipeline class
    assert st["status"] == jobs.STOPPED
    assert "Iterator" in st["error"] and st["counters"]["spider_unavailable"] >= 1


def test_a_pipeline_that_names_no_class_is_refused_at_submit(r: redis.Redis, tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path}/c.db"
    with pytest.raises(PipelineUnavailable, match="has no 'NoSuchClass'"):
        jobs.submit(r, Settings.from_env(store=store, item_pipelines=["pipeline_spiders:NoSuchClass"]),
                    ["http://127.0.0.1:9/"])
    # The strings a spider's own source lists are checked alike: ours, and a Scrapy spider's.
    ours = tmp_path / "ours.py"
    ours.write_text("from crawler.spiders import Spider\n"
                    "class S(Spider):\n    version = '1'\n    pipelines = ['pipeline_spiders:Gone']\n")
    theirs = tmp_path / "theirs.py"
    theirs.write_text("import scrapy\nclass S(scrapy.Spider):\n    name = 's'\n"
                      "    custom_settings = {'ITEM_PIPELINES': {'pipeline_spiders.Stamp': 1,\n"
                      "                                          'pipeline_spiders.Gone': 2}}\n")
    for spider in (ours, theirs):
        settings = Settings.from_env(store=store, spider=f"{spider}:S",
                                     spider_paths=[*Settings.from_env().spider_paths, str(tmp_path)])
        with pytest.raises(PipelineUnavailable, match="has no 'Gone'"):
            jobs.submit(r, settings, ["http://127.0.0.1:9/"])
    assert not jobs.known(r)
    jobs.submit(r, Settings.from_env(store=store, item_pipelines=["pipeline_spiders:Stamp"]),
                ["http://127.0.0.1:9/"])  # one that is there passes


def test_a_pipeline_slower_than_the_lease_sees_each_item_once(
        make_web: Callable[..., TestWeb], workers: Workers, r: redis.Redis, tmp_path: Path) -> None:
    web = make_web(1, 2)
    calls = tmp_path / "calls"
    store_url = f"sqlite:///{tmp_path}/c.db"
    workers.start("w", "shard-0,shard-1,shard-2,shard-3", env={"CRAWLER_LEASE_TIMEOUT": "3"})
    # 3 items at 2 s each: the page's store task runs twice as long as its lease.
    settings = Settings.from_env(store=store_url, spider="tests/spiders/pipeline_spiders.py:SlowPipeSpider",
                                 spider_args=[f"calls={calls}", "sleep=2"], lease_timeout=3)
    job_id = jobs.submit(r, settings, web.seeds()[:1])
    st = wait_done(r, job_id, timeout=90)
    assert st["status"] == jobs.DONE
    seed = web.seeds()[0]
    assert sorted(calls.read_text().splitlines()) == [f"{seed} {i}" for i in range(3)]  # each item once
    assert st["counters"]["fetched"] == 1  # the page was not handed out again meanwhile
    assert sorted(i["i"] for i in _stored_items(store_url, job_id)) == [0, 1, 2]


def test_scrapy_pipelines_built_with_from_crawler_run_and_one_that_cannot_be_built_stops_its_job(
        make_web: Callable[..., TestWeb], workers: Workers, r: redis.Redis, tmp_path: Path) -> None:
    pytest.importorskip("scrapy")
    web = make_web(1, 4)
    workers.start("w", "shard-0,shard-1,shard-2,shard-3")
    stores = {cls: f"sqlite:///{tmp_path}/{cls}.db" for cls in ("Stamped", "Unbuildable")}
    spider = "tests/spiders/scrapy_pipeline_spiders.py"
    submitted = {cls: jobs.submit(r, Settings.from_env(store=store, spider=f"{spider}:{cls}"), web.seeds())
                 for cls, store in stores.items()}
    st = wait_done(r, submitted["Stamped"])
    assert st["status"] == jobs.DONE, st.get("error")
    items = _stored_items(stores["Stamped"], submitted["Stamped"])
    assert items and all(i["uri"] == "mongodb://127.0.0.1:1/shop" and i["bot"] == "scrapybot" for i in items)
    st = wait_done(r, submitted["Unbuildable"])
    assert st["status"] == jobs.STOPPED
    assert "NeedsSignals" in st["error"] and "crawler.signals" in st["error"]
    assert st["counters"]["spider_unavailable"] >= 1 and not st["counters"].get("spider_error:pipeline_init")
    assert not _stored_items(stores["Unbuildable"], submitted["Unbuildable"])
    log = (tmp_path / "w.log").read_text()
    # One traceback, not one per item.
    assert log.count("Scrapy item pipeline scrapy_pipeline_spiders:NeedsSignals cannot be built") == 1
