"""Dead-shard takeover (every shard's hosts have runner-up shards that serve them while it is
down, so a dead node loses nothing): when every worker that ever served shard k has
been silent for ``takeover_after`` heartbeats, k is marked down in ``crawler.frontier.liveshards`` and its
hosts are served by their runner-up shards; when a worker of k is alive again, k is live again
and its hosts move back (``crawler.frontier.rebalance`` moves them either way).

Evidence is Celery's own heartbeats as ``crawler.state.nodes`` records them. Only silence after a
heartbeat counts: a shard no worker ever heartbeated for is not taken over, since a worker that
sends no heartbeats (``--without-heartbeat``) cannot be told from none, and nothing is taken over
unless some shard is alive to take it. Any dispatcher may decide; the change is one
compare-and-set on the record's epoch, so it is made once.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from redis import Redis

from crawler.frontier import liveshards
from crawler.frontier.liveshards import LiveSet
from crawler.state import nodes

ALIVE_BELOW = 2  # heartbeats missed: the same line as ``crawler.state.nodes.state`` draws


def missed(rec: dict[str, Any], now: float) -> float:
    """Heartbeats a node has missed (a node that shut down counts from when it did)."""
    return (now - float(rec["last"])) / float(rec["interval"])


def decide(records: Iterable[dict[str, Any]], down: dict[int, float], threshold: int,
           now: float) -> dict[int, float]:
    """The shards down after looking at the nodes' records: a shard stays down until a worker
    of it is alive; a shard goes down when every worker that served it missed ``threshold``
    heartbeats, provided some shard is alive to take it over."""
    served: set[int] = set()
    alive: set[int] = set()
    quiet: dict[int, bool] = {}
    for rec in records:
        m = missed(rec, now)
        live = not rec.get("offline") and m < ALIVE_BELOW
        for s in rec.get("shards", []):
            served.add(s)
            if live:
                alive.add(s)
            quiet[s] = quiet.get(s, True) and m >= threshold
    new = {s: t for s, t in down.items() if s not in alive}
    if alive:
        new.update({s: now for s in served if quiet[s] and s not in alive and s not in new})
    return new


@dataclass(frozen=True)
class Change:
    down: list[int]  # shards newly taken over
    up: list[int]  # shards live again
    live: LiveSet  # the record as this change left it


def check(redis: Redis, threshold: int, now: float | None = None) -> Change | None:
    """Decide from the heartbeats whether the live set changes, and make the change; None if it
    does not (or if another dispatcher made it first). ``threshold`` 0: never take over."""
    if threshold <= 0:
        return None
    now = time.time() if now is None else now
    live = liveshards.read(redis)
    records = nodes.records(redis)
    new = decide(records, live.down, threshold, now)
    if new.keys() == live.down.keys():
        return None
    if not liveshards.compare_and_set(redis, live, new, now=now, after=threshold):
        return None
    return Change(sorted(new.keys() - live.down.keys()), sorted(live.down.keys() - new.keys()),
                  LiveSet(live.epoch + 1, new, now, threshold))


def shard_states(redis: Redis, shards: int, now: float | None = None) -> list[dict[str, Any]]:
    """Per shard of a job: ``live``, ``down`` (taken over since ``since``) or ``unseen`` (no
    worker of it ever sent a heartbeat: not taken over, its hosts wait), with its nodes."""
    now = time.time() if now is None else now
    live = liveshards.read(redis)
    records = nodes.records(redis)
    out = []
    for s in range(shards):
        mine = sorted(r["node"] for r in records if s in r.get("shards", []))
        state = "down" if s in live.down else "live" if mine else "unseen"
        out.append({"shard": s, "state": state, "since": live.down.get(s), "after": live.after, "nodes": mine})
    return out


def describe(states: list[dict[str, Any]], heard_any: bool, none_heard: bool = True) -> list[str]:
    """One line per shard that is not simply live, for ``crawler nodes`` and ``status``; with
    ``none_heard``, one line when no worker has been heard from at all."""
    live = [str(st["shard"]) for st in states if st["state"] == "live"]
    lines = []
    for st in states:
        if st["state"] == "down":
            since = time.strftime("%H:%M:%S", time.localtime(st["since"]))
            lines.append(f"shard {st['shard']}: taken over since {since} (every worker silent for "
                         f"{st['after']}+ heartbeats); its hosts are served by their runner-up shards "
                         f"({','.join(live) or 'none live'}) until a worker of shard-{st['shard']} is back")
        elif st["state"] == "unseen" and heard_any:
            lines.append(f"shard {st['shard']}: no worker of it has ever sent a heartbeat; its hosts wait "
                         f"(start `celery -A crawler worker -Q shard-{st['shard']}`, or `crawler shards set`)")
    unseen = [str(st["shard"]) for st in states if st["state"] == "unseen"]
    if unseen and not heard_any and none_heard:
        # No worker at all, or none sending task events: one line, not one per shard.
        queues = ",".join(f"shard-{n}" for n in unseen)
        lines.append(f"no worker has sent a heartbeat yet: the job waits for one (start `celery -A crawler worker "
                     f"-Q {queues}`; workers send heartbeats while task events are on)")
    return lines
