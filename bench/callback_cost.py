"""CPU cost per page of a callback-heavy spider against the default (no spider, the crawl
``make bench`` measures), on the loopback quotes site (``crawler.testweb.quotes``): 10 quote
pages, each quote carried to its author's page in ``cb_kwargs`` (110 fetches, 100 joined items).

Two measures, each the median over ``--runs`` runs:

- ``crawl``: a whole ``crawler crawl`` (its own Redis, ``--workers`` Celery workers, store and
  WARC) in a subprocess; CPU is that process tree's user+system time (``RUSAGE_CHILDREN``: the
  command, its workers and Redis), divided by the pages it stored. The site is served by this
  process, whose CPU is not counted.
- ``hook``: the spider's callbacks alone, in this process, on pages fetched once beforehand: the
  crawler's own API (selectors over the tree the parse stage already built, which is timed too)
  against the same spider written for Scrapy and run through the adapter (a Scrapy response built
  from the page, its own parse, the yielded requests and items translated).

    python -m bench.callback_cost [--runs 3] [--workers 2] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from crawler.parse.html import parse_html
from crawler.spiders import Page, Request, Spider
from crawler.spiders.loader import find, instantiate, load_class
from crawler.store import open_store
from crawler.testweb import TestWeb, WebModel
from crawler.testweb.quotes import QuotesSite

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
SPIDERS = {
    "default": None,  # no spider: every extracted link followed, nothing extracted
    "callbacks": f"{EXAMPLES / 'quotes_spider.py'}:QuotesSpider",
    "scrapy": f"{EXAMPLES / 'scrapy_quotes.py'}:QuotesSpider",
}


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def crawl_once(origin: str, ip: str, spider: str | None, workers: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out"
        args = [sys.executable, "-m", "crawler", "crawl", origin + "/", "--out", str(out), "--workers", str(workers)]
        if spider:
            args += ["--spider", spider, "--spider-arg", f"base={origin}"]
        env = {k: v for k, v in os.environ.items() if k != "CRAWLER_REDIS_URL"}
        env["CRAWLER_ALLOW_NETWORKS"] = f"{ip}/32"
        before, t0 = _children_cpu(), time.monotonic()
        res = subprocess.run(args, capture_output=True, text=True, env=env, cwd=ROOT, timeout=600, check=False)
        cpu, wall = _children_cpu() - before, time.monotonic() - t0
        if res.returncode != 0:
            raise RuntimeError(f"crawl failed: {res.stderr[-2000:]}")
        store = open_store(f"sqlite:///{out / 'crawl.db'}")
        try:
            pages = sum(1 for _ in store.pages())
            items = sum(1 for _ in store.items())
        finally:
            store.close()
    return {"pages": pages, "items": items, "cpu_s": cpu, "wall_s": wall, "cpu_ms_per_page": 1000 * cpu / pages}


def _fetch(url: str) -> Page:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=10) as res:
        return Page(url, status=res.status, headers=list(res.headers.items()), body=res.read())


def _drain(values: Iterable[Any], sink: list[Any]) -> None:
    for v in values:
        sink.append(v)


def hook_once(spider: Spider, pages: list[tuple[Page, Request]], fresh: Callable[[Page, Request], Page]) -> float:
    """CPU ms per page of ``spider``'s callbacks on ``pages`` (each page rebuilt, so no tree or
    selector is reused between runs; the rebuild's own parse is part of the cost)."""
    sink: list[Any] = []
    t = time.process_time()
    for page, req in pages:
        p = fresh(page, req)
        _drain(getattr(spider, req.callback or "parse")(p, **req.cb_kwargs), sink)
    return 1000 * (time.process_time() - t) / len(pages)


def hook_pages(origin: str, spider: Spider) -> list[tuple[Page, Request]]:
    """The pages of one crawl with ``spider`` and the requests that asked for them."""
    todo = [Request(origin + "/")]
    out = []
    while todo:
        req = todo.pop(0)
        page = _fetch(req.url)
        out.append((page, req))
        fresh = Page(req.url, status=page.status, headers=list(page.headers.items()), body=page.body, request=req)
        todo += [v for v in getattr(spider, req.callback or "parse")(fresh, **req.cb_kwargs) if isinstance(v, Request)]
    return out


def _rebuild(page: Page, req: Request) -> Page:
    # As the parse stage does: the tree is parsed once, and the Page shares it.
    parsed = parse_html(page.url, page.body, page.content_type)
    return Page(page.url, status=page.status, headers=list(page.headers.items()), body=page.body, parsed=parsed,
                request=req)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    web = TestWeb(WebModel(1, 1), base_ip="127.0.1.", first=240).start()
    site = QuotesSite()
    site.mount(web, 0)
    origin = web.origin(0)
    try:
        hooks: dict[str, float] = {}
        for name in ("callbacks", "scrapy"):
            spider = instantiate(load_class(find(SPIDERS[name] or "", [str(EXAMPLES)])), [f"base={origin}"])
            pages = hook_pages(origin, spider)
            hook_once(spider, pages, _rebuild)  # warm-up
            hooks[name] = statistics.median(hook_once(spider, pages, _rebuild) for _ in range(max(args.runs, 5)))
        crawls: dict[str, list[dict[str, float]]] = {name: [] for name in SPIDERS}
        for _ in range(args.runs):  # alternating, so drift on a shared machine hits all alike
            for name, spider_ref in SPIDERS.items():
                crawls[name].append(crawl_once(origin, web.ips[0], spider_ref, args.workers))
    finally:
        web.stop()
    rows = []
    for name, runs in crawls.items():
        rows.append({"spider": name, "pages": statistics.median(r["pages"] for r in runs),
                     "items": statistics.median(r["items"] for r in runs),
                     "cpu_ms_per_page": round(statistics.median(r["cpu_ms_per_page"] for r in runs), 2),
                     "wall_s": round(statistics.median(r["wall_s"] for r in runs), 2),
                     "hook_ms_per_page": round(hooks[name], 3) if name in hooks else None})
    if args.json:
        print(json.dumps(rows))
        return
    print(f"median of {args.runs} runs, {args.workers} workers")
    print("spider      pages  items  crawl CPU ms/page  wall s  callbacks alone ms/page")
    for r in rows:
        hook = f"{r['hook_ms_per_page']:.3f}" if r["hook_ms_per_page"] is not None else "-"
        print(f"{r['spider']:<10} {r['pages']:6.0f} {r['items']:6.0f} {r['cpu_ms_per_page']:18.2f} "
              f"{r['wall_s']:7.2f}  {hook:>22}")


if __name__ == "__main__":
    main()
