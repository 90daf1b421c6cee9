"""SQLite store: one file, WAL, safe for several worker processes writing at once."""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator, Sequence
from typing import Any

from crawler.store.base import (
    COLUMNS,
    CONTENT_TABLE_COLUMNS,
    ITEM_TABLE_COLUMNS,
    JSON_COLUMNS,
    BeforeCommit,
    JobDefinition,
    PageRecord,
)

SCHEMA = """
CREATE TABLE IF NOT EXISTS pages (
    id INTEGER PRIMARY KEY,
    url TEXT NOT NULL,
    job_id TEXT NOT NULL,
    fetch_id TEXT NOT NULL,
    final_url TEXT,
    status INTEGER,
    content_type TEXT,
    title TEXT,
    depth INTEGER,
    referrer TEXT,
    fetched_at REAL,
    content_length INTEGER,
    content_sha1 TEXT,
    outlinks TEXT,
    error TEXT,
    fetched_by TEXT,
    redirects TEXT,
    canonical TEXT,
    noindex INTEGER,
    nofollow INTEGER,
    simhash TEXT,
    near_duplicate_of TEXT,
    etag TEXT,
    last_modified TEXT,
    cycle INTEGER,
    changed_at REAL,
    gone_cycle INTEGER,
    revisit_interval REAL,
    next_visit REAL
);
CREATE INDEX IF NOT EXISTS pages_job ON pages (job_id);
CREATE UNIQUE INDEX IF NOT EXISTS pages_job_url ON pages (job_id, url);
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    seeds TEXT NOT NULL,
    settings TEXT NOT NULL,
    created_at REAL NOT NULL,
    every REAL,
    cron TEXT
);
CREATE TABLE IF NOT EXISTS content (
    id INTEGER PRIMARY KEY,
    job_id TEXT NOT NULL,
    url TEXT NOT NULL,
    format TEXT NOT NULL,
    text TEXT NOT NULL,
    title TEXT,
    author TEXT,
    date TEXT,
    language TEXT,
    fetched_at REAL
);
CREATE UNIQUE INDEX IF NOT EXISTS content_job_url ON content (job_id, url);
CREATE TABLE IF NOT EXISTS items (
    id INTEGER PRIMARY KEY,
    job_id TEXT NOT NULL,
    url TEXT NOT NULL,
    seq INTEGER NOT NULL,
    item TEXT NOT NULL,
    fetched_at REAL
);
CREATE INDEX IF NOT EXISTS items_job_url ON items (job_id, url);
CREATE TABLE IF NOT EXISTS frontier (
    job_id TEXT NOT NULL,
    host TEXT NOT NULL,
    seq INTEGER NOT NULL,
    entry TEXT NOT NULL,
    PRIMARY KEY (job_id, host, seq)
) WITHOUT ROWID;
"""

_INSERT = (
    f"INSERT INTO pages ({', '.join(COLUMNS)}) VALUES ({', '.join('?' for _ in COLUMNS)}) "
    f"ON CONFLICT(job_id, url) DO UPDATE SET "
    f"{', '.join(f'{c} = excluded.{c}' for c in COLUMNS if c not in ('url', 'job_id'))}"
)

_INSERT_CONTENT = (
    f"INSERT INTO content ({', '.join(CONTENT_TABLE_COLUMNS)}) "
    f"VALUES ({', '.join('?' for _ in CONTENT_TABLE_COLUMNS)}) "
    f"ON CONFLICT(job_id, url) DO UPDATE SET "
    f"{', '.join(f'{c} = excluded.{c}' for c in CONTENT_TABLE_COLUMNS if c not in ('url', 'job_id'))}"
)


def _decode(row: sqlite3.Row) -> dict[str, Any]:
    d = dict(row)
    for c in JSON_COLUMNS:
        d[c] = json.loads(d[c]) if d[c] else []
    d["noindex"] = bool(d["noindex"])
    d["nofollow"] = bool(d["nofollow"])
    return d


def _row(rec: PageRecord) -> tuple[Any, ...]:
    d = rec.to_dict()
    for c in JSON_COLUMNS:
        d[c] = json.dumps(d[c])
    d["noindex"] = int(d["noindex"])
    d["nofollow"] = int(d["nofollow"])
    return tuple(d[c] for c in COLUMNS)


class SQLiteStore:
    def __init__(self, path: str) -> None:
        self.path = path
        directory = os.path.dirname(os.path.abspath(path))
        os.makedirs(directory, exist_ok=True)
        # isolation_level=None: transactions are explicit, BEGIN IMMEDIATE takes the write lock
        # up front so two workers never deadlock upgrading a read lock.
        self.conn = sqlite3.connect(path, timeout=60, isolation_level=None, check_same_thread=False)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=NORMAL")
        self.conn.execute("PRAGMA busy_timeout=60000")
        self.conn.executescript(SCHEMA)
        # Databases made by an older version lack newer columns: add them.
        have = {row[1] for row in self.conn.execute("PRAGMA table_info(pages)")}
        for column in COLUMNS:
            if column not in have:
                self.conn.execute(f"ALTER TABLE pages ADD COLUMN {column}")

    def put(self, records: Sequence[PageRecord], before_commit: BeforeCommit | None = None) -> list[PageRecord]:
        if not records:
            return []
        cur = self.conn.cursor()
        cur.execute("BEGIN IMMEDIATE")
        try:
            stored: dict[tuple[str, str], str] = {}
            by_job: dict[str, list[str]] = {}
            for r in records:
                by_job.setdefault(r.job_id, []).append(r.url)
            # ``job_id = ? AND url IN (...)`` searches the (job_id, url) index; a row-value
            # ``(job_id, url) IN (VALUES ...)`` scanned the whole table on every store task, which
            # made the store's cost per page grow with the pages already stored (make bench-scale).
            for job_id, urls in by_job.items():
                for i in range(0, len(urls), 500):
                    chunk = urls[i : i + 500]
                    q = f"SELECT url, fetch_id FROM pages WHERE job_id = ? AND url IN ({','.join('?' * len(chunk))})"
                    stored.update(((job_id, u), f) for u, f in cur.execute(q, [job_id, *chunk]).fetchall())
            new = [r for r in records if stored.get((r.job_id, r.url)) != r.fetch_id]
            if new:
                if before_commit is not None:
                    before_commit(new)
                cur.executemany(_INSERT, [_row(r) for r in new])
                texts = [row for r in new if (row := r.content_row()) is not None]
                if texts:
                    cur.executemany(_INSERT_CONTENT, [tuple(t[c] for c in CONTENT_TABLE_COLUMNS) for t in texts])
                gone = [(r.job_id, r.url) for r in new if r.content_gone]
                if gone:
                    cur.executemany("DELETE FROM content WHERE job_id = ? AND url = ?", gone)
                replaced = [r for r in new if r.items is not None]
                if replaced:
                    cur.executemany("DELETE FROM items WHERE job_id = ? AND url = ?",
                                    [(r.job_id, r.url) for r in replaced])
                    cur.executemany(f"INSERT INTO items ({', '.join(ITEM_TABLE_COLUMNS)}) VALUES (?, ?, ?, ?, ?)",
                                    [tuple(row[c] for c in ITEM_TABLE_COLUMNS)
                                     for r in replaced for row in r.item_rows()])
            cur.execute("COMMIT")
            return new
        except BaseException:
            cur.execute("ROLLBACK")
            raise

    def pages(self, job_id: str | None = None) -> Iterator[dict[str, Any]]:
        conn = sqlite3.connect(self.path, timeout=60)
        conn.row_factory = sqlite3.Row
        try:
            q = "SELECT * FROM pages" + (" WHERE job_id = ?" if job_id else "") + " ORDER BY id"
            for row in conn.execute(q, (job_id,) if job_id else ()):
                yield _decode(row)
        finally:
            conn.close()

    def content(self, job_id: str | None = None) -> Iterator[dict[str, Any]]:
        conn = sqlite3.connect(self.path, timeout=60)
        conn.row_factory = sqlite3.Row
        try:
            q = (f"SELECT {', '.join(CONTENT_TABLE_COLUMNS)} FROM content" + (" WHERE job_id = ?" if job_id else "")
                 + " ORDER BY id")
            for row in conn.execute(q, (job_id,) if job_id else ()):
                yield dict(row)
        finally:
            conn.close()

    def items(self, job_id: str | None = None) -> Iterator[dict[str, Any]]:
        conn = sqlite3.connect(self.path, timeout=60)
        conn.row_factory = sqlite3.Row
        try:
            q = (f"SELECT {', '.join(ITEM_TABLE_COLUMNS)} FROM items" + (" WHERE job_id = ?" if job_id else "")
                 + " ORDER BY id")
            for row in conn.execute(q, (job_id,) if job_id else ()):
                yield {**dict(row), "item": json.loads(row["item"])}
        finally:
            conn.close()

    def previous(self, job_id: str, urls: Sequence[str]) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        cur = self.conn.cursor()
        cur.row_factory = sqlite3.Row
        for i in range(0, len(urls), 500):
            chunk = list(urls[i : i + 500])
            q = f"SELECT * FROM pages WHERE job_id = ? AND url IN ({','.join('?' * len(chunk))})"
            out.update((row["url"], _decode(row)) for row in cur.execute(q, [job_id, *chunk]))
        return out

    def revisits(self, job_id: str) -> Iterator[tuple[str, int, float]]:
        conn = sqlite3.connect(self.path, timeout=60)
        try:
            yield from conn.execute("SELECT url, depth, COALESCE(next_visit, 0) FROM pages WHERE job_id = ?",
                                    (job_id,))
        finally:
            conn.close()

    def dead_links(self, job_id: str) -> list[tuple[str, int, list[str]]]:
        conn = sqlite3.connect(self.path, timeout=60)
        try:
            dead = conn.execute("SELECT url, status FROM pages WHERE job_id = ? AND status IN (404, 410) "
                                "ORDER BY url", (job_id,)).fetchall()
            out = []
            for url, status in dead:
                refs = [r for (r,) in conn.execute(
                    "SELECT DISTINCT p.url FROM pages p, json_each(p.outlinks) j "
                    "WHERE p.job_id = ? AND j.value = ? ORDER BY p.url", (job_id, url))]
                out.append((url, status, refs))
            return out
        finally:
            conn.close()

    def save_job(self, job: JobDefinition) -> None:
        self.conn.execute("INSERT INTO jobs (id, seeds, settings, created_at, every, cron) VALUES (?, ?, ?, ?, ?, ?) "
                          "ON CONFLICT(id) DO NOTHING",
                          (job.id, json.dumps(job.seeds), json.dumps(job.settings), job.created_at, job.every,
                           job.cron))

    def job(self, job_id: str) -> JobDefinition | None:
        row = self.conn.execute("SELECT id, seeds, settings, created_at, every, cron FROM jobs WHERE id = ?",
                                (job_id,)).fetchone()
        if row is None:
            return None
        return JobDefinition(row[0], json.loads(row[1]), json.loads(row[2]), row[3], row[4] or 0.0, row[5] or "")

    def spill_put(self, job_id: str, rows: Sequence[tuple[str, int, str]]) -> None:
        if not rows:
            return
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            self.conn.executemany("INSERT INTO frontier (job_id, host, seq, entry) VALUES (?, ?, ?, ?) "
                                  "ON CONFLICT DO NOTHING", [(job_id, h, q, e) for h, q, e in rows])
            self.conn.execute("COMMIT")
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise

    def spill_take(self, job_id: str, host: str, after: int, limit: int) -> list[tuple[int, str]]:
        return [(int(q), str(e)) for q, e in self.conn.execute(
            "SELECT seq, entry FROM frontier WHERE job_id = ? AND host = ? AND seq > ? ORDER BY seq LIMIT ?",
            (job_id, host, after, limit))]

    def spill_drop(self, job_id: str, host: str, upto: int) -> None:
        self.conn.execute("DELETE FROM frontier WHERE job_id = ? AND host = ? AND seq <= ?", (job_id, host, upto))

    def spill_clear(self, job_id: str) -> int:
        return int(self.conn.execute("DELETE FROM frontier WHERE job_id = ?", (job_id,)).rowcount)

    def close(self) -> None:
        self.conn.close()
