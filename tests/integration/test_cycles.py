"""Periodic jobs: cycles under a real ``celery beat``, conditional revisits, pause/resume/stop."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import redis

from crawler import cli, jobs
from crawler.config.settings import Settings
from crawler.control import periodic as cycles
from crawler.state import keys
from crawler.store import open_store
from crawler.testweb import TestWeb
from tests.conftest import ROOT, Workers, wait_done

CHECK = 0.5  # the beat's cycle check, seconds


def wait_status(client: redis.Redis, job_id: str, status: str, cycle: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = jobs.status(client, job_id)
        if st["status"] == status and int(st.get("cycle", 0)) == cycle:
            return
        time.sleep(0.05)
    raise TimeoutError(f"job {job_id} not {status} in cycle {cycle}: {jobs.status(client, job_id)}")


def wait_stored(client: redis.Redis, job_id: str, n: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while int(client.hget(keys.counters(job_id), "stored") or 0) < n and time.monotonic() < deadline:
        time.sleep(0.02)


def live_rows(store_url: str, job_id: str) -> dict[str, str]:
    store = open_store(store_url)
    try:
        return {p["url"]: p["content_sha1"] for p in store.pages(job_id)
                if p["status"] == 200 and p["gone_cycle"] is None}
    finally:
        store.close()


def rows(store_url: str, job_id: str) -> dict[str, dict[str, object]]:
    store = open_store(store_url)
    try:
        return {p["url"]: p for p in store.pages(job_id)}
    finally:
        store.close()


def web_pages(web: TestWeb, keys_: set[tuple[int, str]]) -> dict[str, str]:
    """What the store must hold: each live page's URL and the SHA-1 of what it serves now."""
    return {web.url(s, p): hashlib.sha1(web.render(s, p)).hexdigest() for (s, p) in keys_
            if web.model.pages[(s, p)].status == 200}


def renders(web: TestWeb) -> dict[tuple[int, str], bytes]:
    return {k: web.render(*k) for k, page in web.model.pages.items() if page.status == 200}


def start_beat(name: str, redis_url: str, tmp: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "CRAWLER_REDIS_URL": redis_url, "CRAWLER_CYCLE_CHECK": str(CHECK),
           "CRAWLER_BEAT_LOCK_TTL": "3"}
    cmd = [sys.executable, "-m", "celery", "-A", "crawler", "beat", "--loglevel", "INFO",
           "--schedule", str(tmp / f"{name}-schedule"), "--pidfile", str(tmp / f"{name}.pid"),
           "--logfile", str(tmp / f"{name}.log")]
    return subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=open(tmp / f"{name}.stderr", "wb"))


def test_three_cycles_under_two_beats_follow_a_mutating_web(
        r: redis.Redis, redis_url: str, make_web, workers: Workers, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    web = make_web(2, 12)
    store_url = f"sqlite:///{tmp_path / 'crawl.db'}"
    workers.start("w0", "shard-0,shard-1")
    # Two beats at once, the mistake the lock guards against: cycles must still start once.
    beats = [start_beat(f"beat{i}", redis_url, tmp_path) for i in range(2)]
    try:
        period = 4.0
        assert cli.main(["submit", *web.seeds(), "--shards", "2", "--per-host", "4", "--store", store_url,
                         "--every", f"{period:g}s", "--revisit-min", "1s", "--revisit-max", f"{period:g}s"]) == 0
        job_id = capsys.readouterr().out.strip()
        t0 = time.monotonic()

        ever = set(web.model.reachable([(s, "/") for s in range(2)]))
        wait_status(r, job_id, jobs.WAITING, 1)
        assert live_rows(store_url, job_id) == web_pages(web, ever)

        mutations = [
            # (added, changed, removed)
            ([(0, "/new/a.html", (0, "/p/3.html")), (1, "/new/b.html", (1, "/"))],
             [(1, "/p/5.html")], [(0, "/p/8.html")]),
            ([], [(0, "/p/2.html"), (1, "/p/6.html")], [(1, "/p/9.html")]),
        ]
        gone_in: dict[str, int] = {}
        for cycle, (added, changed, removed) in enumerate(mutations, start=2):
            before = renders(web)
            for site, path, parent in added:
                web.model.add_page(site, path, parent)
            for site, path in changed:
                web.model.change(site, path)
            for site, path in removed:
                web.model.remove(site, path)
                gone_in[web.url(site, path)] = cycle
            mutated_at = time.time()
            after = renders(web)
            ever |= set(web.model.reachable([(s, "/") for s in range(2)]))
            wait_status(r, job_id, jobs.WAITING, cycle, timeout=30)

            report = jobs.cycles(r, job_id)[cycle - 1]
            assert report["started_at"] > mutated_at, "the cycle started before the web changed"
            live_before = {k for k in before if k in ever}
            expect_changed = {k for k in live_before if k in after and after[k] != before[k]}
            expect_gone = {k for k in live_before if k not in after}
            expect_unchanged = live_before - expect_changed - expect_gone
            assert (report["new"], report["changed"], report["gone"], report["unchanged"]) == (
                len(added), len(expect_changed), len(expect_gone), len(expect_unchanged)), report
            # Unchanged pages were answered 304 and not parsed again.
            assert report["not_modified"] == len(expect_unchanged)
            assert report["parsed"] == len(added) + len(expect_changed)
            # The store matches the web: every live page with what it serves now, gone ones marked.
            assert live_rows(store_url, job_id) == web_pages(web, ever)
            stored = rows(store_url, job_id)
            assert {u for u, p in stored.items() if p["gone_cycle"]} == set(gone_in)
            assert all(stored[u]["gone_cycle"] == c for u, c in gone_in.items())

        # Each cycle started once, with two beats running; only one of them sent ticks.
        report = jobs.cycles(r, job_id)
        assert [c["cycle"] for c in report][:3] == [1, 2, 3]
        elapsed = time.monotonic() - t0
        ticks = int(r.get(keys.BEAT_TICKS) or 0)
        assert ticks <= elapsed / CHECK + 4, f"{ticks} ticks in {elapsed:.1f}s: both beats sent them"
        logs = [(tmp_path / f"beat{i}.log").read_text() for i in range(2)]
        assert sum("holds the beat lock" in text for text in logs) == 1, logs

        # Revisit intervals moved the right way, within bounds.
        stored = rows(store_url, job_id)
        for (site, path) in mutations[1][1]:
            assert stored[web.url(site, path)]["revisit_interval"] == pytest.approx(period / 2)
        for p in stored.values():
            assert 1.0 <= p["revisit_interval"] <= period

        assert cli.main(["cycles", job_id]) == 0
        table = capsys.readouterr().out
        assert "304s" in table and len(table.splitlines()) >= 4
    finally:
        for b in beats:
            b.terminate()
            b.wait(10)


def test_a_short_period_with_default_revisits_refetches_every_page_in_cycle_two(
        r: redis.Redis, redis_url: str, make_web, workers: Workers, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    web = make_web(2, 10)
    store_url = f"sqlite:///{tmp_path / 'crawl.db'}"
    workers.start("w0", "shard-0,shard-1")
    beat = start_beat("beat", redis_url, tmp_path)
    try:
        # No --revisit-min: the minimum is the period, so every page is due when cycle 2 starts
        # (it used to be 1 h, and only the seeds were fetched again).
        assert cli.main(["submit", *web.seeds(), "--shards", "2", "--per-host", "4", "--store", store_url,
                         "--every", "3s"]) == 0
        job_id = capsys.readouterr().out.strip()
        deadline = time.monotonic() + 60
        # Cycle 3 may follow within moments: wait for cycle 2's end, not for a status in between.
        while len(done := [c for c in jobs.cycles(r, job_id) if c["finished_at"]]) < 2:
            assert time.monotonic() < deadline, jobs.cycles(r, job_id)
            time.sleep(0.05)
        report = done[1]
        stored = rows(store_url, job_id)
        live = {u for u, p in stored.items() if p["status"] == 200}
        assert len(live) > len(web.seeds())
        again = {web.url(h.site, h.path) for h in web.hits() if h.path != "/robots.txt"
                 and report["started_at"] <= h.start <= report["finished_at"]}
        assert again == live, f"not fetched in cycle 2: {sorted(live - again)}"
        assert report["fetched"] == len(live) and report["unchanged"] == len(live)
        # Only pages that were already dead (404) wait for revisit_max.
        assert int(r.hget(keys.cycle(job_id, 2), "not_due") or 0) == len(stored) - len(live)
    finally:
        beat.terminate()
        beat.wait(10)


def _periodic_job(r: redis.Redis, web: TestWeb, store_url: str, **kw: object) -> str:
    settings = Settings.from_env(**{"shards": 1, "per_host": 4, "store": store_url, **kw})
    return jobs.submit(r, settings, web.seeds())


def _next_cycle(r: redis.Redis, job_id: str, at: float) -> int:
    """Start the next cycle as the beat's tick would, at time ``at``."""
    return cycles.start_cycle(r, job_id, open_store, at)


@pytest.mark.parametrize("dedup", ["bloom", "set"])
def test_pages_not_due_are_skipped_and_not_followed_to(r: redis.Redis, make_web, workers: Workers,
                                                       tmp_path: Path, dedup: str) -> None:
    web = make_web(2, 10)
    store_url = f"sqlite:///{tmp_path / 'crawl.db'}"
    workers.start("w0", "shard-0")
    job_id = _periodic_job(r, web, store_url, every=3600.0, dedup=dedup)
    wait_status(r, job_id, jobs.WAITING, 1)
    first = len(web.hits())
    # An hour later only what is due goes again: the seeds; their links lead to pages whose
    # revisit time (the period) has not come, and those are not fetched.
    at = float(r.hget(keys.meta(job_id), "next_cycle_at") or 0) + 1
    assert _next_cycle(r, job_id, at - 1801) == 0, "not due yet"
    stored = len(rows(store_url, job_id))
    r.hset(keys.meta(job_id), "next_cycle_at", time.time())  # due now, pages still not due
    assert _next_cycle(r, job_id, time.time()) == 2
    wait_status(r, job_id, jobs.WAITING, 2)
    again = [h.path for h in web.hits()[first:] if h.path != "/robots.txt"]
    assert sorted(again) == ["/", "/"]
    report = jobs.cycles(r, job_id)[1]
    assert report["fetched"] == 2 and report["unchanged"] == 2 and report["not_modified"] == 2
    assert int(r.hget(keys.cycle(job_id, 2), "not_due") or 0) == stored - 2


def test_unconditional_server_same_bytes_count_unchanged_without_parsing(
        r: redis.Redis, make_web, workers: Workers, tmp_path: Path) -> None:
    web = make_web(1, 10)
    store_url = f"sqlite:///{tmp_path / 'crawl.db'}"
    workers.start("w0", "shard-0")
    job_id = _periodic_job(r, web, store_url, every=60.0, revisit_min=1.0, revisit_max=60.0)
    wait_status(r, job_id, jobs.WAITING, 1)
    live = len(live_rows(store_url, job_id))
    web.conditional = False  # validators are ignored: every page comes back 200
    web.model.change(0, "/p/4.html")
    assert _next_cycle(r, job_id, time.time() + 61) == 2
    wait_status(r, job_id, jobs.WAITING, 2)
    report = jobs.cycles(r, job_id)[1]
    assert report["not_modified"] == 0
    assert (report["changed"], report["unchanged"], report["parsed"]) == (1, live - 1, 1)
    # The unchanged rows kept their content (title and links were not parsed again).
    stored = rows(store_url, job_id)
    assert stored[web.url(0, "/")]["title"] == "Site 0 /"
    assert stored[web.url(0, "/")]["outlinks"]
    assert live_rows(store_url, job_id) == web_pages(web, set(web.model.reachable([(0, "/")])))


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_pause_resume_lose_and_repeat_nothing_and_idle_workers_sleep(
        r: redis.Redis, make_web, workers: Workers, tmp_path: Path) -> None:
    web = make_web(2, 30)
    store_url = f"sqlite:///{tmp_path / 'crawl.db'}"
    w = workers.start("w0", "shard-0")
    job_id = jobs.submit(r, Settings.from_env(shards=1, per_host=1, delay=0.05, store=store_url), web.seeds())
    wait_stored(r, job_id, 10)
    assert jobs.pause(r, job_id) == jobs.RUNNING
    time.sleep(1.0)  # what was in flight finishes and is stored
    hits, stored = len(web.hits()), len(rows(store_url, job_id))
    time.sleep(1.0)
    assert len(web.hits()) == hits, "fetched while paused"
    assert len(rows(store_url, job_id)) == stored
    assert jobs.status(r, job_id)["status"] == jobs.PAUSED
    assert jobs.resume(r, job_id) == jobs.PAUSED
    wait_done(r, job_id)
    fetched = Counter(h.path and (h.site, h.path) for h in web.hits() if h.path != "/robots.txt")
    assert max(fetched.values()) == 1, "a page was fetched twice"
    assert set(rows(store_url, job_id)) == web.reachable_urls()

    # Idle, a worker sleeps on its queues: next to no CPU.
    time.sleep(0.5)
    before = _cpu_seconds(w.pid)
    time.sleep(3.0)
    used = _cpu_seconds(w.pid) - before
    assert used < 0.15, f"an idle worker used {used:.2f} s of CPU in 3 s"


def test_stop_stores_what_is_in_flight_and_dispatches_nothing_more(
        r: redis.Redis, make_web, workers: Workers, tmp_path: Path) -> None:
    web = make_web(2, 30)
    store_url = f"sqlite:///{tmp_path / 'crawl.db'}"
    workers.start("w0", "shard-0")
    job_id = _periodic_job(r, web, store_url, every=2.0, delay=0.05, per_host=1)
    wait_stored(r, job_id, 10)
    jobs.stop(r, job_id)
    time.sleep(1.0)
    hits = web.hits()
    time.sleep(1.0)
    assert len(web.hits()) == len(hits), "fetched after stop"
    fetched = {web.url(h.site, h.path) for h in hits if h.path != "/robots.txt"}
    assert fetched <= set(rows(store_url, job_id)), "a page fetched before the stop was not stored"
    assert len(fetched) < len(web.reachable_urls())
    # The schedule ended: no next cycle, even when its time comes.
    assert r.sismember(keys.PERIODIC, job_id) == 0
    assert cycles.tick(r, open_store, time.time() + 60) == []
    assert jobs.status(r, job_id)["status"] == jobs.STOPPED
