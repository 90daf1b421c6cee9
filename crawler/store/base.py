"""The store seam: ``PageStore.put(records)`` writes pages idempotently; backends by URL scheme."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Protocol

from crawler.config.redact import redact
from crawler.errors import ConfigError, StoreError


@dataclass
class ContentRecord:
    """A page's main text (``extract``), stored in the ``content`` table beside its page row:
    one row per job and URL, from the page's latest visit. An empty ``text`` (the page was looked
    at and has none) removes the row an earlier visit left."""

    format: str  # "text" or "markdown"
    text: str
    title: str | None = None
    author: str | None = None
    date: str | None = None  # YYYY-MM-DD
    language: str | None = None  # as the page declares it


@dataclass
class PageRecord:
    url: str
    job_id: str
    fetch_id: str  # the dispatch token: the same fetch delivered twice carries the same id
    final_url: str = ""
    status: int | None = None
    content_type: str = ""
    title: str = ""
    depth: int = 0
    referrer: str = ""
    fetched_at: float = 0.0
    content_length: int = 0
    content_sha1: str = ""
    outlinks: list[str] = field(default_factory=list)
    error: str | None = None
    fetched_by: str = ""
    redirects: list[list[Any]] = field(default_factory=list)
    canonical: str | None = None
    noindex: bool = False
    nofollow: bool = False  # <meta name=robots content=nofollow>: its outlinks are not followed
    simhash: str | None = None  # 64-bit simhash of the visible text, hex
    near_duplicate_of: str | None = None  # an earlier page of the job within the distance
    etag: str = ""  # validators sent back on the next visit (conditional GET)
    last_modified: str = ""
    cycle: int = 0  # the cycle of a periodic job that last visited the page
    changed_at: float = 0.0  # when the content was last seen to change
    gone_cycle: int | None = None  # the cycle in which a page that was there answered 404/410
    revisit_interval: float = 0.0  # seconds between visits, adapted to how often it changes
    next_visit: float = 0.0  # when the page is due again
    render: str = ""  # rendered in a browser (``rendered``...), the reason it could not be, or "" (not asked)
    # [key, spec] of the outlinks that are a spider's requests with more than a URL to them (a
    # callback, data, a method, a body: ``crawler.spiders.request``), so ``crawler recover``
    # queues them as they were asked for.
    requests: list[list[str]] = field(default_factory=list)
    # The spec of the request this page answers ("" for a plain GET), so a periodic job's revisit
    # fetches it as it was asked for and hands it to the same callback with the same data.
    request: str = ""
    # Not a column of ``pages``: the page's row in ``content``, written in the same transaction.
    content: ContentRecord | None = field(default=None, metadata={"column": False})
    # Not a column either: the page's rows in ``items``, what the job's spider yielded for this
    # visit. None: the spider did not look at the page (no spider, or unchanged since the last
    # visit), so its stored items stay; a list (even empty) replaces them.
    items: list[dict[str, Any]] | None = field(default=None, metadata={"column": False})

    def to_dict(self) -> dict[str, Any]:
        """The ``pages`` columns (the values themselves: ``asdict`` deep-copied every page's
        outlinks, items and text, 0.13 ms of a store task's CPU per page)."""
        return {c: getattr(self, c) for c in COLUMNS}

    def content_row(self) -> dict[str, Any] | None:
        """The ``content`` columns (``CONTENT_TABLE_COLUMNS``), or None when there is no text
        (see ``content_gone``)."""
        if self.content is None or not self.content.text:
            return None
        return {"job_id": self.job_id, "url": self.url, **asdict(self.content), "fetched_at": self.fetched_at}

    def item_rows(self) -> list[dict[str, Any]]:
        """The ``items`` rows (``ITEM_TABLE_COLUMNS``; ``item`` as JSON text) this visit writes."""
        return [{"job_id": self.job_id, "url": self.url, "seq": i, "item": json.dumps(item, ensure_ascii=False),
                 "fetched_at": self.fetched_at} for i, item in enumerate(self.items or ())]

    @property
    def content_gone(self) -> bool:
        """This visit looked for main text and found none: an older row in ``content`` goes."""
        return self.content is not None and not self.content.text


COLUMNS = [f.name for f in fields(PageRecord) if f.metadata.get("column", True)]
ITEM_TABLE_COLUMNS = ("job_id", "url", "seq", "item", "fetched_at")
CONTENT_TABLE_COLUMNS = ("job_id", "url", "format", "text", "title", "author", "date", "language", "fetched_at")
# What a visit that found the page unchanged (304, or the same bytes) keeps from the last one.
CONTENT_COLUMNS = ("final_url", "status", "content_type", "title", "content_length", "content_sha1", "outlinks",
                   "requests",
                   "canonical", "noindex", "nofollow", "simhash", "near_duplicate_of", "redirects", "changed_at")
JSON_COLUMNS = ("outlinks", "redirects", "requests")



@dataclass
class JobDefinition:
    """What a job was submitted with, kept in the store so it can be rebuilt on an empty Redis
    (``crawler.control.rebuild``). ``settings`` are the job settings every worker applies."""

    id: str
    seeds: list[str]
    settings: dict[str, Any]
    created_at: float
    every: float = 0.0
    cron: str = ""


BeforeCommit = Callable[[list[PageRecord]], None]


class PageRows(Protocol):
    """Pages, their main texts and items: what the store stage writes and exports read."""

    def put(self, records: Sequence[PageRecord], before_commit: BeforeCommit | None = None) -> list[PageRecord]:
        """Upsert pages by canonical URL. A record whose ``fetch_id`` is already stored for its
        URL is skipped, so a redelivered batch writes nothing twice. The ``content`` of each
        record written is upserted into the ``content`` table (by job and URL), or its row there
        deleted when it has no text, in the same transaction; so are its ``items`` when the spider
        looked at it (they replace the page's stored items). ``before_commit`` gets the
        records actually written, inside the transaction (the WARC is written there, so a crash
        can repeat WARC records but never lose them). Returns those records."""
        ...

    def pages(self, job_id: str | None = None) -> Iterator[dict[str, Any]]:
        """Every stored page as a dict of columns."""
        ...

    def content(self, job_id: str | None = None) -> Iterator[dict[str, Any]]:
        """Every stored main text (the ``content`` table) as a dict of columns."""
        ...

    def items(self, job_id: str | None = None) -> Iterator[dict[str, Any]]:
        """Every stored item (the ``items`` table) as a dict of its columns, ``item`` decoded, in
        the order pages were stored and items yielded."""
        ...

    def previous(self, job_id: str, urls: Sequence[str]) -> dict[str, dict[str, Any]]:
        """The stored rows of those URLs that have one, as dicts of columns."""
        ...

    def revisits(self, job_id: str) -> Iterator[tuple[str, int, float, str]]:
        """(url, depth, next_visit, request spec) of every page of the job, for the start of a
        cycle."""
        ...

    def dead_links(self, job_id: str) -> list[tuple[str, int, list[str]]]:
        """(url, status, pages of the job that link to it) for every 404 and 410."""
        ...


class JobRecords(Protocol):
    """Job definitions, so a job can be rebuilt on an empty Redis (``crawler.control.rebuild``)."""

    def save_job(self, job: JobDefinition) -> None:
        """Record a job's definition. Idempotent: saving an id that is recorded changes nothing."""
        ...

    def job(self, job_id: str) -> JobDefinition | None:
        """The recorded definition of a job, or None."""
        ...


class SpilledFrontier(Protocol):
    """The frontier table: URLs over their host's Redis queue cap wait here, in the order the
    host's sequence numbers give, until the host's queue runs low (``crawler.frontier.spill``)."""

    def spill_put(self, job_id: str, rows: Sequence[tuple[str, int, str]]) -> None:
        """Add (host, seq, entry) rows; a (job, host, seq) already there is left as it is, so a
        repeated write changes nothing."""
        ...

    def spill_take(self, job_id: str, host: str, after: int, limit: int) -> list[tuple[int, str]]:
        """Up to ``limit`` of the host's (seq, entry) rows after ``after``, in seq order."""
        ...

    def spill_drop(self, job_id: str, host: str, upto: int) -> None:
        """Delete the host's rows up to ``upto`` (they are back in Redis)."""
        ...

    def spill_clear(self, job_id: str) -> int:
        """Delete every row of the job (its frontier is being rebuilt). Returns how many."""
        ...


class PageStore(PageRows, JobRecords, SpilledFrontier, Protocol):
    """A store serves all three; a backend is opened by URL (``open_store``)."""

    def close(self) -> None: ...


class StoreURLError(StoreError, ConfigError):
    """The store URL cannot be used (no scheme, no file, unknown scheme). A ``ValueError``, as a
    configuration error is."""


class StoreRefused(StoreURLError):
    """This worker may not use the store: it is outside the worker's allowed places, or the
    server answered and said no (wrong or missing password, no such role or database). Unlike
    an outage, waiting will not help: the job is stopped with the reason."""


class StoreUnavailable(StoreError):
    """The store cannot take writes just now (the server is down or restarting, a connection was
    lost, a WARC file could not be written): nothing was committed, and the same call may be
    tried again later. Backends translate their transient errors into this, with a one-line
    message an operator can act on."""


def open_store(url: str, create: bool = True) -> PageStore:
    """``sqlite:///path/crawl.db`` (relative), ``sqlite:////abs/path``, or
    ``postgresql://user:password@host:5432/db``. ``create`` False: an SQLite file that is not
    there is an error, not a new empty store (what reads a store must not make one)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise StoreURLError(f"store URL {redact(url)!r} has no scheme (try sqlite:///path/crawl.db)")
    if scheme == "sqlite":
        from crawler.store.sqlite import SQLiteStore

        path = rest[1:] if rest.startswith("/") else rest
        if not path:
            raise StoreURLError(f"store URL {redact(url)!r} names no file")
        if not create and not os.path.isfile(path):
            raise StoreURLError(f"store {redact(url)}: no such file {path!r} (nothing was created)")
        return SQLiteStore(path)
    if scheme in ("postgresql", "postgres"):
        from crawler.store.postgres import PostgresStore

        return PostgresStore(url)
    raise StoreURLError(f"unknown store scheme {scheme!r} in {redact(url)!r} (known: sqlite, postgresql)")
