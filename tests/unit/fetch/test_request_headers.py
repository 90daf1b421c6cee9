"""A spider request's own headers go on the wire in place of the crawler's of the same name (as
Scrapy's override its defaults), never beside them, over either transport; values UTF-8."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from crawler.fetch import client
from crawler.fetch.client import FetchConfig, HttpFetcher, new_client

Seen = dict[str, list[tuple[str, str]]]


@pytest.fixture
def echo() -> Iterator[tuple[str, Seen]]:
    seen: Seen = {}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            # Raw bytes as sent: latin-1 keeps them one to one.
            seen[self.path] = [(k.lower(), v.encode("latin-1").decode()) for k, v in self.headers.items()]
            self.send_response(200)
            self.send_header("content-type", "text/html")
            self.send_header("content-length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/", seen
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("transport", ["aiohttp", "httpcore"])
def test_a_requests_headers_replace_the_crawlers(echo: tuple[str, Seen], transport: str,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    url, seen = echo
    monkeypatch.setattr(client, "TRANSPORT", transport)
    config = FetchConfig(user_agent="crawler/0.1 (+test)", allow_networks=("127.0.0.0/8",), html_only=False)
    own = [("user-agent", "MyUA/1"), ("Accept-Encoding", "identity"), ("X-E", "5€"), ("If-None-Match", '"b"')]

    async def run() -> None:
        fetcher = HttpFetcher(new_client(config))
        try:
            got = await fetcher.fetch_many([url + "own", url + "plain"], config,
                                           headers={url + "own": [("If-None-Match", '"a"')],
                                                    url + "plain": [("If-None-Match", '"a"')]},
                                           requests=[("GET", b"", own), None])
            assert [r.error for r in got] == [None, None]
        finally:
            await fetcher.client.aclose()

    asyncio.run(run())
    mine, plain = dict(seen["/own"]), dict(seen["/plain"])
    assert [k for k, _ in seen["/own"]].count("user-agent") == 1 and mine["user-agent"] == "MyUA/1"
    assert mine["accept-encoding"] == "identity" and mine["x-e"] == "5€" and mine["if-none-match"] == '"b"'
    assert [k for k, _ in seen["/own"]].count("if-none-match") == 1
    # The other URL of the batch keeps the crawler's own.
    assert plain["user-agent"] == "crawler/0.1 (+test)" and plain["if-none-match"] == '"a"'
    assert "identity" not in plain["accept-encoding"]
