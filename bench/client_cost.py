"""The HTTP client's own cost per page (issue 30, item 4): the fetcher the fetch stage uses
(``HttpFetcher``: httpx, redirects, caps, decoding, the network guard) over its two transports,
httpcore (``client.new_client``) and aiohttp (``crawler.fetch.transport``), against a raw asyncio
HTTP/1.1 client (``bench.floor``), on the same pages: ``--hosts`` hosts of bench/web.py served by
bench/server.py in its own process, fetched in batches of ``--batch`` URLs spread over the hosts
(as fetch tasks carry them), each client in turn, ``--rounds`` times alternating. CPU is this
process's own (``process_time``); medians per page.

    python -m bench.client_cost [--hosts 20] [--pages 200] [--batch 64] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx

from bench.floor import fetch_raw
from bench.server import free_port, make_server
from bench.web import WebSpec, page_path, write
from crawler.fetch.client import FetchConfig, HttpFetcher, new_client
from crawler.fetch.netguard import NetworkGuard, Resolver

Client = Callable[[list[str], int], Awaitable[list[int]]]


def _config(spec: WebSpec) -> FetchConfig:
    return FetchConfig(user_agent="bench", allow_networks=tuple(f"{ip}/32" for ip in spec.ips))


def fetcher_client(make: Callable[[FetchConfig], httpx.AsyncClient], config: FetchConfig) -> Client:
    async def run(urls: list[str], batch: int) -> list[int]:
        client = make(config)  # closed, not entered: the fetch runtime never enters it either
        fetcher = HttpFetcher(client)
        sizes: list[int] = []
        try:
            for i in range(0, len(urls), batch):
                results = await fetcher.fetch_many(urls[i:i + batch], config)
                bad = [r for r in results if r.error and r.status != 404]
                if bad:
                    raise SystemExit(f"{bad[0].url}: {bad[0].error}")
                sizes += [len(r.body) for r in results]
        finally:
            await client.aclose()
        return sizes
    return run


def aiohttp_client(config: FetchConfig) -> httpx.AsyncClient:
    from crawler.config.settings import parse_networks
    from crawler.fetch import decoding
    from crawler.fetch.cookies import NoCookies
    from crawler.fetch.transport import GuardedAiohttpTransport

    guard = NetworkGuard(parse_networks(config.allow_networks))
    resolver = Resolver(ttl=config.dns_ttl, overrides=dict(config.resolve))
    return httpx.AsyncClient(follow_redirects=False, trust_env=False, cookies=NoCookies(),
                             headers={"Accept-Encoding": decoding.ACCEPT_ENCODING},
                             transport=GuardedAiohttpTransport(guard, resolver))


async def raw(urls: list[str], batch: int) -> list[int]:
    sizes: list[int] = []
    for i in range(0, len(urls), batch):
        sizes += [len(b) for b in await fetch_raw(urls[i:i + batch], batch)]
    return sizes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", type=int, default=20)
    ap.add_argument("--pages", type=int, default=200)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    probe = WebSpec(hosts=args.hosts, pages=args.pages)
    spec = WebSpec(hosts=args.hosts, pages=args.pages, port=free_port(probe.ips))
    config = _config(spec)
    # Host by host in turn, as a batch under per-host politeness holds many hosts.
    urls = [spec.origin(h) + page_path(i) for i in range(args.pages) for h in range(args.hosts)]
    clients: dict[str, Client] = {"httpx+httpcore (ours)": fetcher_client(new_client, config),
                                  "httpx+aiohttp": fetcher_client(aiohttp_client, config), "raw asyncio": raw}
    cpu: dict[str, list[float]] = {k: [] for k in clients}
    with tempfile.TemporaryDirectory(prefix="bench-client-") as tmp:
        root = Path(tmp)
        os.chmod(root, 0o755)
        write(spec, root)
        server = make_server("asyncio", root, spec.ips, spec.port).start()
        try:
            sizes: list[int] = []
            for r in range(args.rounds):
                for name, client in clients.items() if r % 2 == 0 else reversed(clients.items()):
                    c0 = time.process_time()
                    got = asyncio.run(client(urls, args.batch))
                    cpu[name].append((time.process_time() - c0) / len(urls) * 1000)
                    if sizes and got != sizes:
                        raise SystemExit(f"{name} read other bodies than the others")
                    sizes = sizes or got
        finally:
            server.stop()
            server.close()
    out = {name: statistics.median(v) for name, v in cpu.items()}
    for name, v in cpu.items():
        print(f"{name:<22} {out[name]:.3f} CPU ms/page (rounds: {', '.join(f'{x:.3f}' for x in v)})")
    print(json.dumps({"pages": len(urls), "batch": args.batch, "cpu_ms_per_page": out}))


if __name__ == "__main__":
    main()
