"""The console's job page shows each host's render decision and what it rests on (pages compared,
links and text the browser added, renders that timed out or failed), in a real headless browser
(Debian's chromium, driven by Playwright) against ``crawler web``'s app: the evidence is the
render stage's own (``crawler.render.decide``), for a job whose hosts are in its frontier."""

from __future__ import annotations

from pathlib import Path

import redis

from crawler import jobs
from crawler.config.settings import Settings
from crawler.render import decide
from tests.integration.test_web_console import ARGS, CHROMIUM, console, pytestmark  # noqa: F401  # the fixture, the skip


def test_the_job_page_shows_each_hosts_render_decision_and_its_evidence(console: str, r: redis.Redis,  # noqa: F811
                                                                       tmp_path: Path) -> None:
    from playwright.sync_api import expect, sync_playwright

    s = Settings.from_env(store=f"sqlite:///{tmp_path / 'c.db'}", shards=1, render="auto")
    scripted, plain, new = "127.0.4.40:8001", "127.0.4.41:8001", "127.0.4.42:8001"
    job = jobs.submit(r, s, [f"http://{h}/" for h in (scripted, plain, new)])
    # Three completed renders each, as the render stage learns them; the scripted host's pages
    # gained 12 links and 1,500 characters each, the plain host's nothing; two more of the scripted
    # host's timed out and one failed, and one of the new host's (still sampling) timed out.
    for _ in range(s.render_sample):
        decide.learn(r, job, s, scripted, decide.Comparison(1, 13, 100, 1600))
        decide.learn(r, job, s, plain, decide.Comparison(5, 5, 900, 900))
    decide.unfinished(r, job, scripted, "render_timeout")
    decide.unfinished(r, job, scripted, "render_timeout")
    decide.unfinished(r, job, scripted, "render_crashed")
    decide.unfinished(r, job, new, "render_timeout")
    errors: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch_persistent_context(str(tmp_path / "profile"), executable_path=str(CHROMIUM),
                                                        headless=True, args=ARGS)
        try:
            page = browser.new_page()
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.goto(f"{console}/#/jobs/{job}")
            rows = page.locator("#hosts tbody tr")
            expect(rows).to_have_count(3, timeout=15_000)

            def render_cell(host: str) -> str:
                return rows.filter(has_text=host).locator("td").nth(7).inner_text()

            assert render_cell(scripted).split() == ["yes", "3", "compared,", "+36", "links,", "+4,500", "chars;", "2",
                                                     "timed", "out,", "1", "failed"], render_cell(scripted)
            assert render_cell(plain).split()[:6] == ["no", "3", "compared,", "0", "links,", "0"], render_cell(plain)
            assert render_cell(new).split() == ["sampling", "0", "compared,", "0", "links,", "0", "chars;", "1",
                                                "timed", "out,", "0", "failed"], render_cell(new)
        finally:
            browser.close()
    assert errors == []
