"""Where a job may make a worker write: its SQLite file and WARC directory under the worker's
``store_root``, its PostgreSQL server among the worker's ``store_hosts``.

Both settings come from the worker's own environment (``CRAWLER_STORE_ROOT``,
``CRAWLER_STORE_HOSTS``), never from the job, so whoever can submit jobs cannot choose a path
on a worker's disk or a database host for it to connect to. Unset, anything goes (one user
submitting to their own workers, as before); ``make up`` sets both.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from urllib.parse import parse_qsl, unquote, urlsplit

from crawler.config.redact import redact
from crawler.store.base import StoreRefused


class StoreNotAllowed(StoreRefused):
    """The job names a store or WARC directory this worker may not use."""


def _under(path: str, root: str) -> str:
    """``path`` resolved (relative ones against ``root``; symlinks and ``..`` followed), if it
    lies under ``root``; else StoreNotAllowed."""
    real_root = os.path.realpath(root)
    real = os.path.realpath(os.path.join(real_root, path))
    if os.path.commonpath([real, real_root]) != real_root:
        raise StoreNotAllowed(f"{path!r} is outside this worker's store root {root!r} (CRAWLER_STORE_ROOT)")
    return real


def place_dir(path: str, root: str) -> str:
    """The WARC directory to use for ``path``."""
    return _under(path, root) if root else path


def sqlite_path(store_url: str) -> str | None:
    """The file path of an ``sqlite:///path`` store URL (``sqlite:////abs`` is absolute), or
    None for a store of another kind."""
    scheme, sep, rest = store_url.partition("://")
    if scheme != "sqlite" or not sep:
        return None
    return rest[1:] if rest.startswith("/") else rest


def default_warc_dir(store_url: str) -> str:
    """Where a job keeps its WARC files when it names no directory: ``warc/`` beside an SQLite
    store (relative if the store's path is); "" for a store with no directory of its own."""
    path = sqlite_path(store_url)
    return "" if path is None else os.path.join(os.path.dirname(path), "warc")


def _pg_hosts(url: str) -> list[str]:
    parts = urlsplit(url)
    hosts = []
    netloc = parts.netloc.rsplit("@", 1)[-1]
    for item in netloc.split(","):  # libpq takes host1:port1,host2:port2
        host = item[1:item.index("]")] if item.startswith("[") else item.rsplit(":", 1)[0]
        if host:
            hosts.append(unquote(host).lower())
    for key, value in parse_qsl(parts.query):
        if key.lower() in ("host", "hostaddr"):
            hosts += [h.strip().lower() for h in value.split(",") if h.strip()]
    return hosts


def place_store(url: str, root: str, hosts: Sequence[str]) -> str:
    """The URL to open for a job's store ``url``: an SQLite path resolved under ``root`` (a
    relative one against it), a PostgreSQL URL whose every host is in ``hosts``. Either check is
    off while its setting is empty. StoreNotAllowed says why not, in one line."""
    path = sqlite_path(url)
    if path is not None and root:
        return f"sqlite:///{_under(path, root)}"
    if url.partition("://")[0] in ("postgresql", "postgres") and hosts:
        allowed = {h.strip().lower() for h in hosts}
        bad = [h for h in _pg_hosts(url) if h not in allowed]
        if bad:
            raise StoreNotAllowed(f"store {redact(url)!r}: database host {bad[0]!r} is not in this worker's "
                                  f"CRAWLER_STORE_HOSTS ({', '.join(sorted(allowed))})")
    return url
