"""``--render auto`` on a site served the way script-built sites are (crawler.testweb.appshell): a
real framework's production build and the app's scripts as external files, text and links built
at once, on timers and from fetched JSON, plus pages that open popups, submit forms, navigate
away, and reach for a blocked network and a robots-disallowed path. One embedded crawl, real
chromium, real workers."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from crawler.testweb.appshell import NEVER, AppShellWeb
from tests.conftest import rows_by_url
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
    notes = {u[len(app.origin):]: row["render"] for u, row in rows.items()}
    assert all(n.startswith("rendered") for n in notes.values()), notes
    # The hostile pages are stored, each with what it did.
    assert "1 popups closed" in notes["/hostile/popup"], notes["/hostile/popup"]
    assert "navigated away (form POST)" in notes["/hostile/form"], notes["/hostile/form"]
    assert "navigated away" in notes["/hostile/redirect"], notes["/hostile/redirect"]
    assert "requests blocked" in notes["/hostile/canary"] and "requests blocked" in notes["/hostile/robots"]
    # Nothing reached the blocked network, the popup, the form's target or the disallowed path.
    assert app.canary_hits == []
    assert not any(app.served[k] for k in NEVER), {k: app.served[k] for k in NEVER}
    # robots.txt once for the origin, fetches and renders alike; each page's document fetched once.
    assert app.served[("GET", "/robots.txt")] == 1, app.served
    assert max(n for (m, p), n in app.served.items() if not p.startswith(("/static/", "/api/"))) == 1, app.served
    assert os.path.getsize(out / "crawl.db") > 0
