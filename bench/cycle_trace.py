"""Where the per-host cycle goes (issue 30): the crawl of ``bench.host_cycle`` (one host, one
request in flight, no delay, the defaults otherwise) with Redis MONITOR on, each cycle cut into
segments by what Redis sees:

- fetched: the server has written a response -> the fetch stage's ``fetched`` script wakes the
  dispatchers (the client reading the body, the fetch stage's bookkeeping);
- dispatch: that wake -> the next fetch task's message is pushed on the shard queue (the
  dispatcher's tick);
- start: that push -> the server sees the next request, itself cut in three:
  - queued: the push -> a worker takes the message (kombu records it as unacknowledged): the
    worker finishing the task it was running (a solo pool runs one at a time);
  - consume: -> the fetch stage confirms its lease (Celery's consume path, the task's start);
  - send: -> the server sees the request (robots.txt, the session, the HTTP client).

    python -m bench.cycle_trace [--pages 200]

MONITOR slows Redis a little, so the total is a little above ``bench.host_cycle``'s.
"""

from __future__ import annotations

import argparse
import bisect
import hashlib
import re
import statistics
import tempfile
import threading
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

import redis

from crawler.config.settings import Settings
from crawler.embedded import crawl
from crawler.frontier import lua
from crawler.local.redis_server import RedisServer
from crawler.state import keys
from crawler.testweb import TestWeb, WebModel

_TAG = re.compile(r'delivery_tag\W+([0-9a-f-]{36})')
_CONFIRM = hashlib.sha1(lua.CONFIRM.encode()).hexdigest()


@dataclass
class Seen:
    """What MONITOR saw, by time: wakes, fetch messages pushed (with their delivery tags), messages
    taken (tag -> time), and lease confirmations (time, the command naming the URLs)."""

    wakes: list[float] = field(default_factory=list)
    pushes: list[tuple[float, str]] = field(default_factory=list)
    taken: dict[str, float] = field(default_factory=dict)
    confirms: list[tuple[float, str]] = field(default_factory=list)


def _monitor(url: str, seen: Seen, stop: threading.Event) -> None:
    client = redis.Redis.from_url(url)
    with client.monitor() as m:
        try:
            for cmd in m.listen():
                if stop.is_set():
                    return
                _note(cmd, seen)
        except redis.ConnectionError:
            return  # the crawl is over and its Redis gone


def _note(cmd: dict[str, Any], seen: Seen) -> None:
    parts = cmd["command"].split(" ", 2)
    if len(parts) < 2:
        return
    # The host's shard, whichever it is: a one-host web uses one.
    if parts[0] == "LPUSH" and parts[1].startswith(keys.WAKE) and cmd.get("client_type") == "lua":
        seen.wakes.append(cmd["time"])
    elif parts[0] == "LPUSH" and parts[1].startswith("shard-") and '"crawler.fetch"' in cmd["command"]:
        tag = _TAG.search(cmd["command"])
        seen.pushes.append((cmd["time"], tag.group(1) if tag else ""))
    elif parts[0] == "HSET" and parts[1] == "unacked" and len(parts) > 2:
        # kombu's record of a delivered message: the worker has taken it off the queue.
        seen.taken.setdefault(parts[2].split(" ", 1)[0], cmd["time"])
    elif parts[0] == "EVALSHA" and parts[1] == _CONFIRM:
        seen.confirms.append((cmd["time"], cmd["command"]))


def _after(times: list[float], t: float) -> float | None:
    i = bisect.bisect_left(times, t)
    return times[i] if i < len(times) else None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--pages", type=int, default=200)
    args = p.parse_args()
    web = TestWeb(WebModel(1, args.pages, seed=3)).start()
    seen = Seen()
    stop = threading.Event()
    try:
        with RedisServer() as server:
            t = threading.Thread(target=_monitor, args=(server.url, seen, stop), daemon=True)
            t.start()
            crawl(Settings.from_env(per_host=1, delay=0.0, allow_networks=[f"{web.ips[0]}/32"],
                                    redis_url=server.url), web.seeds(), tempfile.mkdtemp(prefix="cycle-trace-"))
            stop.set()
        hits = sorted((h for h in web.hits() if h.path != "/robots.txt"), key=lambda h: h.start)
    finally:
        web.stop()
    wakes = sorted(seen.wakes)
    pushes = sorted(seen.pushes)
    push_times = [t for t, _ in pushes]
    confirms = sorted(seen.confirms)
    confirm_times = [t for t, _ in confirms]
    seg: dict[str, list[float]] = {"fetched": [], "dispatch": [], "start": [], "queued": [], "consume": [],
                                   "send": [], "total": []}
    for a, b in pairwise(hits):
        wake = _after(wakes, a.end)
        i = bisect.bisect_left(push_times, wake) if wake is not None else len(pushes)
        if wake is None or i == len(pushes) or not a.end <= wake <= pushes[i][0] <= b.start:
            continue  # the next URL was not known yet (waiting on a parse), or a cycle MONITOR missed
        push, tag = pushes[i]
        seg["fetched"].append((wake - a.end) * 1000)
        seg["dispatch"].append((push - wake) * 1000)
        seg["start"].append((b.start - push) * 1000)
        seg["total"].append((b.start - a.end) * 1000)
        taken = seen.taken.get(tag)
        j = bisect.bisect_left(confirm_times, push)
        confirm = confirms[j] if j < len(confirms) else None
        if (taken is not None and confirm is not None and push <= taken <= confirm[0] <= b.start
                and b.path in confirm[1]):
            seg["queued"].append((taken - push) * 1000)
            seg["consume"].append((confirm[0] - taken) * 1000)
            seg["send"].append((b.start - confirm[0]) * 1000)
    n = len(seg["total"])
    if not n:
        raise SystemExit(f"no cycle traced ({len(hits)} requests, {len(wakes)} wakes, {len(pushes)} fetch messages)")
    print(f"{n} of {len(hits) - 1} cycles traced ({len(seg['send'])} with the start cut in three); "
          "median (p90) ms:")
    for name, xs in seg.items():
        if not xs:
            continue
        xs.sort()
        indent = "    " if name in ("queued", "consume", "send") else "  "
        print(f"{indent}{name:<9} {statistics.median(xs):6.2f} ({xs[int(len(xs) * 0.9)]:6.2f})")


if __name__ == "__main__":
    main()
