"""Where the per-host cycle goes (issue 30): the crawl of ``bench.host_cycle`` (one host, one
request in flight, no delay, the defaults otherwise) with Redis MONITOR on, each cycle cut into
three segments by what Redis sees:

- fetched: the server has written a response -> the fetch stage's ``fetched`` script wakes the
  dispatchers (the client reading the body, the fetch stage's bookkeeping);
- dispatch: that wake -> the next fetch task's message is pushed on the shard queue (the
  dispatcher's tick);
- start: that push -> the server sees the next request (a worker takes the message, the fetch
  task starts, robots.txt and the lease are checked, the client sends).

    python -m bench.cycle_trace [--pages 200]

MONITOR slows Redis a little, so the total is a little above ``bench.host_cycle``'s.
"""

from __future__ import annotations

import argparse
import bisect
import statistics
import tempfile
import threading
from itertools import pairwise

import redis

from crawler.config.settings import Settings
from crawler.embedded import crawl
from crawler.local.redis_server import RedisServer
from crawler.testweb import TestWeb, WebModel


def _monitor(url: str, wakes: list[float], pushes: list[float], stop: threading.Event) -> None:
    client = redis.Redis.from_url(url)
    with client.monitor() as m:
        for cmd in m.listen():
            if stop.is_set():
                return
            parts = cmd["command"].split(" ", 2)
            if parts[0] != "LPUSH" or len(parts) < 2:
                continue
            # The host's shard, whichever it is: a one-host web uses one.
            if parts[1].startswith("c:wake:") and cmd.get("client_type") == "lua":
                wakes.append(cmd["time"])
            elif parts[1].startswith("shard-"):
                pushes.append(cmd["time"])


def _after(times: list[float], t: float) -> float | None:
    i = bisect.bisect_left(times, t)
    return times[i] if i < len(times) else None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--pages", type=int, default=200)
    args = p.parse_args()
    web = TestWeb(WebModel(1, args.pages, seed=3)).start()
    wakes: list[float] = []
    pushes: list[float] = []
    stop = threading.Event()
    try:
        with RedisServer() as server:
            t = threading.Thread(target=_monitor, args=(server.url, wakes, pushes, stop), daemon=True)
            t.start()
            crawl(Settings.from_env(per_host=1, delay=0.0, allow_networks=[f"{web.ips[0]}/32"],
                                    redis_url=server.url), web.seeds(), tempfile.mkdtemp(prefix="cycle-trace-"))
            stop.set()
        hits = sorted((h for h in web.hits() if h.path != "/robots.txt"), key=lambda h: h.start)
    finally:
        web.stop()
    wakes.sort()
    pushes.sort()
    seg: dict[str, list[float]] = {"fetched": [], "dispatch": [], "start": [], "total": []}
    for a, b in pairwise(hits):
        wake = _after(wakes, a.end)
        push = _after(pushes, wake) if wake is not None else None
        if wake is None or push is None or not a.end <= wake <= push <= b.start:
            continue  # the next URL was not known yet (waiting on a parse), or a cycle MONITOR missed
        seg["fetched"].append((wake - a.end) * 1000)
        seg["dispatch"].append((push - wake) * 1000)
        seg["start"].append((b.start - push) * 1000)
        seg["total"].append((b.start - a.end) * 1000)
    n = len(seg["total"])
    if not n:
        raise SystemExit(f"no cycle traced ({len(hits)} requests, {len(wakes)} wakes, {len(pushes)} fetch messages)")
    print(f"{n} of {len(hits) - 1} cycles traced; median (p90) ms:")
    for name, xs in seg.items():
        xs.sort()
        print(f"  {name:<9} {statistics.median(xs):6.2f} ({xs[int(len(xs) * 0.9)]:6.2f})")


if __name__ == "__main__":
    main()
