"""What the browser may load for a page, and what a page may do to itself, driven directly (Debian's
chromium over Playwright, in this process) on the app-shell site: external framework and app
scripts, JSON and styles load whatever their type, within the job's bounds and scope; popups,
form POSTs and ``location`` changes never fail a render; robots.txt is asked for once per origin
by fetches and renders alike."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from crawler import jobs
from crawler.config.settings import Settings
from crawler.fetch.client import runtime
from crawler.render.browser import CLOSE_WAIT, PARTIAL_READ, Browser, Rendered
from crawler.render.guard import Guard, HostTurns, Rules
from crawler.stages.politeness import Politeness
from crawler.testweb.appshell import SHELL, AppShellWeb
from tests.integration.test_render import require_chromium
from tests.integration.test_render_browser import CONFIG, run


@pytest.fixture
def browser() -> Iterator[Browser]:
    b = Browser(require_chromium(), max_pages=4, recycle_after=200, max_rss_mb=2048)
    runtime().fetcher(CONFIG)
    yield b
    run(b.close())


@pytest.fixture
def app() -> Iterator[AppShellWeb]:
    w = AppShellWeb(ip="127.0.4.31").start()
    yield w
    w.stop()


def render(b: Browser, app: AppShellWeb, path: str, rules: Rules | None = None) -> tuple[Rendered, Guard]:
    g = Guard(app.origin + path, SHELL, "text/html; charset=utf-8", runtime().fetcher(CONFIG), CONFIG, None,
              HostTurns(1, 0.0), Counter(), rules or Rules())
    return run(b.render(g.url, g, 10.0, 0.5)), g


def test_a_pages_scripts_data_and_styles_load_whatever_their_type(browser: Browser, app: AppShellWeb) -> None:
    got, g = render(browser, app, "/section/1")
    assert got.error == "", got
    # Built by Vue's production build and the app's external scripts: at once, on timers, from JSON.
    for link in ("/", "/section/1/late", "/section/1/later", "/item/1"):
        assert f'href="{link}"' in got.html, (link, got.html[:2000])
    assert "From the page's data" in got.html
    # The stylesheet, three scripts and the JSON, fetched through the guard and not refused.
    assert g.counts["render_requests"] == 5 and not any(k.startswith("render_blocked") for k in g.counts), g.counts
    assert app.served[("GET", "/static/vue.global.prod.js")] == 1
    # The next page's scripts and styles come from the worker's cache, as a browser's would.
    got, g = render(browser, app, "/section/2")
    assert 'href="/item/2"' in got.html and g.counts["render_cached"] == 4, g.counts
    assert app.served[("GET", "/static/vue.global.prod.js")] == 1 and app.served[("GET", "/api/page.json")] == 2


def test_the_browsers_requests_are_bounded_by_type_count_and_scope(browser: Browser, app: AppShellWeb) -> None:
    _, g = render(browser, app, "/section/1", Rules(block_types=frozenset({"stylesheet"}), max_requests=2))
    assert g.counts["render_blocked:type_stylesheet"] == 1 and g.counts["render_blocked:too_many"] >= 1, g.counts
    assert g.counts["render_requests"] == 2
    _, g = render(browser, app, "/section/1", Rules(max_bytes=1000))
    assert g.counts["render_blocked:too_large"] >= 1, g.counts
    # Another site's host: refused by the job's scope, or, named as a CDN, by the network guard.
    got, g = render(browser, app, "/hostile/canary")
    assert g.counts["render_blocked:third_party"] == 1 and 'href="/hostile/after-canary"' in got.html, g.counts
    got, g = render(browser, app, "/hostile/canary", Rules(cdn_hosts=frozenset({app.canary_ip})))
    assert g.counts["render_blocked:blocked_network"] == 1 and 'href="/hostile/after-canary"' in got.html, g.counts
    assert app.canary_hits == []


def test_a_page_that_opens_a_popup_submits_a_form_or_leaves_is_read_as_it_stood(browser: Browser,
                                                                                app: AppShellWeb) -> None:
    got, g = render(browser, app, "/hostile/popup")
    assert got.error == "" and g.popups == 1 and 'href="/hostile/after-popup"' in got.html, (got, g.counts)
    got, g = render(browser, app, "/hostile/form")
    assert got.error == "" and g.navigated == "navigated away (form POST)" and "From the page's data" in got.html
    got, g = render(browser, app, "/hostile/redirect")
    assert got.error == "" and g.navigated == "navigated away" and g.target == app.origin + "/hostile/redirect-target"
    # Every render of them at once, as a render worker has them: none fails.
    guards = [Guard(app.origin + p, SHELL, "text/html", runtime().fetcher(CONFIG), CONFIG, None, HostTurns(1, 0.0),
                    Counter()) for p in ("/hostile/popup", "/hostile/form", "/hostile/redirect", "/hostile/popup")]

    async def at_once() -> list[Rendered]:
        return list(await asyncio.gather(*(browser.render(g.url, g, 10.0, 0.5) for g in guards)))

    many = run(at_once())
    assert [r.error for r in many] == ["", "", "", ""], many
    assert not app.served[("POST", "/hostile/submit")] and not app.served[("GET", "/hostile/popup-target")]


def test_dialogs_downloads_and_the_metadata_address_neither_hold_nor_fail_a_render(browser: Browser,
                                                                                  app: AppShellWeb) -> None:
    got, g = render(browser, app, "/hostile/dialog")
    # Each dismissed (confirm false, prompt null), or the page would wait on it for ever.
    assert got.error == "" and g.dialogs == 3 and 'href="/hostile/after-dialog"' in got.html, (got.error, g.counts)
    got, g = render(browser, app, "/hostile/download")
    assert got.error == "" and g.downloads == 2 and 'href="/hostile/after-download"' in got.html, (got.error, g.counts)
    assert g.counts["render_downloads"] == 2 and not g.navigated
    got, g = render(browser, app, "/hostile/metadata")
    assert got.error == "" and 'href="/hostile/after-metadata"' in got.html
    assert g.counts["render_blocked:third_party"] == 2, g.counts
    assert not app.served[("GET", "/hostile/file.bin")], app.served


def test_pages_that_never_yield_or_never_settle_end_at_their_deadline(browser: Browser, app: AppShellWeb) -> None:
    def timed(path: str) -> tuple[Rendered, float]:
        g = Guard(app.origin + path, SHELL, "text/html", runtime().fetcher(CONFIG), CONFIG, None, HostTurns(1, 0.0),
                  Counter())
        started = time.monotonic()
        got = run(browser.render(g.url, g, 4.0, 0.5))
        return got, time.monotonic() - started

    # Past the deadline: at most a moment to read the DOM and one to close the page (a loaded
    # machine's slack besides), never the page's say.
    bound = 4.0 + PARTIAL_READ + CLOSE_WAIT + 2.0
    (loop, loop_s), (storm, storm_s) = timed("/hostile/loop"), timed("/hostile/storm")
    assert loop.error == "render_timeout" and loop.html == "" and loop_s < bound, (loop, loop_s)
    assert storm.error == "render_timeout" and 'href="/hostile/after-storm"' in storm.html and storm_s < bound
    # The browser goes on rendering after them.
    got, _ = render(browser, app, "/section/1")
    assert got.error == "" and 'href="/item/1"' in got.html


def test_robots_txt_is_asked_for_once_per_origin_by_fetches_and_renders(app: AppShellWeb, r: redis.Redis,
                                                                         tmp_path: Path) -> None:
    job = jobs.load(r, jobs.submit(r, Settings.from_env(shards=1, store=f"sqlite:///{tmp_path / 'c.db'}"),
                                   app.seeds()))
    fetcher = runtime().fetcher(CONFIG)
    # The fetch stage's worker reads it first; a render worker (another process: its own copy of
    # the cache) then checks a page's many requests at once.
    fetching, rendering = Politeness(r), Politeness(r)
    _, fresh = fetching.policies(app.seeds(), job, fetcher, CONFIG, runtime().run)
    assert fresh and app.served[("GET", "/robots.txt")] == 1
    check = rendering.robots_check(job, fetcher, CONFIG)

    async def many() -> list[str | None]:
        return list(await asyncio.gather(*(check(app.origin + p) for p in ("/static/app.js", "/private/data.json",
                                                                            "/api/page.json?path=/"))))

    assert run(many()) == [None, "robots", None]
    # A third process, nothing cached yet for another origin: its requests share one fetch.
    other = AppShellWeb(ip="127.0.4.32").start()
    try:
        check = Politeness(r).robots_check(job, fetcher, CONFIG)

        async def five() -> None:
            await asyncio.gather(*(check(other.origin + f"/static/{i}.js") for i in range(5)))

        run(five())
        assert other.served[("GET", "/robots.txt")] == 1
    finally:
        other.stop()
    assert app.served[("GET", "/robots.txt")] == 1
