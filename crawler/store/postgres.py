"""PostgreSQL store, for crawls on many machines: the SQLite store's schema and idempotency
(one row per job and canonical URL; a fetch id already stored is not written again), batched
writes, and page ids from one database sequence, so they are unique across every worker.
Connections come from a checked pool (``pgpool``), so a restarted server is reconnected to, and a
server that is down gives ``StoreUnavailable`` for the caller to retry."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from psycopg.rows import dict_row

from crawler.store.base import (
    COLUMNS,
    CONTENT_TABLE_COLUMNS,
    ITEM_TABLE_COLUMNS,
    BeforeCommit,
    JobDefinition,
    PageRecord,
)
from crawler.store.pgpool import PgPool
from crawler.store.sql import POSTGRES, Sql, job_params, write_extras

SQL = Sql(POSTGRES)
# The same fetch delivered twice writes nothing the second time; RETURNING says which rows were.
_UPSERT = SQL.upsert_page + " WHERE pages.fetch_id IS DISTINCT FROM excluded.fetch_id RETURNING job_id, url"


class PostgresStore:
    def __init__(self, url: str) -> None:
        self.url = url
        self.pool = PgPool(url)
        with self.pool.connection() as conn, conn.transaction():
            # Workers starting together must not race each other's CREATE TABLE.
            conn.execute("SELECT pg_advisory_xact_lock(7243001)")
            for statement in SQL.schema:
                conn.execute(statement)
            have = {r[0] for r in conn.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = 'pages'")}
            for column in COLUMNS:
                if column not in have:
                    conn.execute(SQL.add_column(column))
            for statement in POSTGRES.indexes:
                conn.execute(statement)

    def put(self, records: Sequence[PageRecord], before_commit: BeforeCommit | None = None) -> list[PageRecord]:
        if not records:
            return []
        written: set[tuple[str, str]] = set()
        with self.pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
            cur.executemany(_UPSERT, [SQL.row_params(r) for r in records], returning=True)
            while True:
                written.update((row[0], row[1]) for row in cur.fetchall())
                if not cur.nextset():
                    break
            new = [r for r in records if (r.job_id, r.url) in written]
            write_extras(cur, SQL, new)
            if new and before_commit is not None:
                before_commit(new)
        return new

    def pages(self, job_id: str | None = None) -> Iterator[dict[str, Any]]:
        with self.pool.dedicated(row_factory=dict_row) as conn:
            yield from conn.execute(SQL.select_all("pages", "*", job_id), (job_id,) if job_id else ())

    def content(self, job_id: str | None = None) -> Iterator[dict[str, Any]]:
        with self.pool.dedicated(row_factory=dict_row) as conn:
            q = SQL.select_all("content", ", ".join(CONTENT_TABLE_COLUMNS), job_id)
            yield from conn.execute(q, (job_id,) if job_id else ())

    def items(self, job_id: str | None = None) -> Iterator[dict[str, Any]]:
        with self.pool.dedicated(row_factory=dict_row) as conn:
            q = SQL.select_all("items", ", ".join(ITEM_TABLE_COLUMNS), job_id)
            yield from conn.execute(q, (job_id,) if job_id else ())

    def previous(self, job_id: str, urls: Sequence[str]) -> dict[str, dict[str, Any]]:
        with self.pool.connection() as conn, conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
            cur.execute("SELECT * FROM pages WHERE job_id = %s AND url = ANY(%s)", (job_id, list(urls)))
            return {row["url"]: row for row in cur.fetchall()}

    def revisits(self, job_id: str) -> Iterator[tuple[str, int, float, str]]:
        with self.pool.dedicated() as conn, conn.cursor(name="revisits") as cur:
            cur.itersize = 5000
            cur.execute(SQL.revisits, (job_id,))
            yield from cur

    def dead_links(self, job_id: str) -> list[tuple[str, int, list[str]]]:
        with self.pool.dedicated() as conn:
            dead = conn.execute(SQL.dead, (job_id,)).fetchall()
            return [(url, status, [r for (r,) in conn.execute(SQL.linking, (job_id, url))]) for url, status in dead]

    def save_job(self, job: JobDefinition) -> None:
        with self.pool.connection() as conn, conn.transaction():
            conn.execute(SQL.save_job, job_params(job))

    def job(self, job_id: str) -> JobDefinition | None:
        with self.pool.connection() as conn, conn.transaction():
            row = conn.execute(SQL.job, (job_id,)).fetchone()
        if row is None:
            return None
        return JobDefinition(row[0], list(row[1]), dict(row[2]), row[3], row[4] or 0.0, row[5] or "")

    def spill_put(self, job_id: str, rows: Sequence[tuple[str, int, str]]) -> None:
        if not rows:
            return
        with self.pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
            cur.executemany(SQL.spill_put, [(job_id, h, q, e) for h, q, e in rows])

    def spill_take(self, job_id: str, host: str, after: int, limit: int) -> list[tuple[int, str]]:
        with self.pool.connection() as conn, conn.transaction():
            return [(int(q), str(e)) for q, e in conn.execute(SQL.spill_take, (job_id, host, after, limit))]

    def spill_drop(self, job_id: str, host: str, upto: int) -> None:
        with self.pool.connection() as conn, conn.transaction():
            conn.execute(SQL.spill_drop, (job_id, host, upto))

    def spill_clear(self, job_id: str) -> int:
        with self.pool.connection() as conn, conn.transaction():
            return int(conn.execute(SQL.spill_clear, (job_id,)).rowcount)

    def close(self) -> None:
        self.pool.close()
