"""Scaling benchmark: pages/s with 1 and 2 worker processes on the same synthetic web, and the
Redis work per page (commands, CPU, network bytes), the inputs of the README's capacity model.

    python -m bench.scaling [--sites N] [--pages N] [--runs N]

A benchmark, not a test: prints a table, writes JSON under bench/results/. Runs alternate
(1, 2, 1, 2, ...) and report medians: this machine is noisy.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

from crawler.config.settings import Settings
from crawler.embedded import crawl
from crawler.local.redis_server import RedisServer
from crawler.state.conn import connect
from crawler.store import open_store
from crawler.testweb import TestWeb, WebModel


def _redis_totals(client: redis.Redis) -> dict[str, float]:
    info = client.info("all")
    calls = sum(v["calls"] for k, v in info.items() if k.startswith("cmdstat_"))
    return {"calls": calls, "cpu": info["used_cpu_user"] + info["used_cpu_sys"],
            "net": info["total_net_input_bytes"] + info["total_net_output_bytes"]}


def one_run(server: RedisServer, web: TestWeb, workers: int) -> dict[str, Any]:
    client = connect(server.url)
    client.flushall()
    client.config_resetstat()
    before = _redis_totals(client)
    with tempfile.TemporaryDirectory() as out:
        settings = Settings.from_env(redis_url=server.url, workers=workers, shards=2, per_host=16, concurrency=64,
                                     allow_networks=[f"{ip}/32" for ip in web.ips], obey_robots=False,
                                     task_events=False, near_duplicates=False)
        outcome = crawl(settings, web.seeds(), out)
        times = [p["fetched_at"] for p in open_store(f"sqlite:///{out}/crawl.db").pages(outcome.job_id)]
    after = _redis_totals(client)
    pages = len(times)
    span = max(times) - min(times)
    return {"workers": workers, "pages": pages, "seconds": span, "pages_per_s": pages / span,
            "redis_commands_per_page": (after["calls"] - before["calls"]) / pages,
            "redis_cpu_ms_per_page": (after["cpu"] - before["cpu"]) / pages * 1000,
            "redis_bytes_per_page": (after["net"] - before["net"]) / pages}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sites", type=int, default=20)
    ap.add_argument("--pages", type=int, default=200)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    web = TestWeb(WebModel(args.sites, args.pages, links_per_page=20), filler=15_000).start()
    runs: dict[int, list[dict[str, Any]]] = {1: [], 2: []}
    try:
        with RedisServer() as server:
            for _ in range(args.runs):
                for n in (1, 2):
                    runs[n].append(one_run(server, web, n))
                    print(f"  {n} worker(s): {runs[n][-1]['pages_per_s']:.0f} pages/s", flush=True)
    finally:
        web.stop()
    med = {n: {k: statistics.median(r[k] for r in rs) for k in rs[0] if k != "workers"} for n, rs in runs.items()}
    eff = med[2]["pages_per_s"] / (2 * med[1]["pages_per_s"])
    print(f"\n{args.sites} sites x {args.pages} pages, ~15 KB each, median of {args.runs}:")
    print(f"{'workers':>8} {'pages/s':>9} {'Redis cmds/page':>16} {'Redis CPU ms/page':>18} {'Redis bytes/page':>17}")
    for n in (1, 2):
        m = med[n]
        print(f"{n:>8} {m['pages_per_s']:>9.0f} {m['redis_commands_per_page']:>16.1f} "
              f"{m['redis_cpu_ms_per_page']:>18.3f} {m['redis_bytes_per_page']:>17,.0f}")
    print(f"scaling efficiency 1 -> 2 processes: {eff:.0%} (2 cores, the web server shares them)")
    # Capacity model: 1 billion pages a month is 386 pages/s sustained.
    target = 1e9 / (30 * 86400)
    per_worker = med[1]["pages_per_s"]
    redis_core = med[2]["redis_cpu_ms_per_page"] / 1000 * target
    print(f"1e9 pages/month = {target:.0f} pages/s: ~{target / per_worker:.0f} worker processes at "
          f"{per_worker:.0f} pages/s each; Redis needs {redis_core:.2f} cores "
          f"({med[2]['redis_bytes_per_page'] * target / 1e6:.1f} MB/s of traffic)")
    out = Path(__file__).parent / "results" / f"scaling-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"runs": runs, "median": med, "efficiency": eff}, indent=2))
    print(f"written: {out}")


if __name__ == "__main__":
    main()
