"""Where a job's hash tags fall on a Redis Cluster: chosen, not left to how their names hash.

A tag's slot is a hash of its name, so a name ``base.<n>`` can be found for any master in a few
tries (about one in as many as there are masters lands on each). ``spread`` picks, for tags a
job will use, the names that put them on the masters in turn. Names are chosen at submission,
from the masters then, and kept in the job's record for its life: a process reads them there,
never works them out again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import cast

from redis import Redis, RedisCluster

from crawler.state.conn import is_cluster_client

TRIES = 1000  # names tried per tag; a master missed by all of them keeps the base name


def spread(client: Redis, anchor: str, key_of: Callable[[str], str], bases: Sequence[str],
           first: int = 1) -> list[str]:
    """For each of ``bases`` in order, the name (``base``, or ``base.<n>`` with the first n that
    lands there) whose key (``key_of(name)``) puts it on the masters in turn, starting ``first``
    masters after the one holding ``anchor`` (a key). On one Redis, the bases as they are."""
    if not is_cluster_client(client):
        return list(bases)
    cluster = cast(RedisCluster, client)

    def master(key: str) -> str:
        return str(cluster.get_node_from_key(key).name)  # type: ignore[no-untyped-call]  # untyped in redis-py

    masters = sorted(str(node.name) for node in cluster.get_primaries())  # type: ignore[no-untyped-call]
    home = master(anchor)
    start = masters.index(home) + first if home in masters else 0
    names = []
    for i, base in enumerate(bases):
        want = masters[(start + i) % len(masters)]
        names.append(next((n for n in (base, *(f"{base}.{k}" for k in range(1, TRIES)))
                           if master(key_of(n)) == want), base))
    return names
