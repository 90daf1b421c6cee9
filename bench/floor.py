"""The floor: what fetching and link extraction cost with nothing else around them. A bare httpx
AsyncClient loop with 100 requests in flight over the benchmark's pages, then a bare lxml
parse-and-extract-links loop over the bodies. CPU is this process's own (process_time).

    python -m bench.floor URLS_FILE [--concurrency 100]    # prints JSON
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path
from urllib.parse import urljoin

import httpx
import lxml.html


async def fetch_all(urls: list[str], concurrency: int) -> list[bytes]:
    gate = asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(limits=limits, trust_env=False) as client:

        async def one(url: str) -> bytes:
            async with gate:
                return (await client.get(url)).content

        return await asyncio.gather(*(one(u) for u in urls))


def extract(url: str, body: bytes) -> list[str]:
    root = lxml.html.document_fromstring(body)
    return [urljoin(url, h) for h in root.xpath("//a/@href")]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("urls")
    ap.add_argument("--concurrency", type=int, default=100)
    args = ap.parse_args()
    urls = Path(args.urls).read_text().split()
    c0, w0 = time.process_time(), time.monotonic()
    bodies = asyncio.run(fetch_all(urls, args.concurrency))
    c1, w1 = time.process_time(), time.monotonic()
    links = sum(len(extract(u, b)) for u, b in zip(urls, bodies, strict=True))
    c2 = time.process_time()
    n = len(urls)
    print(json.dumps({"pages": n, "bytes": sum(map(len, bodies)), "links": links,
                      "fetch_cpu_ms": (c1 - c0) / n * 1000, "parse_cpu_ms": (c2 - c1) / n * 1000,
                      "fetch_pages_per_s": n / (w1 - w0), "concurrency": args.concurrency}))


if __name__ == "__main__":
    main()
