"""PostgreSQL store, for crawls on many machines: the SQLite store's schema and idempotency
(one row per job and canonical URL; a fetch id already stored is not written again), batched
writes, and page ids from one database sequence, so they are unique across every worker.
Connections come from a checked pool (``pgpool``), so a restarted server is reconnected to, and a
server that is down gives ``StoreUnavailable`` for the caller to retry."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

from psycopg.rows import dict_row

from crawler.store.base import (
    COLUMNS,
    CONTENT_TABLE_COLUMNS,
    ITEM_TABLE_COLUMNS,
    JSON_COLUMNS,
    BeforeCommit,
    JobDefinition,
    PageRecord,
)
from crawler.store.pgpool import PgPool

_TYPES = {
    "url": "TEXT NOT NULL", "job_id": "TEXT NOT NULL", "fetch_id": "TEXT NOT NULL", "status": "INTEGER",
    "depth": "INTEGER", "fetched_at": "DOUBLE PRECISION", "content_length": "BIGINT", "outlinks": "JSONB",
    "redirects": "JSONB", "noindex": "BOOLEAN", "nofollow": "BOOLEAN", "cycle": "INTEGER",
    "changed_at": "DOUBLE PRECISION",
    "gone_cycle": "INTEGER", "revisit_interval": "DOUBLE PRECISION", "next_visit": "DOUBLE PRECISION",
}


def _type(column: str) -> str:
    return _TYPES.get(column, "TEXT")


SCHEMA = (
    "CREATE TABLE IF NOT EXISTS pages (id BIGSERIAL PRIMARY KEY, "
    + ", ".join(f"{c} {_type(c)}" for c in COLUMNS)
    + ", UNIQUE (job_id, url))"
)
JOBS_SCHEMA = ("CREATE TABLE IF NOT EXISTS jobs (id TEXT PRIMARY KEY, seeds JSONB NOT NULL, settings JSONB NOT NULL, "
               "created_at DOUBLE PRECISION NOT NULL, every DOUBLE PRECISION, cron TEXT)")
CONTENT_SCHEMA = ("CREATE TABLE IF NOT EXISTS content (id BIGSERIAL PRIMARY KEY, job_id TEXT NOT NULL, "
                  "url TEXT NOT NULL, format TEXT NOT NULL, text TEXT NOT NULL, title TEXT, author TEXT, date TEXT, "
                  "language TEXT, fetched_at DOUBLE PRECISION, UNIQUE (job_id, url))")
ITEMS_SCHEMA = ("CREATE TABLE IF NOT EXISTS items (id BIGSERIAL PRIMARY KEY, job_id TEXT NOT NULL, url TEXT NOT NULL, "
                "seq INTEGER NOT NULL, item JSONB NOT NULL, fetched_at DOUBLE PRECISION)")
FRONTIER_SCHEMA = ("CREATE TABLE IF NOT EXISTS frontier (job_id TEXT NOT NULL, host TEXT NOT NULL, "
                   "seq BIGINT NOT NULL, entry TEXT NOT NULL, PRIMARY KEY (job_id, host, seq))")
_INSERT_ITEM = (f"INSERT INTO items ({', '.join(ITEM_TABLE_COLUMNS)}) "
                f"VALUES (%(job_id)s, %(url)s, %(seq)s, %(item)s::jsonb, %(fetched_at)s)")

_VALUES = ", ".join(f"%({c})s::jsonb" if c in JSON_COLUMNS else f"%({c})s" for c in COLUMNS)
_UPSERT = (
    f"INSERT INTO pages ({', '.join(COLUMNS)}) VALUES ({_VALUES}) "
    f"ON CONFLICT (job_id, url) DO UPDATE SET "
    f"{', '.join(f'{c} = excluded.{c}' for c in COLUMNS if c not in ('url', 'job_id'))} "
    # The same fetch delivered twice writes nothing the second time.
    f"WHERE pages.fetch_id IS DISTINCT FROM excluded.fetch_id RETURNING job_id, url"
)

_UPSERT_CONTENT = (
    f"INSERT INTO content ({', '.join(CONTENT_TABLE_COLUMNS)}) "
    f"VALUES ({', '.join(f'%({c})s' for c in CONTENT_TABLE_COLUMNS)}) "
    f"ON CONFLICT (job_id, url) DO UPDATE SET "
    f"{', '.join(f'{c} = excluded.{c}' for c in CONTENT_TABLE_COLUMNS if c not in ('url', 'job_id'))}"
)


def _params(rec: PageRecord) -> dict[str, Any]:
    d = rec.to_dict()
    for c in JSON_COLUMNS:
        d[c] = json.dumps(d[c])
    return d


class PostgresStore:
    def __init__(self, url: str) -> None:
        self.url = url
        self.pool = PgPool(url)
        with self.pool.connection() as conn, conn.transaction():
            # Workers starting together must not race each other's CREATE TABLE.
            conn.execute("SELECT pg_advisory_xact_lock(7243001)")
            conn.execute(SCHEMA)
            conn.execute(JOBS_SCHEMA)
            conn.execute(CONTENT_SCHEMA)
            conn.execute(ITEMS_SCHEMA)
            conn.execute(FRONTIER_SCHEMA)
            conn.execute("CREATE INDEX IF NOT EXISTS items_job_url ON items (job_id, url)")
            conn.execute("CREATE INDEX IF NOT EXISTS pages_job_next ON pages (job_id, next_visit)")
            have = {r[0] for r in conn.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = 'pages'")}
            for column in COLUMNS:
                if column not in have:
                    conn.execute(f"ALTER TABLE pages ADD COLUMN {column} {_type(column).replace(' NOT NULL', '')}")

    def put(self, records: Sequence[PageRecord], before_commit: BeforeCommit | None = None) -> list[PageRecord]:
        if not records:
            return []
        written: set[tuple[str, str]] = set()
        with self.pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
            cur.executemany(_UPSERT, [_params(r) for r in records], returning=True)
            while True:
                written.update((row[0], row[1]) for row in cur.fetchall())
                if not cur.nextset():
                    break
            new = [r for r in records if (r.job_id, r.url) in written]
            texts = [row for r in new if (row := r.content_row()) is not None]
            if texts:
                cur.executemany(_UPSERT_CONTENT, texts)
            gone = [(r.job_id, r.url) for r in new if r.content_gone]
            if gone:
                cur.executemany("DELETE FROM content WHERE job_id = %s AND url = %s", gone)
            replaced = [r for r in new if r.items is not None]
            if replaced:
                cur.executemany("DELETE FROM items WHERE job_id = %s AND url = %s",
                                [(r.job_id, r.url) for r in replaced])
                rows = [row for r in replaced for row in r.item_rows()]
                if rows:
                    cur.executemany(_INSERT_ITEM, rows)
            if new and before_commit is not None:
                before_commit(new)
        return new

    def pages(self, job_id: str | None = None) -> Iterator[dict[str, Any]]:
        with self.pool.dedicated(row_factory=dict_row) as conn:
            q = "SELECT * FROM pages" + (" WHERE job_id = %s" if job_id else "") + " ORDER BY id"
            yield from conn.execute(q, (job_id,) if job_id else ())

    def content(self, job_id: str | None = None) -> Iterator[dict[str, Any]]:
        with self.pool.dedicated(row_factory=dict_row) as conn:
            q = (f"SELECT {', '.join(CONTENT_TABLE_COLUMNS)} FROM content" + (" WHERE job_id = %s" if job_id else "")
                 + " ORDER BY id")
            yield from conn.execute(q, (job_id,) if job_id else ())

    def items(self, job_id: str | None = None) -> Iterator[dict[str, Any]]:
        with self.pool.dedicated(row_factory=dict_row) as conn:
            q = (f"SELECT {', '.join(ITEM_TABLE_COLUMNS)} FROM items" + (" WHERE job_id = %s" if job_id else "")
                 + " ORDER BY id")
            yield from conn.execute(q, (job_id,) if job_id else ())

    def previous(self, job_id: str, urls: Sequence[str]) -> dict[str, dict[str, Any]]:
        with self.pool.connection() as conn, conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
            cur.execute("SELECT * FROM pages WHERE job_id = %s AND url = ANY(%s)", (job_id, list(urls)))
            return {row["url"]: row for row in cur.fetchall()}

    def revisits(self, job_id: str) -> Iterator[tuple[str, int, float]]:
        with self.pool.dedicated() as conn, conn.cursor(name="revisits") as cur:
            cur.itersize = 5000
            cur.execute("SELECT url, depth, COALESCE(next_visit, 0) FROM pages WHERE job_id = %s", (job_id,))
            yield from cur

    def dead_links(self, job_id: str) -> list[tuple[str, int, list[str]]]:
        with self.pool.dedicated() as conn:
            dead = conn.execute("SELECT url, status FROM pages WHERE job_id = %s AND status IN (404, 410) "
                                "ORDER BY url", (job_id,)).fetchall()
            out = []
            for url, status in dead:
                refs = [r for (r,) in conn.execute(
                    "SELECT DISTINCT p.url FROM pages p, jsonb_array_elements_text(p.outlinks) j "
                    "WHERE p.job_id = %s AND j = %s ORDER BY p.url", (job_id, url))]
                out.append((url, status, refs))
            return out

    def save_job(self, job: JobDefinition) -> None:
        with self.pool.connection() as conn, conn.transaction():
            conn.execute("INSERT INTO jobs (id, seeds, settings, created_at, every, cron) "
                              "VALUES (%s, %s::jsonb, %s::jsonb, %s, %s, %s) ON CONFLICT (id) DO NOTHING",
                              (job.id, json.dumps(job.seeds), json.dumps(job.settings), job.created_at, job.every,
                               job.cron))

    def job(self, job_id: str) -> JobDefinition | None:
        with self.pool.connection() as conn, conn.transaction():
            row = conn.execute("SELECT id, seeds, settings, created_at, every, cron FROM jobs WHERE id = %s",
                                    (job_id,)).fetchone()
        if row is None:
            return None
        return JobDefinition(row[0], list(row[1]), dict(row[2]), row[3], row[4] or 0.0, row[5] or "")

    def spill_put(self, job_id: str, rows: Sequence[tuple[str, int, str]]) -> None:
        if not rows:
            return
        with self.pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
            cur.executemany("INSERT INTO frontier (job_id, host, seq, entry) VALUES (%s, %s, %s, %s) "
                            "ON CONFLICT DO NOTHING", [(job_id, h, q, e) for h, q, e in rows])

    def spill_take(self, job_id: str, host: str, after: int, limit: int) -> list[tuple[int, str]]:
        with self.pool.connection() as conn, conn.transaction():
            return [(int(q), str(e)) for q, e in conn.execute(
                "SELECT seq, entry FROM frontier WHERE job_id = %s AND host = %s AND seq > %s ORDER BY seq LIMIT %s",
                (job_id, host, after, limit))]

    def spill_drop(self, job_id: str, host: str, upto: int) -> None:
        with self.pool.connection() as conn, conn.transaction():
            conn.execute("DELETE FROM frontier WHERE job_id = %s AND host = %s AND seq <= %s", (job_id, host, upto))

    def spill_clear(self, job_id: str) -> int:
        with self.pool.connection() as conn, conn.transaction():
            return int(conn.execute("DELETE FROM frontier WHERE job_id = %s", (job_id,)).rowcount)

    def close(self) -> None:
        self.pool.close()
