"""The SQL both relational stores run, written once: tables, upserts and reads, over a small
``Dialect`` that holds what SQLite and PostgreSQL spell differently (placeholders, column types,
JSON values and their elements, the id column). The backends keep only what really differs:
how they connect, and how they learn which rows an upsert wrote.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from crawler.store.base import (
    COLUMNS,
    CONTENT_TABLE_COLUMNS,
    ITEM_TABLE_COLUMNS,
    JSON_COLUMNS,
    JobDefinition,
    PageRecord,
)

# The pages columns by kind (everything else is text); each dialect names the SQL type.
_KINDS = {
    "url": "key", "job_id": "key", "fetch_id": "key", "status": "int", "depth": "int", "fetched_at": "float",
    "content_length": "bigint", "outlinks": "json", "redirects": "json", "requests": "json",
    "noindex": "bool", "nofollow": "bool",
    "cycle": "int", "changed_at": "float", "gone_cycle": "int", "revisit_interval": "float", "next_visit": "float",
}


@dataclass(frozen=True)
class Dialect:
    """What one database spells its own way."""

    placeholder: str  # a positional parameter
    types: dict[str, str]  # kind -> column type: key, int, bigint, float, text, json, bool
    id_column: str  # the row id that keeps insertion order
    frontier_options: str = ""  # after the frontier table's definition
    # UNIQUE (job_id, url) of pages and content in their CREATE TABLE (False: a unique index,
    # which also brings a table an older version made up to date)
    unique_in_table: bool = True
    indexes: tuple[str, ...] = ()  # made after the columns are brought up to date
    json_value: Callable[[str], str] = field(default=lambda p: p)  # a JSON parameter as written
    # FROM-clause item and value expression for the elements of a page's outlinks array (alias j)
    outlink_elements: str = ""
    outlink_value: str = ""

    def type_of(self, column: str) -> str:
        return self.types[_KINDS.get(column, "text")]

    def params(self, n: int) -> str:
        return ", ".join([self.placeholder] * n)


SQLITE = Dialect(
    placeholder="?",
    types={"key": "TEXT NOT NULL", "int": "INTEGER", "bigint": "INTEGER", "float": "REAL", "text": "TEXT",
           "json": "TEXT", "bool": "INTEGER"},
    id_column="id INTEGER PRIMARY KEY",
    frontier_options=" WITHOUT ROWID",  # the primary key is the table: no second b-tree
    unique_in_table=False,
    indexes=("CREATE INDEX IF NOT EXISTS pages_job ON pages (job_id)",
             "CREATE UNIQUE INDEX IF NOT EXISTS pages_job_url ON pages (job_id, url)",
             "CREATE UNIQUE INDEX IF NOT EXISTS content_job_url ON content (job_id, url)",
             "CREATE INDEX IF NOT EXISTS items_job_url ON items (job_id, url)"),
    outlink_elements="json_each(p.outlinks) j", outlink_value="j.value",
)

POSTGRES = Dialect(
    placeholder="%s",
    types={"key": "TEXT NOT NULL", "int": "INTEGER", "bigint": "BIGINT", "float": "DOUBLE PRECISION", "text": "TEXT",
           "json": "JSONB", "bool": "BOOLEAN"},
    id_column="id BIGSERIAL PRIMARY KEY",
    json_value=lambda p: f"{p}::jsonb",
    indexes=("CREATE INDEX IF NOT EXISTS items_job_url ON items (job_id, url)",
             "CREATE INDEX IF NOT EXISTS pages_job_next ON pages (job_id, next_visit)"),
    outlink_elements="jsonb_array_elements_text(p.outlinks) j", outlink_value="j",
)


def _upsert(table: str, columns: tuple[str, ...] | list[str], values: str) -> str:
    updates = ", ".join(f"{c} = excluded.{c}" for c in columns if c not in ("url", "job_id"))
    return (f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({values}) "
            f"ON CONFLICT (job_id, url) DO UPDATE SET {updates}")


class Sql:
    """Every statement of the stores, in one dialect."""

    def __init__(self, d: Dialect) -> None:
        self.dialect = d
        p = d.placeholder
        t = d.type_of
        unique = ", UNIQUE (job_id, url)" if d.unique_in_table else ""
        self.schema = [
            f"CREATE TABLE IF NOT EXISTS pages ({d.id_column}, {', '.join(f'{c} {t(c)}' for c in COLUMNS)}{unique})",
            f"CREATE TABLE IF NOT EXISTS jobs (id TEXT PRIMARY KEY, seeds {d.types['json']} NOT NULL, "
            f"settings {d.types['json']} NOT NULL, created_at {d.types['float']} NOT NULL, every {d.types['float']}, "
            "cron TEXT)",
            f"CREATE TABLE IF NOT EXISTS content ({d.id_column}, job_id TEXT NOT NULL, url TEXT NOT NULL, "
            "format TEXT NOT NULL, text TEXT NOT NULL, title TEXT, author TEXT, date TEXT, language TEXT, "
            f"fetched_at {d.types['float']}{unique})",
            f"CREATE TABLE IF NOT EXISTS items ({d.id_column}, job_id TEXT NOT NULL, url TEXT NOT NULL, "
            f"seq INTEGER NOT NULL, item {d.types['json']} NOT NULL, fetched_at {d.types['float']})",
            f"CREATE TABLE IF NOT EXISTS frontier (job_id TEXT NOT NULL, host TEXT NOT NULL, "
            f"seq {d.types['bigint']} NOT NULL, entry TEXT NOT NULL, PRIMARY KEY (job_id, host, seq))"
            + d.frontier_options,
        ]
        # Positional, in COLUMNS order: rows are tuples (``row_params``).
        self.upsert_page = _upsert("pages", COLUMNS, ", ".join(d.json_value(p) if c in JSON_COLUMNS else p
                                                                for c in COLUMNS))
        self.upsert_content = _upsert("content", CONTENT_TABLE_COLUMNS, d.params(len(CONTENT_TABLE_COLUMNS)))
        self.delete_content = f"DELETE FROM content WHERE job_id = {p} AND url = {p}"
        self.delete_items = f"DELETE FROM items WHERE job_id = {p} AND url = {p}"
        item_values = ", ".join(d.json_value(p) if c == "item" else p for c in ITEM_TABLE_COLUMNS)
        self.insert_item = f"INSERT INTO items ({', '.join(ITEM_TABLE_COLUMNS)}) VALUES ({item_values})"
        self.revisits = (f"SELECT url, depth, COALESCE(next_visit, 0), COALESCE(request, '') FROM pages "
                         f"WHERE job_id = {p}")
        self.dead = (f"SELECT url, status FROM pages WHERE job_id = {p} AND status IN (404, 410) ORDER BY url")
        self.linking = (f"SELECT DISTINCT p.url FROM pages p, {d.outlink_elements} "
                        f"WHERE p.job_id = {p} AND {d.outlink_value} = {p} ORDER BY p.url")
        self.save_job = (f"INSERT INTO jobs (id, seeds, settings, created_at, every, cron) VALUES "
                         f"({p}, {d.json_value(p)}, {d.json_value(p)}, {p}, {p}, {p}) ON CONFLICT (id) DO NOTHING")
        self.job = f"SELECT id, seeds, settings, created_at, every, cron FROM jobs WHERE id = {p}"
        self.spill_put = (f"INSERT INTO frontier (job_id, host, seq, entry) VALUES ({d.params(4)}) "
                          "ON CONFLICT DO NOTHING")
        self.spill_take = (f"SELECT seq, entry FROM frontier WHERE job_id = {p} AND host = {p} AND seq > {p} "
                           f"ORDER BY seq LIMIT {p}")
        self.spill_drop = f"DELETE FROM frontier WHERE job_id = {p} AND host = {p} AND seq <= {p}"
        self.spill_clear = f"DELETE FROM frontier WHERE job_id = {p}"

    @staticmethod
    def row_params(rec: PageRecord) -> tuple[Any, ...]:
        """A record as ``upsert_page``'s parameters (JSON columns as text; both drivers take a
        bool as the column's value)."""
        d = rec.to_dict()
        for c in JSON_COLUMNS:
            d[c] = json.dumps(d[c])
        return tuple(d[c] for c in COLUMNS)

    @staticmethod
    def content_params(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
        return [tuple(row[c] for c in CONTENT_TABLE_COLUMNS) for row in rows]

    @staticmethod
    def item_params(records: list[PageRecord]) -> list[tuple[Any, ...]]:
        return [tuple(row[c] for c in ITEM_TABLE_COLUMNS) for r in records for row in r.item_rows()]

    def add_column(self, column: str) -> str:
        """Brings a pages table made by an older version up to date."""
        return f"ALTER TABLE pages ADD COLUMN {column} {self.dialect.type_of(column).replace(' NOT NULL', '')}"

    def select_all(self, table: str, columns: str, job_id: str | None) -> str:
        """Every row of ``table`` (of one job, if given), in the order they were written."""
        where = f" WHERE job_id = {self.dialect.placeholder}" if job_id else ""
        return f"SELECT {columns} FROM {table}{where} ORDER BY id"

    def pages_in(self, n: int, columns: str = "*") -> str:
        """The rows of one job whose URL is one of ``n`` (the (job_id, url) index answers it)."""
        p = self.dialect.placeholder
        return f"SELECT {columns} FROM pages WHERE job_id = {p} AND url IN ({self.dialect.params(n)})"


class Cursor(Protocol):
    def executemany(self, query: Any, params_seq: Any, /) -> Any: ...


def write_extras(cur: Cursor, sql: Sql, written: list[PageRecord]) -> None:
    """In the transaction that wrote ``written``: their main texts (upserted, or removed when a
    visit found none) and the items of those a spider looked at (replacing the stored ones)."""
    texts = [row for r in written if (row := r.content_row()) is not None]
    if texts:
        cur.executemany(sql.upsert_content, sql.content_params(texts))
    gone = [(r.job_id, r.url) for r in written if r.content_gone]
    if gone:
        cur.executemany(sql.delete_content, gone)
    replaced = [r for r in written if r.items is not None]
    if replaced:
        cur.executemany(sql.delete_items, [(r.job_id, r.url) for r in replaced])
        rows = sql.item_params(replaced)
        if rows:
            cur.executemany(sql.insert_item, rows)


def job_params(job: JobDefinition) -> tuple[Any, ...]:
    return job.id, json.dumps(job.seeds), json.dumps(job.settings), job.created_at, job.every, job.cron
