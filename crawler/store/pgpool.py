"""A small pool of PostgreSQL connections that survives a server restart.

Each connection is checked (an empty query) before it is handed out, so one left dead by a
restart or an outage is replaced instead of failing the next write; a connection that fails
during use is closed, never returned. Connection and server errors come out as
``StoreUnavailable``: the caller's transaction did not commit and may be tried again.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

from crawler.store.base import StoreRefused, StoreUnavailable

CONNECT_TIMEOUT = 5  # seconds; a server that does not answer sooner counts as down
# Notice a server that vanished without closing (a host or network gone) within about 30 s
# instead of the kernel's two hours; local sockets ignore these. Typed Any: these are libpq
# parameters for connect()'s **kwargs, not its typed keywords (row_factory, context...).
_TCP: dict[str, Any] = {"keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 5, "keepalives_count": 3,
                        "tcp_user_timeout": 30_000}
TRANSIENT = (psycopg.OperationalError, psycopg.InterfaceError)
# The server answered and said no (or libpq had no password to offer it); waiting will not change
# it. libpq gives no SQLSTATE for a failed connection, only its message.
_REFUSED = re.compile(r"password authentication failed|no password supplied|role \S+ does not exist"
                      r"|database \S+ does not exist|no pg_hba\.conf entry")


def describe(exc: BaseException) -> str:
    """One line for logs and ``status``: libpq's messages run over several."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:300]


class PgPool:
    def __init__(self, url: str, *, max_idle: int = 4) -> None:
        self.url = url
        self.max_idle = max_idle
        self._idle: list[psycopg.Connection[Any]] = []
        self._lock = threading.Lock()

    def _connect(self, autocommit: bool = True, **options: Any) -> psycopg.Connection[Any]:
        try:
            # autocommit: transactions are explicit (``conn.transaction()``), and the check's
            # empty query must not leave one open.
            return psycopg.connect(self.url, autocommit=autocommit, connect_timeout=CONNECT_TIMEOUT, **_TCP,
                                   **options)
        except TRANSIENT as exc:
            if _REFUSED.search(str(exc)):
                raise StoreRefused(f"postgresql refused this worker: {describe(exc)}") from exc
            raise StoreUnavailable(f"postgresql: cannot connect: {describe(exc)}") from exc

    @staticmethod
    def _alive(conn: psycopg.Connection[Any]) -> bool:
        if conn.closed or conn.broken:
            return False
        try:
            conn.execute("")
            return True
        except TRANSIENT:
            return False

    def _take(self) -> psycopg.Connection[Any]:
        while True:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                return self._connect()
            if self._alive(conn):
                return conn
            conn.close()

    def _give(self, conn: psycopg.Connection[Any]) -> None:
        if conn.closed or conn.broken:
            conn.close()
            return
        with self._lock:
            if len(self._idle) < self.max_idle:
                self._idle.append(conn)
                return
        conn.close()

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A checked connection for one unit of work, back to the pool afterwards."""
        conn = self._take()
        try:
            yield conn
        except TRANSIENT as exc:
            conn.close()
            raise StoreUnavailable(f"postgresql: {describe(exc)}") from exc
        except BaseException:
            self._give(conn)
            raise
        self._give(conn)

    @contextmanager
    def dedicated(self, **options: Any) -> Iterator[psycopg.Connection[Any]]:
        """A connection of its own, with the pool's timeouts and error translation, for a long
        read (a server-side cursor wants a transaction of its own); closed afterwards."""
        conn = self._connect(autocommit=False, **options)
        try:
            with conn:
                yield conn
        except TRANSIENT as exc:
            raise StoreUnavailable(f"postgresql: {describe(exc)}") from exc
        finally:
            conn.close()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()
