"""Where the task queues live: the ``broker_url`` setting read as one or several brokers.

With one broker (the default: the crawler's own Redis, ``redis_url``) every queue is on it. With
``k`` brokers (``CRAWLER_BROKER_URL=redis://a:6379/0,redis://b:6379/0``) the queue of shard N is
on broker ``N mod k``, whatever the job's shard count, so broker load splits as the state does:

- ``shard-N`` (fetch, dedup, refill): on broker ``N mod k``, whoever sends it;
- ``shared`` (parse, store): on every broker; a message stays on the broker of the process that
  sends it, whose shard workers consume it there;
- ``render`` and any other queue: on the first broker (a render worker consumes it there).

A worker consumes from one broker (Celery keeps one broker connection per app): the broker of
the ``shard-N`` queues it is started with, which must therefore all share one; a worker of no
shard queue uses the first. Pure: no I/O, so the frontier, the Celery glue and the tests share it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlsplit

from crawler.config.redact import redact
from crawler.errors import ConfigError

SCHEMES = ("redis", "rediss", "unix", "sentinel")
_SHARED = "shared"  # crawler.frontier.sharding.SHARED_QUEUE (a layer above this one)


class BrokerError(ConfigError):
    """The broker setting, or a worker's queues against it, cannot work: one line saying why."""


@dataclass(frozen=True)
class Broker:
    """One broker: ``url`` as kombu reads it, and for a Redis under Sentinel the name of its
    master (from a ``#name`` ending, else the ``sentinel_master`` setting); "" for a plain one."""

    url: str
    master: str = ""

    @property
    def sentinel(self) -> bool:
        return self.url.startswith("sentinel://")


def _shard(queue: str) -> int | None:
    prefix, _, num = queue.partition("-")
    return int(num) if prefix == "shard" and num.isdigit() else None


def redis_database_problem(url: str) -> str:
    """Why the database number of a ``redis://``, ``rediss://`` or ``unix://`` URL (its path, or
    ``?db=``) cannot be used, or "": redis-py takes any text and Celery's workers then die on it.
    Never quotes what could be part of a password."""
    scheme, _, _ = url.partition("://")
    if scheme not in ("redis", "rediss", "unix"):
        return ""
    parts = urlsplit(url)
    if "@" in parts.path + parts.query + parts.fragment:
        # What looks like a path is the rest of a password: it must not be shown.
        return "its user name or password holds / ? # or @, which must be percent-encoded (%2F %3F %23 %40)"
    found = [("path", parts.path.strip("/"))] if parts.path.strip("/") and scheme != "unix" else []
    found += [("db=", v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k == "db"]
    for where, raw in found:
        if not (raw.isascii() and raw.isdigit()):
            return f"its database ({where} {raw!r}) must be a number, as in redis://host:6379/0"
    return ""


def parse_brokers(spec: str, default: str, sentinel_master: str = "mymaster") -> tuple[Broker, ...]:
    """The brokers ``spec`` names (comma-separated), or ``default`` alone when it is empty.
    A Sentinel-managed broker is ``sentinel://h1:26379;sentinel://h2:26379/0``, optionally
    ending in ``#master-name``. BrokerError, one line, for anything else."""
    parts = [p.strip() for p in spec.split(",")] if spec.strip() else [default]
    out: list[Broker] = []
    for part in parts:
        if not part:
            raise BrokerError(f"broker list {redact(spec)!r} has an empty entry")
        url, hashmark, master = part.partition("#")
        scheme, sep, _ = url.partition("://")
        if not sep:
            raise BrokerError(f"broker {redact(part)!r} has no scheme (try redis://host:6379/0)")
        if scheme not in SCHEMES:
            raise BrokerError(f"broker {redact(part)!r} must be a {' or '.join(s + '://' for s in SCHEMES)} URL")
        if scheme == "sentinel":
            for sentinel in url.split(";"):
                s_scheme, _, rest = sentinel.strip().partition("://")
                if s_scheme != "sentinel" or not rest.split("/")[0].rpartition("@")[2]:
                    raise BrokerError(f"broker {redact(part)!r}: {redact(sentinel.strip())!r} "
                                      "is not a sentinel://host:port URL")
            if hashmark and not master:
                raise BrokerError(f"broker {redact(part)!r} ends in '#' without a master name")
            out.append(Broker(url, master or sentinel_master))
        else:
            if hashmark:
                raise BrokerError(f"broker {redact(part)!r}: only a sentinel:// broker takes a #master-name")
            if problem := redis_database_problem(url):
                raise BrokerError(f"broker {len(out) + 1} of the list: {problem}")
            out.append(Broker(url))
    seen: set[str] = set()
    for b in out:
        if b.url in seen:
            raise BrokerError(f"broker {redact(b.url)!r} is named twice (each broker once)")
        seen.add(b.url)
    return tuple(out)


def broker_of_shard(shard: int, brokers: int) -> int:
    """The broker (index) that holds the queue of ``shard``."""
    return shard % brokers


def broker_of_queue(queue: str, brokers: int, own: int = 0) -> int:
    """The broker a message for ``queue`` goes to, sent by a process whose broker is ``own``."""
    shard = _shard(queue)
    if shard is not None:
        return broker_of_shard(shard, brokers)
    return own if queue == _SHARED else 0


def worker_broker(queues: Iterable[str], brokers: tuple[Broker, ...]) -> int:
    """The broker a worker consuming ``queues`` reads from: that of its ``shard-N`` queues (the
    first broker for a worker of none). BrokerError if its shard queues are on different brokers,
    or if it consumes a queue of the first broker (``render``) besides shard queues of another."""
    queues = list(queues)
    shards = sorted({s for s in (_shard(q) for q in queues) if s is not None})
    where = {broker_of_shard(s, len(brokers)) for s in shards}
    if len(where) > 1:
        groups = "; ".join(
            f"broker {i} ({redact(brokers[i].url)}): " + ",".join(f"shard-{s}" for s in shards
                                                                     if broker_of_shard(s, len(brokers)) == i)
            for i in sorted(where))
        raise BrokerError(f"one worker's shard queues must share a broker (shard N is on broker N mod "
                          f"{len(brokers)}), but these are on {len(where)}: {groups}")
    chosen = where.pop() if where else 0
    others = sorted({q for q in queues if _shard(q) is None and q != _SHARED})
    if others and chosen != 0:
        raise BrokerError(f"queue {others[0]} is on the first broker, but this worker's shard queues are on "
                          f"broker {chosen} ({redact(brokers[chosen].url)}): start a worker of its own for it")
    return chosen
