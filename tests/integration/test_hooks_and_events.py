"""The spider hooks that act around a fetch (``headers``, ``on_error``), and the events a job's
central log records beside its settings changes: cycles starting and ending, shards taken over."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import redis
from warcio.archiveiterator import ArchiveIterator

from crawler import control, jobs
from crawler.config.settings import Settings
from crawler.control import periodic as cycles
from crawler.frontier import Frontier
from crawler.state import keys, nodes
from crawler.store import open_store
from crawler.testweb import TestWeb
from tests.conftest import ROOT, Workers, wait_done

SPIDERS = ROOT / "tests" / "spiders"  # listed in CRAWLER_SPIDER_PATHS (conftest)


def test_headers_and_on_error_hooks_run_in_real_workers(make_web: Callable[..., TestWeb], workers: Workers,
                                                        r: redis.Redis, tmp_path: Path) -> None:
    web = make_web(1, 40)
    workers.start("w0", "shard-0,shard-1")
    settings = Settings.from_env(store=f"sqlite:///{tmp_path / 'c.db'}", warc_dir=str(tmp_path / "warc"), shards=2,
                                 spider=f"{SPIDERS / 'hooks.py'}:HooksSpider")
    job = jobs.submit(r, settings, web.seeds())
    st = wait_done(r, job)
    store = open_store(settings.store)
    try:
        missing = {p["url"] for p in store.pages(job) if p["status"] == 404}
        items = [row["item"] for row in store.items(job)]
    finally:
        store.close()
    assert missing, "the test web links to pages that are not there"
    assert {i["missing"] for i in items} == missing
    assert {(i["status"], i["error"]) for i in items} == {(404, "http_4xx")}
    assert all(i["from"] for i in items)  # the page that linked to it
    assert st["counters"]["items"] == len(missing)
    sent = set()
    for warc in (tmp_path / "warc").glob("*.warc.gz"):
        with warc.open("rb") as f:
            for rec in ArchiveIterator(f):
                if rec.rec_type == "request":
                    sent.add(rec.http_headers.get_header("X-Crawl-Test"))
    assert sent == {"hooks"}  # on every request


def test_cycles_and_takeovers_are_in_the_jobs_log(make_web: Callable[..., TestWeb], workers: Workers,
                                                  r: redis.Redis, tmp_path: Path) -> None:
    web = make_web(1, 5)
    store_url = f"sqlite:///{tmp_path / 'c.db'}"
    workers.start("w0", "shard-0")
    job = jobs.submit(r, Settings.from_env(shards=1, store=store_url, every=3600.0), web.seeds())
    deadline = time.monotonic() + 60
    while jobs.status(r, job)["status"] != jobs.WAITING:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    r.hset(keys.meta(job), "next_cycle_at", time.time())
    assert cycles.tick(r, open_store) == [(job, 2)]  # notes cycle 1's end, starts cycle 2
    events = [(e["event"], e["message"]) for e in control.logs(r, job)]
    ended = [m for ev, m in events if ev == "cycle_ended"]
    assert len(ended) == 1 and ended[0].startswith("cycle 1 ended: fetched ") and "new " in ended[0], events
    assert any(ev == "cycle_started" and m.startswith("cycle 2: ") for ev, m in events), events
    assert jobs.note_cycle_end(r, job) is False  # cycle 2 is not over: nothing to note yet

    # A shard whose every worker went silent is taken over: each running job's log says so.
    workers.stop()
    running = jobs.submit(r, Settings.from_env(shards=2, store=store_url), web.seeds())
    now = time.time()
    nodes.record_heartbeat(r, "gone@x", shards=[1], interval=1.0, now=now - 30)
    nodes.record_heartbeat(r, "here@x", shards=[0], interval=1.0, now=now)
    from crawler.frontier.dispatcher import Dispatcher

    d = Dispatcher(r, [0], lambda *a: None, lambda *a: None, takeover_after=3)
    assert running in Frontier(r).active_jobs()
    d._check_live(now)
    lines = [e for e in control.logs(r, running, level="WARNING") if e["event"] == "shard_down"]
    assert lines and "shard 1 taken over" in lines[0]["message"]
