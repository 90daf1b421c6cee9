"""CPU cost of the noise-link filter per page in the parse stage: parse + canonicalise the links
of noisy article pages, with and without ``filter_noise``; median of several runs.

    .venv/bin/python bench/noise_cost.py [--pages 200] [--runs 7]
"""

from __future__ import annotations

import argparse
import statistics
import time

from crawler.extract.noisefilter import filter_noise, new_cluster_cache
from crawler.parse import parse_html
from crawler.testweb.noisy import noisy_page
from crawler.urls import canonicalize

BASE = "http://127.0.1.1"


def run(bodies: list[bytes], with_filter: bool) -> float:
    cache = new_cluster_cache()
    start = time.process_time()
    for n, body in enumerate(bodies):
        parsed = parse_html(f"{BASE}/p/{n}.html", body, "text/html")
        outlinks = [canonicalize(u) for u in parsed.links]
        if with_filter:
            filter_noise(parsed, outlinks, "job", cache)
    return (time.process_time() - start) * 1000 / len(bodies)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pages", type=int, default=200)
    ap.add_argument("--runs", type=int, default=7)
    args = ap.parse_args()
    for label, kw in (("plain (12 paragraphs)", {}), ("realistic (30 KB script, 20 related cards)",
                                                      {"script_kb": 30, "related": 20})):
        bodies = [noisy_page(n, pages=args.pages, **kw).html for n in range(args.pages)]
        off = statistics.median(run(bodies, False) for _ in range(args.runs))
        on = statistics.median(run(bodies, True) for _ in range(args.runs))
        print(f"{label}: {off:.2f} ms/page without, {on:.2f} ms/page with the filter (+{on - off:.2f} ms)")


if __name__ == "__main__":
    main()
