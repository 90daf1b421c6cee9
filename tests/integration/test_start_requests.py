"""start_requests: read lazily, a batch at a time while the job's backlog has room, by one worker
at a time; sync and async generators; one that raises or yields garbage costs only what it did
not give; a job is not done before its start requests are."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
import redis

from crawler import jobs
from crawler.config.settings import Settings
from crawler.spiders.loader import SpiderUnavailable
from crawler.state import keys
from crawler.store import open_store
from crawler.testweb import TestWeb
from crawler.urls import domain_of
from tests.conftest import Workers, stored_items, wait_done

SPIDERS = "tests/spiders/start_spiders.py"
SHARDS = "shard-0,shard-1,shard-2,shard-3"


def _item_page(h: BaseHTTPRequestHandler) -> None:
    body = f"<html><title>{h.path}</title><body>item</body></html>".encode()
    h.send_response(200)
    h.send_header("Content-Type", "text/html")
    h.send_header("Content-Length", str(len(body)))
    h.end_headers()
    h.wfile.write(body)


def _web(make_web: Callable[..., TestWeb]) -> str:
    """A site whose /item?id=N answers for every N; its origin."""
    web = make_web(1, 1)
    web.route(0, "/item", _item_page, any_query=True)
    return web.origin(0)


def _submit(r: redis.Redis, tmp_path: Path, origin: str, spider: str, *args: str, **settings: Any) -> str:
    return jobs.submit(r, Settings.from_env(store=f"sqlite:///{tmp_path}/c.db", spider=f"{SPIDERS}:{spider}",
                                            spider_args=[f"base={origin}", *args], allow_domains=[domain_of(origin)],
                                            **settings), [])


def _pages(tmp_path: Path, job_id: str) -> list[dict[str, Any]]:
    store = open_store(f"sqlite:///{tmp_path}/c.db")
    try:
        return list(store.pages(job_id))
    finally:
        store.close()


def _items(tmp_path: Path, job_id: str) -> list[dict[str, Any]]:
    return stored_items(f"sqlite:///{tmp_path}/c.db", job_id)


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


@pytest.mark.parametrize("spider", ["ManyStarts", "AsyncStarts"])
def test_200k_start_requests_are_read_lazily_within_the_backlog(
        spider: str, make_web: Callable[..., TestWeb], workers: Workers, r: redis.Redis, tmp_path: Path) -> None:
    origin = _web(make_web)
    backlog, cap = 100, 400
    procs = [workers.start(name, SHARDS) for name in ("a", "b")]
    job_id = _submit(r, tmp_path, origin, spider, "n=200000", max_pages=cap, start_requests_backlog=backlog,
                     per_host=16, near_duplicates=False)
    peak_open = peak_queued = 0
    rss: list[int] = []
    stop = threading.Event()

    def sample() -> None:
        nonlocal peak_open, peak_queued
        while not stop.is_set():
            open_, queued = r.hmget(keys.counters(job_id), ["open", "queued"])
            peak_open, peak_queued = max(peak_open, int(open_ or 0)), max(peak_queued, int(queued or 0))
            rss.append(sum(_rss_kb(p.pid) for p in procs))
            time.sleep(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        st = wait_done(r, job_id, timeout=180)
    finally:
        stop.set()
        sampler.join()
    c = st["counters"]
    assert st["status"] == jobs.DONE
    assert c["stored"] == cap  # every admitted start request was fetched and stored
    pages = _pages(tmp_path, job_id)
    assert {p["status"] for p in pages} == {200} and len({p["url"] for p in pages}) == cap
    # Read only as far as the crawl needed: the page cap, plus at most one batch of the backlog.
    assert cap <= c["start_requests"] <= cap + backlog
    assert 0 < peak_queued <= peak_open <= backlog
    assert max(rss) - rss[0] < 150_000, (rss[0], max(rss))  # kB: the 200,000 never sat in memory
    assert not r.exists(f"c:{{{job_id}}}:starts:lease")


def test_a_start_requests_that_raises_costs_only_the_rest(make_web: Callable[..., TestWeb], workers: Workers,
                                                         r: redis.Redis, tmp_path: Path) -> None:
    origin = _web(make_web)
    workers.start("a", SHARDS)
    job_id = _submit(r, tmp_path, origin, "ManyStarts", "n=400", "fail_at=120", "garbage_at=7",
                     start_requests_backlog=40)
    st = wait_done(r, job_id, timeout=120)
    c = st["counters"]
    assert st["status"] == jobs.DONE
    assert c["spider_error:start_requests"] == 2  # the garbage, and the exception
    assert c["stored"] == 119 == len(_pages(tmp_path, job_id))  # ids 0..119 but the garbage one
    assert c["start_requests"] == 120
    # Each Request's data (its meta) travelled with it to the page's callback; a URL has none.
    got = {int(i["url"].rsplit("=", 1)[1]): i["id"] for i in _items(tmp_path, job_id)}
    assert got == {n: (n if n % 2 == 0 else None) for n in range(120) if n != 7}


def test_a_worker_taking_over_resumes_where_the_dead_one_stopped(
        make_web: Callable[..., TestWeb], workers: Workers, r: redis.Redis, tmp_path: Path) -> None:
    origin = _web(make_web)
    quick = {"CRAWLER_LEASE_TIMEOUT": "5"}  # URL and starter leases of a dead worker lapse soon
    first = workers.start("a", SHARDS, env=quick)
    job_id = _submit(r, tmp_path, origin, "ManyStarts", "n=300", start_requests_backlog=40, per_host=8)
    deadline = time.monotonic() + 60
    while int(r.hget(keys.counters(job_id), "start_requests") or 0) < 100:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    os.kill(first.pid, 9)  # the holder dies with its generator open
    first.wait()
    workers.procs.pop("a")
    assert int(r.hget(keys.counters(job_id), "start_requests") or 0) < 300
    workers.start("b", SHARDS, env=quick)
    st = wait_done(r, job_id, timeout=150)
    assert st["status"] == jobs.DONE
    urls = {p["url"] for p in _pages(tmp_path, job_id) if p["status"] == 200}
    assert len(urls) == 300  # none lost (the store is by URL)
    assert st["counters"]["start_requests"] == 300  # b skipped what a had read, and read the rest


def test_a_spider_with_start_requests_and_no_scope_is_refused(r: redis.Redis, tmp_path: Path) -> None:
    with pytest.raises(SpiderUnavailable, match="allowed_domains"):
        jobs.submit(r, Settings.from_env(store=f"sqlite:///{tmp_path}/c.db", spider=f"{SPIDERS}:ManyStarts",
                                         spider_args=["base=http://127.0.1.1:9", "n=1"]), [])


@pytest.mark.parametrize("spider", ["BlockingStarts", "AsyncBlockingStarts"])
def test_a_start_requests_that_blocks_holds_up_neither_what_it_gave_nor_other_jobs(
        spider: str, make_web: Callable[..., TestWeb], workers: Workers, r: redis.Redis, tmp_path: Path) -> None:
    origin = _web(make_web)
    workers.start("a", SHARDS)
    # It yields 300 (fewer than a batch of 500), then blocks for good.
    blocked = _submit(r, tmp_path, origin, spider, "n=300", per_host=16, near_duplicates=False)
    time.sleep(1)  # the blocked generator is open on this worker's starter before the other job
    other = _submit(r, tmp_path, origin, "ManyStarts", "n=50", per_host=16, near_duplicates=False)
    st = wait_done(r, other, timeout=60)  # the other job's start requests were read meanwhile
    assert st["status"] == jobs.DONE and st["counters"]["stored"] == 50
    deadline = time.monotonic() + 60
    while int(r.hget(keys.counters(blocked), "stored") or 0) < 300:
        assert time.monotonic() < deadline, r.hgetall(keys.counters(blocked))
        time.sleep(0.1)
    c = jobs.status(r, blocked)
    assert c["status"] == jobs.RUNNING  # its start requests never end, so neither does it
    assert c["counters"]["start_requests"] == 300
    assert len({p["url"] for p in _pages(tmp_path, blocked) if p["status"] == 200}) == 300
    jobs.stop(r, blocked)
