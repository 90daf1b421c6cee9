"""The Redis clients of the task queues: the state Redis itself unless ``broker_url`` names
brokers of their own (``crawler.config.brokers``: shard N's queue on broker N mod k).

Queues are Celery's business, but two things below the Celery layer touch them: the publisher of
task messages, and the frontier's rebalancing, which moves the messages of a shard that went away
to the queue of the shard taking over its hosts. Both ask here where a queue lives.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from redis import Redis

from crawler.config.brokers import Broker, broker_of_queue, parse_brokers
from crawler.state.conn import connect

_ENV = ("CRAWLER_BROKER_URL", "CRAWLER_REDIS_URL", "CRAWLER_SENTINEL_MASTER")
_cache: dict[tuple[object, ...], list[Redis]] = {}


def configured(env: Mapping[str, str] | None = None) -> tuple[Broker, ...]:
    """The brokers ``CRAWLER_BROKER_URL`` names; none when it is unset (the state Redis is the broker)."""
    env = os.environ if env is None else env
    spec = env.get("CRAWLER_BROKER_URL", "").strip()
    if not spec:
        return ()
    return parse_brokers(spec, "", env.get("CRAWLER_SENTINEL_MASTER", "") or "mymaster")


def connect_all(brokers: tuple[Broker, ...]) -> list[Redis]:
    """A client of each broker (a Sentinel-managed one's master by its own name)."""
    return [connect(b.url, sentinel_master=b.master or None) for b in brokers]


def clients(state: Redis) -> list[Redis]:
    """One client per broker, made once per process and environment; ``[state]`` when the state
    Redis is the broker (the caller's own client, so its database and connection are used)."""
    key = (os.getpid(), *(os.environ.get(v, "") for v in _ENV))
    if not key[1]:
        return [state]
    made = _cache.get(key)
    if made is None:
        made = _cache[key] = connect_all(configured())
    return made


def client_of(state: Redis, queue: str, own: int = 0) -> Redis:
    every = clients(state)
    return every[broker_of_queue(queue, len(every), own)]


def move_all(state: Redis, src: str, dst: str) -> int:
    """Move every message of queue ``src`` to the head of ``dst``, oldest first, as Celery would
    take them; how many moved. Between two brokers a message is popped, then pushed: one lost
    to a crash in between is a fetch whose leases expire or a link batch sent again when
    overdue (``crawler.frontier``), so it is late, never lost."""
    a, b = client_of(state, src), client_of(state, dst)
    moved = 0
    if a is b:
        while a.lmove(src, dst, "RIGHT", "LEFT") is not None:
            moved += 1
        return moved
    while (raw := a.rpop(src)) is not None:
        b.lpush(dst, raw)  # type: ignore[arg-type]  # RPOP without a count: one value, never a list
        moved += 1
    return moved
