"""The store seam: ``Store.put(records)`` writes pages idempotently; backends by URL scheme."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol


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
    simhash: str | None = None  # 64-bit simhash of the visible text, hex
    near_duplicate_of: str | None = None  # an earlier page of the job within the distance

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


COLUMNS = [f for f in PageRecord.__dataclass_fields__]
JSON_COLUMNS = ("outlinks", "redirects")

BeforeCommit = Callable[[list[PageRecord]], None]


class Store(Protocol):
    def put(self, records: Sequence[PageRecord], before_commit: BeforeCommit | None = None) -> list[PageRecord]:
        """Upsert pages by canonical URL. A record whose ``fetch_id`` is already stored for its
        URL is skipped, so a redelivered batch writes nothing twice. ``before_commit`` gets the
        records actually written, inside the transaction (the WARC is written there, so a crash
        can repeat WARC records but never lose them). Returns those records."""
        ...

    def pages(self, job_id: str | None = None) -> Iterator[dict[str, Any]]:
        """Every stored page as a dict of columns."""
        ...

    def dead_links(self, job_id: str) -> list[tuple[str, int, list[str]]]:
        """(url, status, pages of the job that link to it) for every 404 and 410."""
        ...

    def close(self) -> None: ...


class StoreURLError(ValueError):
    pass


def open_store(url: str) -> Store:
    """``sqlite:///path/crawl.db`` (relative) or ``sqlite:////abs/path``; PostgreSQL joins here."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise StoreURLError(f"store URL {url!r} has no scheme (try sqlite:///path/crawl.db)")
    if scheme == "sqlite":
        from crawler.store.sqlite import SQLiteStore

        path = rest[1:] if rest.startswith("/") else rest
        if not path:
            raise StoreURLError(f"store URL {url!r} names no file")
        return SQLiteStore(path)
    raise StoreURLError(f"unknown store scheme {scheme!r} in {url!r} (known: sqlite)")
