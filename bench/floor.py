"""The floor: the least CPU any Python client here spends to fetch the benchmark's pages and
extract their links, with nothing else around it. Three clients fetch every page (100 in flight),
each in its own run:

- ``raw``: asyncio streams speaking HTTP/1.1 with keep-alive, a pool of connections per host,
  Content-Length and chunked bodies; no library at all;
- ``httpx-per-host``: one httpx AsyncClient (its own connection pool) per host;
- ``httpx``: one AsyncClient for every host;

then a bare lxml parse-and-extract-links loop over the bodies. The floor is the cheapest fetch
plus the parse. CPU is this process's own (``process_time``).

    python -m bench.floor URLS_FILE [--concurrency 100]    # prints JSON
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import httpx
import lxml.html

Fetch = Callable[[list[str], int], Awaitable[list[bytes]]]


async def fetch_httpx(urls: list[str], concurrency: int) -> list[bytes]:
    gate = asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(limits=limits, trust_env=False) as client:

        async def one(url: str) -> bytes:
            async with gate:
                return (await client.get(url)).content

        return await asyncio.gather(*(one(u) for u in urls))


async def fetch_httpx_per_host(urls: list[str], concurrency: int) -> list[bytes]:
    gate = asyncio.Semaphore(concurrency)
    clients: dict[str, httpx.AsyncClient] = {}
    try:

        async def one(url: str) -> bytes:
            origin = "{0.scheme}://{0.netloc}".format(urlsplit(url))
            client = clients.get(origin)
            if client is None:
                client = clients[origin] = httpx.AsyncClient(trust_env=False)
            async with gate:
                return (await client.get(url)).content

        return await asyncio.gather(*(one(u) for u in urls))
    finally:
        for c in clients.values():
            await c.aclose()


class _Conn:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    async def get(self, host: str, target: str) -> tuple[bytes, bool]:
        """One GET on this connection: (body, whether the connection may be reused)."""
        self.writer.write(f"GET {target} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: floor\r\n"
                          f"Accept-Encoding: identity\r\n\r\n".encode())
        head = await self.reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
        if headers.get("transfer-encoding", "").lower() == "chunked":
            parts = []
            while True:
                size = int((await self.reader.readuntil(b"\r\n")).split(b";")[0], 16)
                if size == 0:
                    await self.reader.readuntil(b"\r\n")
                    break
                parts.append(await self.reader.readexactly(size))
                await self.reader.readexactly(2)
            body = b"".join(parts)
        else:
            body = await self.reader.readexactly(int(headers.get("content-length", "0")))
        return body, headers.get("connection", "").lower() != "close"


async def fetch_raw(urls: list[str], concurrency: int) -> list[bytes]:
    gate = asyncio.Semaphore(concurrency)
    idle: dict[tuple[str, int], list[_Conn]] = defaultdict(list)

    async def one(url: str) -> bytes:
        parts = urlsplit(url)
        where = (parts.hostname or "", parts.port or 80)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        async with gate:
            conn = idle[where].pop() if idle[where] else _Conn(*await asyncio.open_connection(*where))
            body, reuse = await conn.get(parts.netloc, target)
            if reuse:
                idle[where].append(conn)
            else:
                conn.writer.close()
            return body

    try:
        return await asyncio.gather(*(one(u) for u in urls))
    finally:
        for conns in idle.values():
            for c in conns:
                c.writer.close()


CLIENTS: dict[str, Fetch] = {"raw": fetch_raw, "httpx-per-host": fetch_httpx_per_host, "httpx": fetch_httpx}


def extract(url: str, body: bytes) -> list[str]:
    root = lxml.html.document_fromstring(body)
    return [urljoin(url, h) for h in root.xpath("//a/@href")]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("urls")
    ap.add_argument("--concurrency", type=int, default=100)
    args = ap.parse_args()
    urls = Path(args.urls).read_text().split()
    n = len(urls)
    fetch: dict[str, dict[str, float]] = {}
    bodies: list[bytes] = []
    for name, client in CLIENTS.items():
        c0, w0 = time.process_time(), time.monotonic()
        got = asyncio.run(client(urls, args.concurrency))
        c1, w1 = time.process_time(), time.monotonic()
        if bodies and [len(b) for b in got] != [len(b) for b in bodies]:
            raise SystemExit(f"floor: client {name} read other bodies than the first client")
        bodies = bodies or got
        fetch[name] = {"cpu_ms": (c1 - c0) / n * 1000, "pages_per_s": n / (w1 - w0)}
    c1 = time.process_time()
    links = sum(len(extract(u, b)) for u, b in zip(urls, bodies, strict=True))
    c2 = time.process_time()
    best = min(fetch, key=lambda k: fetch[k]["cpu_ms"])
    print(json.dumps({"pages": n, "bytes": sum(map(len, bodies)), "links": links, "clients": fetch,
                      "client": best, "fetch_cpu_ms": fetch[best]["cpu_ms"], "parse_cpu_ms": (c2 - c1) / n * 1000,
                      "fetch_pages_per_s": fetch[best]["pages_per_s"], "concurrency": args.concurrency}))


if __name__ == "__main__":
    main()
