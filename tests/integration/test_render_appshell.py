"""``--render auto`` on a site served the way script-built sites are (crawler.testweb.appshell): a
real framework's production build and the app's scripts as external files, text and links built
at once, on timers and from fetched JSON, plus pages that open popups, submit forms, navigate
away, raise dialogs, start downloads, never yield or never settle, and reach for a blocked network,
the metadata address and a robots-disallowed path. One embedded crawl, real chromium, real
workers."""

from __future__ import annotations

import os
import signal
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from crawler import jobs
from crawler.config.settings import Settings
from crawler.render import decide
from crawler.testweb.appshell import ENDLESS, NEVER, AppShellWeb
from crawler.testweb.scripted import ScriptedWeb
from tests.conftest import Workers, rows_by_url, wait_done
from tests.integration.test_crawl import cli, no_private_redis_env
from tests.integration.test_render import require_chromium


@pytest.fixture
def app() -> Iterator[AppShellWeb]:
    require_chromium()
    w = AppShellWeb().start()
    yield w
    w.stop()


def test_auto_renders_a_framework_site_whole_and_survives_its_hostile_pages(app: AppShellWeb, tmp_path: Path) -> None:
    out = tmp_path / "out"
    # The canary's host is let through the job's scope, so that the network guard is what stops it.
    env = {**no_private_redis_env(), "CRAWLER_RENDER_CDN_HOSTS": app.canary_ip, "CRAWLER_RENDER_TIMEOUT": "8"}
    res = cli("crawl", *app.seeds(), "--out", str(out), "--workers", "1", "--render", "auto", env=env, timeout=120)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    rows = rows_by_url(out / "crawl.db")
    # Every page, and every link the app builds (at once, at 300 and 800 ms, from its JSON).
    notes = {u[len(app.origin):]: row["render"] for u, row in rows.items()}
    assert set(rows) == app.reachable(), (sorted(app.reachable() ^ set(rows)), list(notes.items()))
    assert all(n.startswith("rendered") for p, n in notes.items() if p not in ENDLESS), notes
    # The hostile pages are stored, each with what it did.
    assert "1 popups closed" in notes["/hostile/popup"], notes["/hostile/popup"]
    assert "navigated away (form POST)" in notes["/hostile/form"], notes["/hostile/form"]
    assert "navigated away" in notes["/hostile/redirect"], notes["/hostile/redirect"]
    assert all("requests blocked" in notes[p] for p in ("/hostile/canary", "/hostile/robots", "/hostile/metadata"))
    assert "3 dialogs dismissed" in notes["/hostile/dialog"], notes["/hostile/dialog"]
    assert "2 downloads refused" in notes["/hostile/download"], notes["/hostile/download"]
    # A script that never yields is stored from its HTML; one that never stops changing its page,
    # as it stood at the deadline (its link found); either way the worker went on.
    assert notes["/hostile/loop"] == "render_timeout", notes["/hostile/loop"]
    assert notes["/hostile/storm"] == "render_timeout, partial DOM", notes["/hostile/storm"]
    # Nothing reached the blocked network, the popup, the form's target or the disallowed path.
    assert app.canary_hits == []
    assert not any(app.served[k] for k in NEVER), {k: app.served[k] for k in NEVER}
    # robots.txt once for the origin, fetches and renders alike; each page's document fetched once.
    assert app.served[("GET", "/robots.txt")] == 1, app.served
    assert max(n for (m, p), n in app.served.items() if not p.startswith(("/static/", "/api/"))) == 1, app.served
    assert os.path.getsize(out / "crawl.db") > 0


@pytest.mark.chaos
def test_auto_finds_the_whole_framework_site_though_its_render_worker_is_killed_mid_crawl(
        app: AppShellWeb, workers: Workers, r: redis.Redis, tmp_path: Path) -> None:
    plain = ScriptedWeb(scripted_ip="127.0.4.12", plain_ip="127.0.4.13").start()  # only its plain host is seeded
    try:
        plain_origin = plain.origin(plain.ips[1])
        db = tmp_path / "crawl.db"
        s = Settings.from_env(store=f"sqlite:///{db}", shards=1, render="auto", render_timeout=6.0, lease_timeout=5.0,
                              render_cdn_hosts=[app.canary_ip], allow_domains=[app.ip, plain.ips[1]])
        workers.start("w0", "shard-0", env={"CRAWLER_SHARDS": "1"})
        first = workers.start("render1", "render")
        job_id = jobs.submit(r, s, [*app.seeds(), plain_origin + "/"])
        deadline = time.monotonic() + 60
        while jobs.status(r, job_id)["counters"].get("rendered", 0) < 3:
            assert time.monotonic() < deadline, jobs.status(r, job_id)
            time.sleep(0.05)
        os.kill(first.pid, signal.SIGKILL)  # mid-crawl: with its browser's pages in hand
        first.wait()
        workers.procs.pop("render1")
        workers.start("render2", "render")
        st = wait_done(r, job_id, 150)
        assert st["status"] == "done", st
        rows = rows_by_url(db)
        plain_pages = {plain_origin + p for p in plain.plain_paths()}
        # Every page and every script-built link of the framework site, the plain site whole, once each.
        assert set(rows) == app.reachable() | plain_pages, sorted(set(rows) ^ (app.reachable() | plain_pages))
        with sqlite3.connect(db) as conn:
            assert conn.execute("SELECT count(*) - count(DISTINCT url) FROM pages").fetchone() == (0,)
        notes = {u[len(app.origin):]: row["render"] for u, row in rows.items() if u.startswith(app.origin)}
        assert all(n.startswith("rendered") for p, n in notes.items() if p not in ENDLESS), notes
        assert all(notes[p].startswith("render_timeout") for p in ENDLESS), notes
        # The plain site rendered for its sample only, and decided so on that evidence.
        rendered_plain = sorted(u for u in plain_pages if rows[u]["render"])
        assert len(rendered_plain) == s.render_sample, rendered_plain
        plain_host, app_host = f"{plain.ips[1]}:{plain.port}", f"{app.ip}:{app.port}"
        assert decide.decisions(r, job_id) == {app_host: "yes", plain_host: "no"}
        assert decide.evidence(r, job_id, [plain_host])[plain_host]["compared"] == s.render_sample
        # robots.txt once per origin, across both render workers; the guard's canary got nothing.
        assert app.served[("GET", "/robots.txt")] == 1 and plain.served[(plain.ips[1], "/robots.txt")] == 1
        assert app.canary_hits == [] and not any(app.served[k] for k in NEVER)
    finally:
        plain.stop()
