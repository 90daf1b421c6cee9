"""Main text (``--extract``) end to end: parse stage, content table, export, both backends."""

from __future__ import annotations

import csv
import io
import json
import sqlite3
from collections.abc import Callable
from pathlib import Path

import redis

from crawler import jobs, stages
from crawler.config.settings import Settings
from crawler.frontier import Fetched
from crawler.stages.messages import FetchedPage
from crawler.state import keys
from crawler.store import open_store
from crawler.store.base import ContentRecord, PageRecord
from crawler.testweb import TestWeb
from tests.conftest import Workers, wait_done
from tests.integration.test_crawl import cli, no_private_redis_env


def _articles(web: TestWeb) -> dict[str, tuple[str, list[str]]]:
    """Each page's article by the URL it is served at."""
    return {web.url(site, path): web.article(site, path) for site, path in web.model.pages}


def _html_pages(rows: list[dict[str, object]]) -> dict[str, dict[str, object]]:
    return {str(r["url"]): r for r in rows
            if r["status"] == 200 and str(r["content_type"] or "").startswith("text/html")}


def test_an_embedded_crawl_stores_each_html_pages_text_and_exports_it(make_web: Callable[..., TestWeb],
                                                                       tmp_path: Path) -> None:
    web = make_web(2, 12, articles=True)
    out = tmp_path / "out"
    res = cli("crawl", *web.seeds(), "--out", str(out), "--workers", "2", "--extract", "text",
              env=no_private_redis_env())
    assert res.returncode == 0, res.stderr[-3000:]

    store = open_store(f"sqlite:///{out / 'crawl.db'}")
    pages = _html_pages(list(store.pages()))
    content = list(store.content())
    store.close()
    assert pages and {c["url"] for c in content} == set(pages)
    assert len(content) == len(pages)  # one row per page
    articles = _articles(web)
    for c in content:
        heading, paragraphs = articles[str(pages[c["url"]]["final_url"])]
        assert c["format"] == "text" and c["language"] == "en"
        assert heading in c["text"] and all(p in c["text"] for p in paragraphs)
        assert c["fetched_at"] == pages[c["url"]]["fetched_at"]

    exported = cli("export", str(out), "--content")
    assert exported.returncode == 0, exported.stderr
    assert [json.loads(line) for line in exported.stdout.splitlines()] == content
    as_csv = cli("export", str(out), "--content", "--format", "csv")
    assert [r["text"] for r in csv.DictReader(io.StringIO(as_csv.stdout))] == [c["text"] for c in content]


def test_a_worker_crawl_into_postgresql_stores_markdown(r: redis.Redis, pg_url: str,
                                                         make_web: Callable[..., TestWeb], workers: Workers,
                                                         tmp_path: Path) -> None:
    web = make_web(1, 8, articles=True)
    workers.start("w0", "shard-0,shard-1")
    job_id = jobs.submit(r, Settings.from_env(shards=2, per_host=4, store=pg_url, warc=False, extract="markdown"),
                         web.seeds())
    st = wait_done(r, job_id)
    store = open_store(pg_url)
    pages = _html_pages(list(store.pages(job_id)))
    content = list(store.content(job_id))
    store.close()
    assert pages and {c["url"] for c in content} == set(pages) and len(content) == len(pages)
    assert all(c["format"] == "markdown" and str(c["text"]).startswith("## Field notes") for c in content)
    counters = st["counters"]
    assert isinstance(counters, dict) and counters["extracted"] == len(content)
    exported = cli("export", pg_url, "--content", "--job", job_id)
    assert exported.returncode == 0, exported.stderr
    assert [json.loads(line)["text"] for line in exported.stdout.splitlines()] == [c["text"] for c in content]


def test_a_page_without_text_is_counted_and_stored_and_redelivery_leaves_one_row(r: redis.Redis, store_url: str,
                                                                                tmp_path: Path) -> None:
    settings = Settings.from_env({}, shards=1, store=store_url, warc=False, extract="text")
    article, empty = "http://a.example/", "http://b.example/"
    job_id = jobs.submit(r, settings, [article, empty])
    ctx = stages.Context.default(r)
    job = jobs.load(r, job_id)
    d = ctx.frontier.dispatch(job_id, 0, max_urls=5, per_host=1, delay=0, lease_timeout=60, concurrency=5)
    assert {e.url for e, *_ in d.items} == {article, empty}
    ctx.frontier.fetched(job_id, [Fetched(u, d.token) for u in (article, empty)], lease_timeout=60, delay=0)
    heading, paragraphs = TestWeb.article(0, "/")
    bodies = {article: (f"<html lang=de><body><article><h2>{heading}</h2>"
                        + "".join(f"<p>{p}</p>" for p in paragraphs) + "</article></body></html>").encode(),
              empty: b"<html><body><div></div></body></html>"}
    pages = []
    for url, body in bodies.items():
        body_key = keys.body(job_id, d.token, url)
        r.set(body_key, body)
        pages.append(FetchedPage(url=url, final_url=url, status=200, body_key=body_key, content_type="text/html",
                                 fetched_at=1.7e9, content_length=len(body), content_sha1="x"))

    parsed, _links = stages.parse_stage(ctx, job, d.token, pages)
    by_url = {p.url: p for p in parsed}
    assert set(by_url) == {article, empty}  # no text costs the page nothing but its text
    assert by_url[empty].main_text is None
    # The text travels to the store in the message, and reads back from it.
    assert FetchedPage.from_json(json.loads(json.dumps(by_url[article].to_json()))) == by_url[article]
    counters = jobs.status(r, job_id)["counters"]
    assert counters["extracted"] == 1
    assert sum(v for k, v in counters.items() if k.startswith("extract:")) == 1

    assert stages.store_stage(ctx, job, d.token, parsed) == 2
    for p in parsed:  # delivered again, as after a crash before the acknowledgement
        r.set(p.body_key, bodies[p.url])
    assert stages.store_stage(ctx, job, d.token, parsed) == 0
    ctx.close()

    store = open_store(store_url)
    assert {p["url"] for p in store.pages(job_id)} == {article, empty}
    content = list(store.content(job_id))
    store.close()
    assert len(content) == 1
    row = content[0]
    assert row["url"] == article and row["job_id"] == job_id and row["language"] == "de"
    assert row["text"].startswith(heading) and paragraphs[-1] in row["text"]


def test_an_older_sqlite_database_gains_the_content_table(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE pages (id INTEGER PRIMARY KEY, url TEXT NOT NULL, job_id TEXT NOT NULL, "
                 "fetch_id TEXT NOT NULL)")
    conn.execute("CREATE UNIQUE INDEX pages_job_url ON pages (job_id, url)")
    conn.commit()
    conn.close()
    store = open_store(f"sqlite:///{db}")
    assert list(store.content()) == []
    store.close()


def test_a_later_visit_without_text_removes_the_older_text(store_url: str) -> None:
    store = open_store(store_url)
    text = ContentRecord("markdown", "## Title\n\nBody text here.", title="Title", language="en")
    assert store.put([PageRecord(url="http://e.com/", job_id="j", fetch_id="f1", content=text)])
    assert [c["text"] for c in store.content("j")] == [text.text]
    # Another visit, extraction off (no content at all): the text stays.
    assert store.put([PageRecord(url="http://e.com/", job_id="j", fetch_id="f2")])
    assert [c["text"] for c in store.content("j")] == [text.text]
    # Another visit that looked and found no text: the text goes; the page stays.
    none = ContentRecord("markdown", "")
    assert store.put([PageRecord(url="http://e.com/", job_id="j", fetch_id="f3", content=none)])
    assert list(store.content("j")) == [] and len(list(store.pages("j"))) == 1
    store.close()
