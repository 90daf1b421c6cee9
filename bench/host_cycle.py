"""The per-host cycle (issue 30): one host, one request in flight, no delay, the defaults
otherwise. Crawls a single-host test web with ``crawler crawl``'s embedded crawl and reports, at
the server, the median time from one response's end to the next request's start, and pages/s.

    python -m bench.host_cycle [--pages 300] [--runs 3]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from itertools import pairwise

from crawler.config.settings import Settings
from crawler.embedded import crawl
from crawler.testweb import TestWeb, WebModel


def run(pages: int) -> tuple[float, float, float]:
    """(median gap ms, p90 gap ms, pages/s) of one crawl."""
    web = TestWeb(WebModel(1, pages, seed=3)).start()
    try:
        t0 = time.monotonic()
        outcome = crawl(Settings.from_env(per_host=1, delay=0.0, allow_networks=[f"{web.ips[0]}/32"]), web.seeds(),
                        tempfile.mkdtemp(prefix="host-cycle-"))
        elapsed = time.monotonic() - t0
        hits = sorted((h for h in web.hits() if h.path != "/robots.txt"), key=lambda h: h.start)
    finally:
        web.stop()
    gaps = sorted((b.start - a.end) * 1000 for a, b in pairwise(hits))
    stored = outcome.status["counters"].get("stored", 0)
    return statistics.median(gaps), gaps[int(len(gaps) * 0.9)], stored / elapsed


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--pages", type=int, default=300)
    p.add_argument("--runs", type=int, default=3)
    args = p.parse_args()
    results = [run(args.pages) for _ in range(args.runs)]
    for median, p90, rate in results:
        print(f"gap end -> next start: median {median:.1f} ms, p90 {p90:.1f} ms; {rate:.1f} pages/s")
    print(f"median of {args.runs} runs: {statistics.median(r[0] for r in results):.1f} ms per cycle, "
          f"{statistics.median(r[2] for r in results):.1f} pages/s")


if __name__ == "__main__":
    main()
