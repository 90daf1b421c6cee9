"""What the stages send each other, as typed values, and their JSON form in Celery messages.

A fetched page travels fetch -> parse -> store as a ``FetchedPage`` (its body stays in Redis,
under ``body_key``); the links of one page to one shard travel parse -> dedup as a
``LinkGroup``. Stages take and return these; only the task glue calls ``to_json`` and
``from_json``.

Every message carries its schema version (``"v"``). ``from_json`` refuses one with no version or
another version with ``BadMessage``, naming both: during a rolling upgrade a worker must not
read a message of another shape as if it were its own.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, TypeVar, cast

from crawler.frontier import Entry
from crawler.spiders.request import strip_mark

VERSION = 1

Header = tuple[str, str]
Redirect = tuple[int, str]


class BadMessage(ValueError):
    """A message this worker cannot read: another schema version, or not the shape it names."""


def _check_version(kind: str, got: Any) -> None:
    if got != VERSION:
        raise BadMessage(f"{kind} message has schema version {got!r}; this worker speaks version {VERSION}")


T = TypeVar("T")


@functools.cache
def _schema(cls: type[Any]) -> tuple[frozenset[str], tuple[str, ...]]:
    """A message class's field names and the required ones, worked out once: every page of
    every message is checked against them."""
    fs = fields(cls)
    return frozenset(f.name for f in fs), tuple(
        f.name for f in fs if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)


def _from_fields(cls: type[T], kind: str, data: Mapping[str, Any], tuples: Mapping[str, int]) -> T:
    """``cls`` from a decoded JSON object: unknown keys and missing required ones are refused;
    the JSON arrays of ``tuples`` (name -> nesting depth) become tuples again."""
    known, required = _schema(cast(type, cls))  # a class is hashable; an unbounded TypeVar cannot say so
    unknown = data.keys() - known - {"v"}
    if unknown:
        raise BadMessage(f"{kind} message has unknown fields {sorted(unknown)}")
    missing = [n for n in required if n not in data]
    if missing:
        raise BadMessage(f"{kind} message lacks fields {missing}")
    values = {k: v for k, v in data.items() if k != "v"}
    for name, depth in tuples.items():
        if name in values:
            values[name] = _tuples(values[name], depth, kind, name)
    return cls(**values)


def _tuples(value: Any, depth: int, kind: str, name: str) -> Any:
    if not isinstance(value, (list, tuple)):
        raise BadMessage(f"{kind} message field {name!r} is not a list")
    if depth == 1:
        return tuple(value)
    return tuple(_tuples(v, depth - 1, kind, name) for v in value)


@dataclass(frozen=True)
class FetchedPage:
    """One fetched (or never fetched) URL on its way to the store. The fetch stage fills the
    fetch fields; parse returns a copy (``dataclasses.replace``) with the parse fields set."""

    url: str
    depth: int = 0
    referrer: str = ""
    final_url: str = ""
    status: int | None = None
    http_version: str = "HTTP/1.1"
    # Headers travel only when WARC records are written: they are most of a message's bytes.
    headers: tuple[Header, ...] = ()
    request_headers: tuple[Header, ...] = ()
    error: str | None = None
    fetched_at: float = 0.0
    elapsed: float = 0.0
    redirects: tuple[Redirect, ...] = ()
    body_key: str = ""  # where the body waits in Redis; "" for none
    content_length: int = 0
    content_sha1: str = ""
    content_type: str = ""
    fetched_by: str = ""  # the node that fetched it; "" for a page never fetched
    attempts: int = 0
    etag: str = ""
    last_modified: str = ""
    cycle: int = 0
    cycle_base: float = 0.0
    not_modified: bool = False
    unchanged: bool = False  # the same bytes as the stored row: nothing to parse again
    # Set by parse.
    title: str = ""
    canonical: str | None = None
    noindex: bool = False
    nofollow: bool = False
    outlinks: tuple[str, ...] = ()
    simhash: int | None = None
    near_duplicate_of: str | None = None
    # Set by parse when the job extracts main text (``extract``): the format asked for, and if
    # the page has main text, the text and what the page says of itself (``main_text`` None
    # with a format: the page was looked at and has none). Optional with defaults, so messages
    # from workers without them still read as version 1.
    main_text: str | None = None
    main_format: str = ""
    main_title: str | None = None
    main_author: str | None = None
    main_date: str | None = None
    main_language: str | None = None
    # Set by parse when the job's spider looked at the page (``items_parsed``): what it yielded.
    # A page it did not look at (unchanged on a revisit, no spider) keeps its stored items.
    items: tuple[dict[str, Any], ...] = ()
    items_parsed: bool = False
    # Rendering (``crawler.stages.render``): ``render`` is ``wanted[:<selector>]`` on the way to
    # the render queue (``wanted?``: only if its host, still sampling, turns out to need it), then
    # what came of it (``rendered``, or the reason it was not); the DOM
    # the browser built waits in Redis under ``rendered_key`` for parse and the WARC.
    render: str = ""
    rendered_key: str = ""
    # Requests (``crawler.spiders.request``): ``request`` is the spec of the request this page
    # answers ("" for a plain link: a GET, parsed by ``parse``), read off its frontier entry;
    # ``requests`` (set by parse) the (key, spec) of the outlinks that are more than links,
    # stored with the page so ``crawler recover`` queues them with their callbacks and data.
    request: str = ""
    requests: tuple[tuple[str, str], ...] = ()

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict; fields at their defaults are left out (from_json puts them back)."""
        out: dict[str, Any] = {"v": VERSION}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.default is dataclasses.MISSING or value != f.default:
                out[f.name] = value
        return out

    @classmethod
    def from_json(cls, data: Any) -> FetchedPage:
        """Raises ``BadMessage`` for another schema version or a malformed page."""
        if not isinstance(data, dict):
            raise BadMessage(f"page message is a {type(data).__name__}, not an object")
        _check_version("page", data.get("v"))
        page = _from_fields(cls, "page", data, {"headers": 2, "request_headers": 2, "redirects": 2,
                                                "outlinks": 1, "items": 1, "requests": 2})
        if not isinstance(page.url, str) or not isinstance(page.depth, int) or not isinstance(page.body_key, str):
            raise BadMessage("page message has fields of the wrong type")
        return page


def failed_page(raw_entry: str, reason: str) -> FetchedPage:
    """A page that was never fetched, to be stored with its reason."""
    e = Entry.decode(raw_entry)
    return FetchedPage(url=e.url, depth=e.depth, referrer=e.referrer, final_url=strip_mark(e.url), error=reason,
                       fetched_at=time.time(), attempts=e.attempts, request=e.spec)


def pages_to_json(pages: Sequence[FetchedPage]) -> list[dict[str, Any]]:
    return [p.to_json() for p in pages]


def pages_from_json(data: Any) -> list[FetchedPage]:
    """The pages of a message: a list of pages. ``BadMessage`` if it is anything else."""
    if not isinstance(data, list):
        raise BadMessage(f"pages message is a {type(data).__name__}, not a list")
    return [FetchedPage.from_json(p) for p in data]


@dataclass(frozen=True)
class LinkGroup:
    """Links found on one page (``referrer``), all at ``depth``: its URL is sent once, not per
    link. A single link (as sitemaps and ``crawler recover`` send them) is a group of one."""

    referrer: str
    depth: int
    urls: tuple[str, ...]
    # (url, spec) of the urls that are requests with more than a URL to them (a callback, data, a
    # method, a body: ``crawler.spiders.request``); a url is then a request key (it may carry a
    # ``#~`` marker). Optional, so a group without it reads as version 1 still.
    specs: tuple[tuple[str, str], ...] = ()

    @classmethod
    def single(cls, url: str, depth: int, referrer: str, spec: str = "") -> LinkGroup:
        return cls(referrer, depth, (url,), ((url, spec),) if spec else ())

    def links(self) -> Iterator[tuple[str, int, str]]:
        """(url, depth, referrer) per link."""
        for url in self.urls:
            yield url, self.depth, self.referrer

    def to_json(self) -> dict[str, Any]:
        out = {"v": VERSION, "referrer": self.referrer, "depth": self.depth, "urls": list(self.urls)}
        if self.specs:
            out["specs"] = [list(p) for p in self.specs]
        return out

    @classmethod
    def from_json(cls, data: Any) -> LinkGroup:
        """A versioned group, or a bare link ``[url, depth, referrer]`` (sitemaps, ``recover``);
        ``BadMessage`` for anything else, including a group of another schema version."""
        if isinstance(data, (list, tuple)) and len(data) == 3 and isinstance(data[0], str) \
                and isinstance(data[1], int) and isinstance(data[2], str):
            return cls.single(data[0], data[1], data[2])
        if isinstance(data, (list, tuple)) and len(data) == 3 and isinstance(data[0], str) \
                and isinstance(data[1], int) and isinstance(data[2], list) \
                and all(isinstance(u, str) for u in data[2]):
            # [referrer, depth, [url, ...]]: a group as workers wrote them before versions. The
            # dispatcher re-sends batches parked in Redis by such a worker; refusing them would
            # hold their job open for ever after an upgrade, and their form is exactly known.
            return cls(data[0], data[1], tuple(data[2]))
        if not isinstance(data, dict):
            raise BadMessage(f"link group message has schema version None; this worker speaks version {VERSION}")
        _check_version("link group", data.get("v"))
        group = _from_fields(cls, "link group", data, {"urls": 1, "specs": 2})
        if not isinstance(group.referrer, str) or not isinstance(group.depth, int) \
                or not all(isinstance(u, str) for u in group.urls) \
                or not all(len(p) == 2 and isinstance(p[0], str) and isinstance(p[1], str) for p in group.specs):
            raise BadMessage("link group message has fields of the wrong type")
        return group


def groups_to_json(groups: Sequence[LinkGroup]) -> list[dict[str, Any]]:
    return [g.to_json() for g in groups]


def groups_from_json(data: Any) -> list[LinkGroup]:
    """The link groups of a message: a list. ``BadMessage`` if it is anything else."""
    if not isinstance(data, list):
        raise BadMessage(f"links message is a {type(data).__name__}, not a list")
    return [LinkGroup.from_json(g) for g in data]
