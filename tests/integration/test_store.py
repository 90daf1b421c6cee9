"""The store stage against real Redis, SQLite and WARC files."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from crawler import jobs, stages
from crawler.config.settings import Settings
from crawler.frontier import Entry, Fetched
from crawler.stages.messages import FetchedPage, groups_from_json
from crawler.state import keys
from crawler.store import StoreUnavailable, StoreURLError, open_store
from crawler.store.base import PageRecord
from crawler.store.sqlite import SQLiteStore


def _page(url: str, body_key: str = "", status: int | None = 200) -> FetchedPage:
    return FetchedPage(**{
            "url": url, "depth": 0, "referrer": "", "final_url": url, "status": status, "http_version": "HTTP/1.1",
            "headers": [("Content-Type", "text/html")], "request_headers": [("User-Agent", "t")], "error": None,
            "fetched_at": 1_700_000_000.0, "elapsed": 0.01, "redirects": [], "body_key": body_key,
            "content_length": 5, "content_sha1": "x", "content_type": "text/html", "title": "T", "outlinks": ["a"]})


def _warc_records(warc_dir: Path) -> list[str]:
    lines = []
    for f in sorted(warc_dir.glob("*.warc.gz")):
        out = subprocess.run([sys.executable, "-m", "warcio.cli", "index", "-f", "warc-type,warc-target-uri", str(f)],
                             capture_output=True, text=True, check=True).stdout
        lines += [ln for ln in out.splitlines() if ln.strip()]
    return lines


def test_store_delivered_twice_leaves_one_row_and_one_record_set(r: redis.Redis, tmp_path: Path) -> None:
    settings = Settings.from_env({}, store=f"sqlite:///{tmp_path}/crawl.db", warc_dir=str(tmp_path / "warc"))
    job_id = jobs.submit(r, settings, ["http://a.example/"])
    ctx = stages.Context.default(r)
    job = jobs.load(r, job_id)
    d = ctx.frontier.dispatch(job_id, 0, max_urls=5, per_host=1, delay=0, lease_timeout=60, concurrency=5)
    if not d.items:  # the seed's shard is not 0
        for shard in range(settings.shards):
            d = ctx.frontier.dispatch(job_id, shard, max_urls=5, per_host=1, delay=0, lease_timeout=60, concurrency=5)
            if d.items:
                break
    url = d.items[0][0].url
    ctx.frontier.fetched(job_id, [Fetched(url, d.token)], lease_timeout=60, delay=0)
    body_key = keys.body(job_id, d.token, url)
    r.set(body_key, b"<html>hello</html>")
    pages = [_page(url, body_key)]

    assert stages.store_stage(ctx, job, d.token, pages) == 1
    r.set(body_key, b"<html>hello</html>")  # as if the delete had not happened before a crash
    assert stages.store_stage(ctx, job, d.token, pages) == 0
    ctx.close()

    rows = list(open_store(settings.store).pages())
    assert [row["url"] for row in rows] == [url]
    assert _warc_records(tmp_path / "warc") == [f'{{"warc-type": "request", "warc-target-uri": "{url}"}}',
                                                f'{{"warc-type": "response", "warc-target-uri": "{url}"}}']
    st = jobs.status(r, job_id)
    assert st["counters"]["stored"] == 1 and st["status"] == "done"
    assert not r.exists(body_key)


class _CommitFailsOnce:
    """The SQLite store, except that its first commit fails after the WARC records went out, as
    when PostgreSQL goes down at COMMIT."""

    def __init__(self, inner: SQLiteStore) -> None:
        self.inner = inner
        self.failed = False

    def put(self, records: list[PageRecord], before_commit: object = None) -> list[PageRecord]:
        if not self.failed:
            self.failed = True
            if callable(before_commit):
                before_commit(records)
            raise StoreUnavailable("postgresql: server closed the connection unexpectedly")
        return self.inner.put(records, before_commit)

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)


def test_a_commit_that_fails_takes_back_its_warc_records(r: redis.Redis, tmp_path: Path) -> None:
    settings = Settings.from_env({}, store=f"sqlite:///{tmp_path}/crawl.db", warc_dir=str(tmp_path / "warc"))
    job_id = jobs.submit(r, settings, ["http://a.example/"])
    ctx = stages.Context.default(r)
    job = jobs.load(r, job_id)
    d = next(d for shard in range(settings.shards)
             if (d := ctx.frontier.dispatch(job_id, shard, max_urls=5, per_host=1, delay=0, lease_timeout=60,
                                            concurrency=5)).items)
    url = d.items[0][0].url
    ctx.frontier.fetched(job_id, [Fetched(url, d.token)], lease_timeout=60, delay=0)
    body_key = keys.body(job_id, d.token, url)
    r.set(body_key, b"<html>hello</html>")
    real = open_store(settings.store)
    assert isinstance(real, SQLiteStore)
    ctx._stores.put(settings.store, _CommitFailsOnce(real))

    with pytest.raises(StoreUnavailable):
        stages.store_stage(ctx, job, d.token, [_page(url, body_key)])
    assert _warc_records(tmp_path / "warc") == []  # taken back with the rows
    assert stages.store_stage(ctx, job, d.token, [_page(url, body_key)]) == 1  # the retry
    ctx.close()
    assert _warc_records(tmp_path / "warc") == [f'{{"warc-type": "request", "warc-target-uri": "{url}"}}',
                                                f'{{"warc-type": "response", "warc-target-uri": "{url}"}}']


def test_warc_rotates_by_size(tmp_path: Path) -> None:
    from crawler.store.warc import WarcFiles

    w = WarcFiles(str(tmp_path), max_size=2_000)
    for i in range(6):
        rec = PageRecord(url=f"http://e.com/{i}", job_id="j", fetch_id="f", status=200, fetched_at=1.7e9)
        w.write(rec, http_version="HTTP/1.1", request_headers=[], response_headers=[], body=os.urandom(3000))
        w.flush()
    w.close()
    assert len(list(tmp_path.glob("*.warc.gz"))) >= 3
    assert len(_warc_records(tmp_path)) == 12


@pytest.mark.parametrize("url, message", [
    ("crawl.db", "has no scheme"),
    ("mysql://x/y", "unknown store scheme 'mysql'"),
    ("sqlite://", "names no file"),
])
def test_bad_store_urls_are_named(url: str, message: str) -> None:
    with pytest.raises(StoreURLError, match=message):
        open_store(url)


def test_entry_round_trip() -> None:
    e = Entry("http://e.com/a?b=1", 3, "http://e.com/", 2)
    assert Entry.decode(e.encode()) == e
    assert Entry.decode(Entry("http://e.com/").encode()) == Entry("http://e.com/")


def test_an_older_database_gets_the_new_columns(tmp_path: Path) -> None:
    import sqlite3

    db = tmp_path / "old.db"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE pages (id INTEGER PRIMARY KEY, url TEXT NOT NULL UNIQUE, job_id TEXT NOT NULL, "
                 "fetch_id TEXT NOT NULL, title TEXT)")
    conn.execute("INSERT INTO pages (url, job_id, fetch_id, title) VALUES ('http://e.com/', 'j', 'f0', 'kept')")
    conn.commit()
    conn.close()
    store = SQLiteStore(str(db))
    store.put([PageRecord(url="http://e.com/b", job_id="j", fetch_id="f1", simhash="00ff", near_duplicate_of="x")])
    rows = {r["url"]: r for r in store.pages()}
    assert rows["http://e.com/"]["title"] == "kept"
    assert rows["http://e.com/b"]["simhash"] == "00ff" and rows["http://e.com/b"]["near_duplicate_of"] == "x"


def test_fetch_tasks_of_one_dispatch_keep_their_own_bodies_and_links(r: redis.Redis, make_web) -> None:
    """The dispatcher splits one dispatch into several fetch tasks: each page must reach parse
    with its own body and every task's links must be admitted (the tasks once shared one token:
    body keys went by position, so pages swapped bodies, and a link batch is admitted once per
    token, so the second task's links were dropped as a redelivery of the first's)."""
    web = make_web(1, 8)
    settings = Settings.from_env(obey_robots=False, shards=1, near_duplicates=False)
    job_id = jobs.submit(r, settings, web.seeds())
    ctx = stages.Context.default(r)
    job = jobs.load(r, job_id)
    paths = [web.model.page_path(i) for i in range(1, 4)]
    stages.dedup_stage(ctx, job, "", groups_from_json([[web.url(0, p), 1, web.seeds()[0]] for p in paths]))
    d = ctx.frontier.dispatch(job_id, 0, max_urls=8, per_host=8, delay=0, lease_timeout=60, concurrency=8,
                              batch=2)
    tasks = d.batches()
    assert [len(entries) for _, entries in tasks] == [2, 2] and len({t for t, _ in tasks}) == 2
    pages, admitted = [], set()
    for token, entries in tasks:
        parsed, links = stages.parse_stage(ctx, job, token, stages.fetch_stage(ctx, job, token,
                                                                                   [e.encode() for e in entries]))
        pages += parsed
        for shard, batch in links.items():
            admitted |= set(stages.dedup_stage(ctx, job, stages.link_token(token, shard), batch))
    ctx.close()
    assert len({p.body_key for p in pages}) == 4
    assert {p.url: p.title for p in pages} == {web.url(0, p): f"Site 0 {p}" for p in ["/", *paths]}
    linked = {link for p in pages for link in p.outlinks}
    assert admitted == linked - {web.url(0, p) for p in ["/", *paths]}
