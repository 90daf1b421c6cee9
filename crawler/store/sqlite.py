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
    StoreRefused,
)
from crawler.store.sql import SQLITE, Sql, job_params, write_extras

SQL = Sql(SQLITE)


def _decode(row: sqlite3.Row) -> dict[str, Any]:
    d = dict(row)
    for c in JSON_COLUMNS:
        d[c] = json.loads(d[c]) if d[c] else []
    d["noindex"] = bool(d["noindex"])
    d["nofollow"] = bool(d["nofollow"])
    return d


class SQLiteStore:
    def __init__(self, path: str) -> None:
        self.path = path
        directory = os.path.dirname(os.path.abspath(path))
        os.makedirs(directory, exist_ok=True)
        # isolation_level=None: transactions are explicit, BEGIN IMMEDIATE takes the write lock
        # up front so two workers never deadlock upgrading a read lock.
        self.conn = sqlite3.connect(path, timeout=60, isolation_level=None, check_same_thread=False)
        try:
            self.conn.execute("PRAGMA journal_mode=WAL")
        except sqlite3.OperationalError:
            self.conn.close()
            raise
        except sqlite3.DatabaseError as exc:  # not an SQLite file, or a damaged one: waiting will not help
            self.conn.close()
            raise StoreRefused(f"store {path}: {exc}") from None
        self.conn.execute("PRAGMA synchronous=NORMAL")
        self.conn.execute("PRAGMA busy_timeout=60000")
        for statement in SQL.schema:
            self.conn.execute(statement)
        # Databases made by an older version lack newer columns: add them.
        have = {row[1] for row in self.conn.execute("PRAGMA table_info(pages)")}
        for column in COLUMNS:
            if column not in have:
                self.conn.execute(SQL.add_column(column))
        for statement in SQLITE.indexes:
            self.conn.execute(statement)

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
                    q = SQL.pages_in(len(chunk), "url, fetch_id")
                    stored.update(((job_id, u), f) for u, f in cur.execute(q, [job_id, *chunk]).fetchall())
            new = [r for r in records if stored.get((r.job_id, r.url)) != r.fetch_id]
            if new:
                if before_commit is not None:
                    before_commit(new)
                cur.executemany(SQL.upsert_page, [SQL.row_params(r) for r in new])
                write_extras(cur, SQL, new)
            cur.execute("COMMIT")
            return new
        except BaseException:
            cur.execute("ROLLBACK")
            raise

    def pages(self, job_id: str | None = None) -> Iterator[dict[str, Any]]:
        conn = sqlite3.connect(self.path, timeout=60)
        conn.row_factory = sqlite3.Row
        try:
            for row in conn.execute(SQL.select_all("pages", "*", job_id), (job_id,) if job_id else ()):
                yield _decode(row)
        finally:
            conn.close()

    def content(self, job_id: str | None = None) -> Iterator[dict[str, Any]]:
        conn = sqlite3.connect(self.path, timeout=60)
        conn.row_factory = sqlite3.Row
        try:
            q = SQL.select_all("content", ", ".join(CONTENT_TABLE_COLUMNS), job_id)
            for row in conn.execute(q, (job_id,) if job_id else ()):
                yield dict(row)
        finally:
            conn.close()

    def items(self, job_id: str | None = None) -> Iterator[dict[str, Any]]:
        conn = sqlite3.connect(self.path, timeout=60)
        conn.row_factory = sqlite3.Row
        try:
            q = SQL.select_all("items", ", ".join(ITEM_TABLE_COLUMNS), job_id)
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
            out.update((row["url"], _decode(row)) for row in cur.execute(SQL.pages_in(len(chunk)), [job_id, *chunk]))
        return out

    def revisits(self, job_id: str) -> Iterator[tuple[str, int, float, str]]:
        conn = sqlite3.connect(self.path, timeout=60)
        try:
            yield from conn.execute(SQL.revisits, (job_id,))
        finally:
            conn.close()

    def dead_links(self, job_id: str) -> list[tuple[str, int, list[str]]]:
        conn = sqlite3.connect(self.path, timeout=60)
        try:
            dead = conn.execute(SQL.dead, (job_id,)).fetchall()
            return [(url, status, [r for (r,) in conn.execute(SQL.linking, (job_id, url))]) for url, status in dead]
        finally:
            conn.close()

    def save_job(self, job: JobDefinition) -> None:
        self.conn.execute(SQL.save_job, job_params(job))

    def job(self, job_id: str) -> JobDefinition | None:
        row = self.conn.execute(SQL.job, (job_id,)).fetchone()
        if row is None:
            return None
        return JobDefinition(row[0], json.loads(row[1]), json.loads(row[2]), row[3], row[4] or 0.0, row[5] or "")

    def spill_put(self, job_id: str, rows: Sequence[tuple[str, int, str]]) -> None:
        if not rows:
            return
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            self.conn.executemany(SQL.spill_put, [(job_id, h, q, e) for h, q, e in rows])
            self.conn.execute("COMMIT")
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise

    def spill_take(self, job_id: str, host: str, after: int, limit: int) -> list[tuple[int, str]]:
        return [(int(q), str(e)) for q, e in self.conn.execute(SQL.spill_take, (job_id, host, after, limit))]

    def spill_drop(self, job_id: str, host: str, upto: int) -> None:
        self.conn.execute(SQL.spill_drop, (job_id, host, upto))

    def spill_clear(self, job_id: str) -> int:
        return int(self.conn.execute(SQL.spill_clear, (job_id,)).rowcount)

    def close(self) -> None:
        self.conn.close()
