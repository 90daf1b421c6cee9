"""Node status from Celery's own heartbeats: every ``worker-heartbeat`` event a worker sends
(every 2 s while events are on) also leaves its latest figures in Redis (``c:nodes``), so
``crawler nodes`` can show workers that are silent or gone, not only the ones that answer now.
No second heartbeat: this rides on Celery's ``heartbeat_sent`` signal and its timer (the handler
is in ``crawler.celeryapp.signals``).
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from redis import Redis

from crawler.state import keys

GONE_AFTER = 30  # heartbeats missed before a silent node counts as gone
# In a node's record: its fetch stage takes a host's run of URLs (``Frontier.dispatch``'s
# ``run``) one after another. A worker from before runs would fetch only the run's last URL, its
# others coming back, an attempt spent, when their leases expire.
RUNS = "runs"


def record_heartbeat(client: Redis, node: str, *, shards: list[int], interval: float,
                     now: float | None = None, render: bool = False) -> dict[str, Any]:
    """``render``: the node consumes the render queue."""
    now = time.time() if now is None else now
    raw, fetched = client.hget(keys.NODES, node), client.hget(keys.NODE_FETCHED, node)
    prev = json.loads(raw) if raw else {}
    fetched_n = int(fetched or 0)
    rate = 0.0
    if prev and not prev.get("offline") and now > prev["last"]:
        rate = max(0.0, (fetched_n - prev["fetched"]) / (now - prev["last"]))
    rec = {"node": node, "pid": os.getpid(), "shards": shards, "render": render, "last": now, "interval": interval,
           "fetched": fetched_n, "pages_per_s": round(rate, 2), "started": prev.get("started", now)
           if not prev.get("offline") else now, "offline": False, RUNS: True}
    client.hset(keys.NODES, node, json.dumps(rec))
    return rec


def count_fetched(client: Redis | Any, node: str, pages: int) -> None:
    """Add to the pages a node has fetched (``client`` may be a pipeline)."""
    if pages:
        client.hincrby(keys.NODE_FETCHED, node, pages)


def mark_offline(client: Redis, node: str) -> None:
    raw = client.hget(keys.NODES, node)
    if raw:
        rec = json.loads(raw)
        rec.update(offline=True, last=time.time(), pages_per_s=0.0)
        client.hset(keys.NODES, node, json.dumps(rec))


def state(rec: dict[str, Any], now: float) -> str:
    """alive, silent for N heartbeats, or gone (shut down, or silent GONE_AFTER heartbeats)."""
    if rec.get("offline"):
        return "gone"
    missed = int((now - rec["last"]) / rec["interval"])
    if missed < 2:
        return "alive"
    if missed >= GONE_AFTER:
        return "gone"
    return f"silent for {missed} heartbeats"


def records(client: Redis) -> list[dict[str, Any]]:
    """Every node's latest heartbeat record, as ``record_heartbeat`` wrote it."""
    return [json.loads(raw) for raw in client.hvals(keys.NODES)]


def take_runs(client: Redis, now: float | None = None) -> bool:
    """Whether runs may be dispatched: every node not gone says its fetch stage takes them (an
    older worker, still up in a rolling upgrade, holds them back until it is gone)."""
    now = time.time() if now is None else now
    return all(rec.get(RUNS) for rec in records(client) if state(rec, now) != "gone")


def nodes(client: Redis, now: float | None = None) -> list[dict[str, Any]]:
    now = time.time() if now is None else now
    out = []
    for rec in records(client):
        rec["state"] = state(rec, now)
        rec["age"] = round(now - rec["last"], 1)
        out.append(rec)
    return sorted(out, key=lambda r: r["node"])


def forget_gone(client: Redis, older_than: float = 86400.0) -> int:
    """Drop records of nodes gone for more than a day."""
    now = time.time()
    old = [r["node"] for r in nodes(client, now) if r["state"] == "gone" and now - r["last"] > older_than]
    return int(client.hdel(keys.NODES, *old)) if old else 0
