"""CPU cost per page of the issue-15 building blocks: main text (trafilatura) and the noise-link
filter, on synthetic article pages of realistic size (crawler.testweb.noisy). CPU is this
process's own (process_time); each figure is the median over ``--runs`` passes of the
per-page mean over ``--pages`` distinct pages of that size.

    python -m bench.extract_cost [--runs 5] [--pages 20]    # prints a table, or JSON with --json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from functools import partial

import lxml.html

from crawler.extract.maintext import Format, extract_main_text
from crawler.extract.noise import UrlClusters, mark_noise, noise_blocks
from crawler.testweb.noisy import noisy_page

# (paragraphs, KB of inline script, related-story cards): about 10, 30, 60 and 100 KB articles,
# then an index page (a long link list, next to no text), where trafilatura tries hardest
SIZES = ((16, 0, 10), (40, 8, 30), (70, 25, 40), (100, 45, 60), (0, 10, 150))


def _median_ms(fn: Callable[[bytes, int], object], bodies: list[bytes], runs: int) -> float:
    per_run = []
    for _ in range(runs):
        t = time.process_time()
        for i, b in enumerate(bodies):
            fn(b, i)
        per_run.append((time.process_time() - t) * 1000 / len(bodies))
    return statistics.median(per_run)


def _main_text(body: bytes, i: int, fmt: Format) -> None:
    extract_main_text(body, f"http://example.com/{i}", fmt)


def _noise(body: bytes, i: int, clusters: UrlClusters) -> None:
    root = lxml.html.document_fromstring(body)
    noisy = noise_blocks(root)
    links = [(f"http://example.com{a.get('href')}", a in noisy) for a in root.iter("a") if a.get("href")]
    mark_noise(links, clusters)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--pages", type=int, default=20)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    # warm-up: first calls build trafilatura's and htmldate's compiled XPaths and caches
    extract_main_text(noisy_page(0).html, "http://example.com/", "text")
    rows = []
    for paragraphs, script_kb, related in SIZES:
        bodies = [noisy_page(1000 * paragraphs + n, paragraphs, script_kb, related).html for n in range(args.pages)]
        kb = statistics.mean(len(b) for b in bodies) / 1024
        row: dict[str, float] = {"kb": round(kb, 1), "paragraphs": paragraphs}
        for fmt in ("text", "markdown"):
            row[f"{fmt}_ms"] = round(_median_ms(partial(_main_text, fmt=fmt), bodies, args.runs), 2)
        row["parse_ms"] = round(_median_ms(lambda b, i: lxml.html.document_fromstring(b), bodies, args.runs), 2)
        clusters = UrlClusters()
        row["noise_ms"] = round(_median_ms(partial(_noise, clusters=clusters), bodies, args.runs), 2)
        rows.append(row)
    if args.json:
        print(json.dumps(rows))
        return
    print("   KB  paragraphs  text ms  markdown ms  lxml parse ms  parse+noise ms")
    for r in rows:
        print(f"{r['kb']:5.1f}  {r['paragraphs']:10.0f}  {r['text_ms']:7.2f}  {r['markdown_ms']:11.2f}  "
              f"{r['parse_ms']:13.2f}  {r['noise_ms']:14.2f}")


if __name__ == "__main__":
    main()
