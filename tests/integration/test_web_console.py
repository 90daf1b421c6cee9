"""The console in a real headless browser (Debian's chromium, driven by Playwright; no browser
download) against ``crawler web``'s app served by uvicorn, while real workers crawl the loopback
test web: the job page loads, its counters advance, Pause pauses the job, the settings form
changes the delay. A screenshot of the job page is saved (and copied to $CRAWLER_SCREENSHOT_DIR)."""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
import uvicorn

from crawler import control, jobs
from crawler.config.settings import Settings
from crawler.testweb import TestWeb
from crawler.web import create_app
from tests.conftest import Workers

CHROMIUM = Path("/usr/bin/chromium")
# CI sets CRAWLER_REQUIRE_CHROMIUM=1: there a missing browser fails the test instead of skipping it.
pytestmark = pytest.mark.skipif(not CHROMIUM.exists() and os.environ.get("CRAWLER_REQUIRE_CHROMIUM") != "1",
                                reason="Debian's chromium is not installed (apt-get install chromium); the "
                                "console's browser test needs it")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@pytest.fixture
def console(r: redis.Redis) -> Iterator[str]:
    """``crawler web``'s app on uvicorn, on a free loopback port, in a thread."""
    host, port = "127.0.0.1", _free_port("127.0.0.1")
    server = uvicorn.Server(uvicorn.Config(create_app(r), host=host, port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.05)
    yield f"http://{host}:{port}"
    server.should_exit = True
    thread.join(10)


def test_job_page_live_pause_and_settings(console: str, make_web: Callable[..., TestWeb], workers: Workers,
                                          r: redis.Redis, tmp_path: Path) -> None:
    from playwright.sync_api import expect, sync_playwright

    web = make_web(3, 300)
    workers.start("w0", "shard-0,shard-1")
    job = jobs.submit(r, Settings.from_env(store=f"sqlite:///{tmp_path / 'c.db'}", shards=2, delay=0.1,
                                           max_pages=900), web.seeds())
    errors: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"), executable_path=str(CHROMIUM), headless=True, args=ARGS,
            viewport={"width": 1280, "height": 1000})
        try:
            page = browser.new_page()
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.goto(f"{console}/#/jobs/{job}")
            expect(page.locator("#status")).to_have_text("running", timeout=15_000)

            # Counters advance while the crawl runs (the page polls every 2 s).
            stored = page.locator("#counter-stored")
            expect(stored).to_be_visible(timeout=15_000)
            first = int(stored.inner_text())
            page.wait_for_function(f"() => Number(document.querySelector('#counter-stored').textContent) > {first}",
                                   timeout=20_000)
            expect(page.locator("#hosts tbody tr")).to_have_count(3, timeout=10_000)

            # Pause: the job pauses, and the page says so.
            page.click("#btn-pause")
            expect(page.locator("#status")).to_have_text("paused", timeout=10_000)
            assert jobs.status(r, job)["status"] == jobs.PAUSED
            expect(page.locator("#btn-resume")).to_be_enabled()

            # The settings form changes the delay of the running job.
            page.fill("#settings-form input[name=delay]", "0.25")
            page.click("#settings-save")
            expect(page.locator("#settings-msg")).to_contain_text("delay 0.1 → 0.25", timeout=10_000)
            assert control.get_settings(r, job)["settings"]["delay"] == 0.25
            expect(page.locator("#settings-form input[name=delay]")).to_have_value("0.25")

            page.click("#btn-resume")
            expect(page.locator("#status")).to_have_text("running", timeout=10_000)
            page.wait_for_timeout(6_000)  # a few more points on the chart, and the log lines
            expect(page.locator("#log")).to_contain_text("settings_changed")
            shot = tmp_path / "console-job-page.png"
            page.screenshot(path=str(shot), full_page=True)
            assert shot.stat().st_size > 10_000
            if os.environ.get("CRAWLER_SCREENSHOT_DIR"):
                target = Path(os.environ["CRAWLER_SCREENSHOT_DIR"])
                target.mkdir(parents=True, exist_ok=True)
                shutil.copy(shot, target / shot.name)

            # And from the jobs page, the job is listed, and a new one is submitted from the form.
            page.goto(f"{console}/#/")
            expect(page.locator("#jobs tbody tr")).to_have_count(1, timeout=10_000)
            expect(page.locator("#jobs tbody a")).to_have_text(job)
            page.fill("#submit-form textarea[name=seeds]", web.seeds()[2])
            page.fill("#submit-form input[name=store]", f"sqlite:///{tmp_path / 'second.db'}")
            page.fill("#submit-form input[name=max_pages]", "5")
            page.click("#submit-form button[type=submit]")
            page.wait_for_url(lambda url: "#/jobs/" in url and job not in url, timeout=10_000)
            second = page.url.rsplit("/", 1)[1]
            expect(page.locator("#job-id")).to_have_text(second)
            assert control.get_settings(r, second)["settings"]["max_pages"] == 5
            page.wait_for_function("() => Number(document.querySelector('#counter-stored')?.textContent) === 5",
                                   timeout=30_000)
        finally:
            browser.close()
    control.stop(r, job)
    assert errors == []
