"""Console latency: the hosts endpoint (sorted, paged on the server) of a job with many hosts.

    python -m bench.console_hosts [--hosts N] [--requests N]

A benchmark, not a test: it fills a private redis-server (free loopback port) with a job of
``--hosts`` hosts through the frontier's own API (admission with the per-host budget on, as the
defaults have it; per-host fetched and error counts; adaptive delays on some), serves
``crawler web``'s app with uvicorn on loopback and times ``GET /api/jobs/JOB/hosts`` over HTTP as
the console asks for it (25 rows, every sort, pages near the start and deep in). "cold": every
request recomputes the host table; "warm": within the table's 2 s reuse (the console's 2 s
polls of the same job). Prints median and p95 and writes JSON under bench/results/.
"""

from __future__ import annotations

import argparse
import json
import random
import socket
import statistics
import threading
import time
from pathlib import Path

import httpx
import uvicorn

from crawler import control, jobs
from crawler.config.settings import Settings
from crawler.frontier import Entry, Frontier
from crawler.local.redis_server import RedisServer
from crawler.state.conn import connect
from crawler.web import create_app

SORTS = ("queued", "fetched", "errors", "delay", "host", "inflight")


def fill(r: object, job: str, hosts: int, shards: int) -> None:
    frontier = Frontier(r)  # type: ignore[arg-type]
    rng = random.Random(7)
    for start in range(0, hosts, 2000):
        entries = [Entry(f"http://h{i}.site{i % 5000}.example/p{k}")
                   for i in range(start, min(start + 2000, hosts)) for k in range(1 + rng.randrange(4))]
        frontier.admit(job, entries, shards, host_budget=100_000)
        pipe = r.pipeline(transaction=False)  # type: ignore[attr-defined]
        frontier.count_hosts(job, {f"h{i}.site{i % 5000}.example": rng.randrange(50)
                                   for i in range(start, min(start + 2000, hosts))},
                             {f"h{i}.site{i % 5000}.example": rng.randrange(3)
                              for i in range(start, min(start + 2000, hosts), 7)}, pipe)
        pipe.execute()
        frontier.set_host_delays(job, {f"h{i}.site{i % 5000}.example": round(rng.uniform(0.5, 4), 2)
                                       for i in range(start, min(start + 2000, hosts), 3)})


def timed(client: httpx.Client, job: str, requests: int, total: int) -> list[float]:
    out = []
    for n in range(requests):
        offset = 0 if n % 2 == 0 else (n * 7919) % max(1, total - 25)
        params = {"sort": SORTS[n % len(SORTS)], "desc": str(n % 3 != 0).lower(), "offset": offset, "limit": 25}
        t0 = time.perf_counter()
        res = client.get(f"/api/jobs/{job}/hosts", params=params)
        out.append(time.perf_counter() - t0)
        assert res.status_code == 200 and len(res.json()["hosts"]) == 25, res.text[:200]
    return out


def summary(times: list[float]) -> dict[str, float]:
    ordered = sorted(times)
    return {"median_ms": round(statistics.median(ordered) * 1000, 1),
            "p95_ms": round(ordered[int(0.95 * (len(ordered) - 1))] * 1000, 1),
            "max_ms": round(ordered[-1] * 1000, 1)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--hosts", type=int, default=100_000)
    p.add_argument("--requests", type=int, default=50)
    args = p.parse_args()
    with RedisServer() as server:
        r = connect(f"redis://127.0.0.1:{server.port}/0")
        job = jobs.submit(r, Settings.from_env(store="", shards=4), ["http://h0.site0.example/"])
        t0 = time.perf_counter()
        fill(r, job, args.hosts, 4)
        filled = time.perf_counter() - t0
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        web = uvicorn.Server(uvicorn.Config(create_app(r), host="127.0.0.1", port=port, log_level="warning"))
        thread = threading.Thread(target=web.run, daemon=True)
        thread.start()
        while not web.started:
            time.sleep(0.05)
        try:
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
                total = client.get(f"/api/jobs/{job}/hosts", params={"limit": 1}).json()["total"]
                warm = timed(client, job, args.requests, total)  # one table, reused for 2 s at a time
                age = control.HOSTS_SNAPSHOT_AGE
                control.HOSTS_SNAPSHOT_AGE = 0.0  # every request computes the table afresh
                try:
                    cold = timed(client, job, args.requests, total)
                finally:
                    control.HOSTS_SNAPSHOT_AGE = age
        finally:
            web.should_exit = True
            thread.join(10)
    result = {"hosts": total, "requests": args.requests, "fill_s": round(filled, 1), "rows": 25,
              "warm": summary(warm), "cold": summary(cold)}
    print(f"{total} hosts (filled in {filled:.1f}s), GET /api/jobs/JOB/hosts, 25 rows, {args.requests} requests each:")
    for name in ("cold", "warm"):
        s = result[name]
        print(f"  {name}: median {s['median_ms']} ms, p95 {s['p95_ms']} ms, max {s['max_ms']} ms")  # type: ignore[index]
    out = Path(__file__).resolve().parent / "results" / "console_hosts.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
