"""Rendering in a real headless browser (Debian's chromium, over Playwright): real workers, one of
them serving the render queue, crawling two loopback hosts, one of which builds its pages with
scripts. Without Chromium they are skipped, saying how to install it (failed instead under
CRAWLER_REQUIRE_CHROMIUM=1), all but the one checking what a crawl says without it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from warcio.archiveiterator import ArchiveIterator

from crawler import jobs
from crawler.config.settings import Settings
from crawler.render import decide
from crawler.render.browser import RenderUnavailable, chromium_path
from crawler.testweb.scripted import TIMEOUT_PAGES, ScriptedWeb
from tests.conftest import ROOT, Workers, rows_by_url
from tests.integration.test_crawl import cli

try:
    CHROMIUM, MISSING = chromium_path(), ""
except RenderUnavailable as exc:
    CHROMIUM, MISSING = "", str(exc)


def require_chromium() -> str:
    """The Chromium the render tests drive; without one they are skipped, saying how to install
    it, or fail where CRAWLER_REQUIRE_CHROMIUM=1 (CI) says a skip would hide them."""
    if not CHROMIUM:
        why = f"the render tests need a real browser: {MISSING}"
        if os.environ.get("CRAWLER_REQUIRE_CHROMIUM") == "1":
            pytest.fail(f"{why} (CRAWLER_REQUIRE_CHROMIUM=1)")
        pytest.skip(why)
    return CHROMIUM


@pytest.fixture
def web() -> Iterator[ScriptedWeb]:
    require_chromium()
    w = ScriptedWeb().start()
    yield w
    w.stop()


def _settings(tmp_path: Path, web: ScriptedWeb, **kw: object) -> Settings:
    given: dict[str, object] = {"render": "auto", "render_timeout": 4.0, **kw}
    return Settings.from_env(store=f"sqlite:///{tmp_path / 'crawl.db'}", shards=1, warc_dir=str(tmp_path / "warc"),
                             allow_domains=list(web.ips), **given)


def test_auto_renders_the_scripted_host_only_and_finds_every_script_built_link(
        web: ScriptedWeb, workers: Workers, r: redis.Redis, redis_url: str, tmp_path: Path) -> None:
    workers.start("w0", "shard-0", env={"CRAWLER_SHARDS": "1"})
    workers.start("render", "render")
    job_id = jobs.submit(r, _settings(tmp_path, web), web.seeds())
    st = _wait(r, job_id, 120)
    assert st["status"] == "done", st
    rows = rows_by_url(tmp_path / "crawl.db")
    assert set(rows) == web.reachable()
    js, plain = (web.origin(ip) for ip in web.ips)
    # Rendered: every page of the scripted host; of the plain one, only its sample.
    assert decide.decisions(r, job_id) == {f"{web.ips[0]}:{web.port}": "yes", f"{web.ips[1]}:{web.port}": "no"}
    for path in web.scripted_paths():
        want = "render_timeout" if path in TIMEOUT_PAGES else "rendered"
        assert rows[js + path]["render"].startswith(want), (path, rows[js + path]["render"])
    # Still changing at its deadline, /busy is kept as it stood then: its link was followed.
    assert rows[js + "/busy"]["render"].startswith("render_timeout, partial DOM"), rows[js + "/busy"]
    rendered_plain = [u for u, row in rows.items() if u.startswith(plain) and row["render"]]
    assert len(rendered_plain) == Settings().render_sample
    # The script's request to 10.255.255.1 was refused by the guard (and never reached anything);
    # the link the page added after it is followed.
    assert "1 requests blocked" in rows[js + "/blocked"]["render"]
    c = st["counters"]
    assert c["render_timeout"] == len(TIMEOUT_PAGES)
    assert c["rendered"] >= len(web.scripted_paths()) - len(TIMEOUT_PAGES)
    assert any(k.startswith("render_blocked:") for k in c)
    # Each page was fetched once: the browser's document came from the fetch, not a second GET;
    # robots.txt once per origin, though a render worker in another process checks it too.
    assert max(web.served.values()) == 1, web.served.most_common(3)
    assert all(web.served[(ip, "/robots.txt")] == 1 for ip in web.ips), web.served
    # The WARC keeps the HTTP response and adds the rendered DOM as a resource record.
    resources = {}
    for f in (tmp_path / "warc").glob("*.warc.gz"):
        with open(f, "rb") as fh:
            for rec in ArchiveIterator(fh):
                if rec.rec_type == "resource":
                    resources[rec.rec_headers.get_header("WARC-Target-URI")] = rec.content_stream().read()
    assert b'href="/leaf1"' in resources[js + "/a1"]
    out = cli("status", job_id, "--hosts", env={**os.environ, "CRAWLER_REDIS_URL": redis_url})
    assert "render" in out.stdout and " yes" in out.stdout and " no" in out.stdout
    # The renders that timed out are counted against their host, not learnt from; status shows
    # what the decision rests on.
    scripted = f"{web.ips[0]}:{web.port}"
    ev = decide.evidence(r, job_id, [scripted])[scripted]
    assert ev["timeouts"] == len(TIMEOUT_PAGES) and ev["compared"] >= Settings().render_sample, ev
    assert f"{len(TIMEOUT_PAGES)} timed out" in out.stdout, out.stdout


def test_a_spider_chooses_the_pages_to_render_and_what_to_wait_for(
        web: ScriptedWeb, workers: Workers, r: redis.Redis, tmp_path: Path) -> None:
    workers.start("w0", "shard-0", env={"CRAWLER_SHARDS": "1"})
    workers.start("render", "render")
    job_id = jobs.submit(r, _settings(tmp_path, web, spider=f"{ROOT / 'tests' / 'spiders' / 'render.py'}:RenderSpider",
                                      render_sample=100), web.seeds())
    st = _wait(r, job_id, 120)
    assert st["status"] == "done", st
    rows = rows_by_url(tmp_path / "crawl.db")
    assert set(rows) == web.reachable()
    js, plain = (web.origin(ip) for ip in web.ips)
    assert all(row["render"] == "" for u, row in rows.items() if u.startswith(plain))
    assert rows[js + "/a1"]["render"] == "rendered"


@pytest.mark.chaos
def test_a_killed_render_worker_loses_nothing(web: ScriptedWeb, workers: Workers, r: redis.Redis,
                                              tmp_path: Path) -> None:
    workers.start("w0", "shard-0", env={"CRAWLER_SHARDS": "1"})
    first = workers.start("render1", "render")
    job_id = jobs.submit(r, _settings(tmp_path, web, render="always", lease_timeout=5.0), web.seeds())
    deadline = time.monotonic() + 60
    while jobs.status(r, job_id)["counters"].get("rendered", 0) < 2:
        assert time.monotonic() < deadline, jobs.status(r, job_id)
        time.sleep(0.1)
    os.kill(first.pid, signal.SIGKILL)  # the worker and, with it, its browser's driver
    first.wait()
    workers.procs.pop("render1")
    workers.start("render2", "render")
    st = _wait(r, job_id, 120)
    assert st["status"] == "done", st
    assert set(rows_by_url(tmp_path / "crawl.db")) == web.reachable()


def test_crawl_without_chromium_says_what_to_install(tmp_path: Path) -> None:
    res = cli("crawl", "http://127.0.4.10:9/", "--render", "auto", "--out", str(tmp_path / "o"),
              env={**os.environ, "CRAWLER_CHROMIUM": "/nonexistent/chromium"})
    assert res.returncode == 2, res.stdout + res.stderr
    assert "apt-get install chromium" in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_a_render_worker_without_chromium_stops_at_once_saying_what_to_install(redis_url: str) -> None:
    env = {**os.environ, "CRAWLER_REDIS_URL": redis_url, "CRAWLER_CHROMIUM": "/nonexistent/chromium"}
    res = subprocess.run([sys.executable, "-m", "celery", "-A", "crawler", "worker", "-Q", "render", "--pool", "solo",
                          "--loglevel", "WARNING"], env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "serves the render queue" in res.stderr and "apt-get install chromium" in res.stderr


def _wait(r: redis.Redis, job_id: str, timeout: float) -> dict[str, object]:
    deadline = time.monotonic() + timeout
    while (st := jobs.status(r, job_id))["status"] not in jobs.FINISHED:
        assert time.monotonic() < deadline, st
        time.sleep(0.2)
    return st
