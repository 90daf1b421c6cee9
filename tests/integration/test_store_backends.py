"""Both store backends, SQLite and PostgreSQL, against the same expectations."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest
import redis

from crawler import jobs
from crawler.config.settings import Settings
from crawler.store import open_store
from crawler.store.base import PageRecord
from tests.conftest import Workers, wait_done


def test_upsert_by_job_and_url_skips_a_fetch_id_already_stored(store_url: str) -> None:
    store = open_store(store_url)
    a = PageRecord(url="http://e.com/", job_id="j", fetch_id="f1", title="old", outlinks=["http://e.com/x"])
    b = PageRecord(url="http://e.com/", job_id="j", fetch_id="f2", title="new")
    other_job = PageRecord(url="http://e.com/", job_id="k", fetch_id="f1", title="k's")
    assert store.put([a]) == [a]
    assert store.put([a]) == []
    assert store.put([b, other_job]) == [b, other_job]
    rows = {(p["job_id"], p["url"]): p for p in store.pages()}
    assert rows[("j", "http://e.com/")]["title"] == "new" and rows[("k", "http://e.com/")]["title"] == "k's"
    assert [p["title"] for p in store.pages("k")] == ["k's"]
    assert store.previous("j", ["http://e.com/", "http://e.com/none"])["http://e.com/"]["fetch_id"] == "f2"
    store.close()


def test_a_failed_write_rolls_back_everything(store_url: str) -> None:
    store = open_store(store_url)

    def boom(new: list[PageRecord]) -> None:
        raise OSError("disk full")

    with pytest.raises(OSError):
        store.put([PageRecord(url="http://e.com/", job_id="j", fetch_id="f")], before_commit=boom)
    assert list(store.pages()) == []
    assert store.put([PageRecord(url="http://e.com/", job_id="j", fetch_id="f")])
    store.close()


def test_dead_links_and_revisits(store_url: str) -> None:
    store = open_store(store_url)
    store.put([
        PageRecord(url="http://e.com/", job_id="j", fetch_id="f", status=200, outlinks=["http://e.com/gone"],
                   next_visit=10.0, depth=0),
        PageRecord(url="http://e.com/gone", job_id="j", fetch_id="f", status=404, depth=1, next_visit=20.0),
    ])
    assert store.dead_links("j") == [("http://e.com/gone", 404, ["http://e.com/"])]
    assert sorted(store.revisits("j")) == [("http://e.com/", 0, 10.0, ""), ("http://e.com/gone", 1, 20.0, "")]
    store.close()


def _writer(store_url: str, worker: int, rounds: int) -> None:
    store = open_store(store_url)
    for i in range(rounds):
        # Every process writes the same pages under the same fetch ids, as redeliveries would.
        store.put([PageRecord(url=f"http://e.com/{i}/{k}", job_id="j", fetch_id=f"f{i}") for k in range(20)])
    store.close()


def test_concurrent_writers_leave_one_row_per_page_with_unique_ids(store_url: str) -> None:
    open_store(store_url).close()
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(store_url, w, 10)) for w in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    rows = list(open_store(store_url).pages("j"))
    assert len(rows) == 200 and len({r["url"] for r in rows}) == 200
    assert len({r["id"] for r in rows}) == 200


def test_a_crawl_into_postgresql(r: redis.Redis, pg_url: str, make_web, workers: Workers,
                                 tmp_path: Path) -> None:
    web = make_web(2, 15)
    workers.start("w0", "shard-0,shard-1")
    job_id = jobs.submit(r, Settings.from_env(shards=2, per_host=4, store=pg_url, warc_dir=str(tmp_path / "warc")),
                         web.seeds())
    wait_done(r, job_id)
    rows = list(open_store(pg_url).pages(job_id))
    assert {p["url"] for p in rows} == web.reachable_urls()
    assert len(rows) == len(web.reachable_urls())
