"""Serves a WebModel on loopback: one threaded HTTP server per site, each on its own address
(127.0.1.1, 127.0.1.2, ...; all of 127.0.0.0/8 is loopback on Linux), with an access log.

Extra behaviours for hostile-input tests are registered per path with ``route``.
"""

from __future__ import annotations

import hashlib
import random
import socket
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from email.utils import formatdate
from html import escape
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, urlencode, urlsplit

from crawler.testweb import noisy
from crawler.testweb.model import Link, WebModel

Handler = Callable[[BaseHTTPRequestHandler], None]


@dataclass(frozen=True)
class Hit:
    site: int
    path: str
    start: float
    user_agent: str
    end: float = 0.0  # when the response was written
    host: str = ""  # the Host header
    status: int = 0  # the status answered (0: a custom route's)


class QuietHandler(BaseHTTPRequestHandler):
    """What every test-web server answers with: HTTP/1.1 keep-alive, no access log, and
    TCP_NODELAY, as real servers set it: http.server writes the headers and the body apart, and
    Nagle's algorithm held the body back for the client's delayed ACK (40 ms on Linux), which
    made every keep-alive request after the first wait for it."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, *args: object) -> None:
        pass


def request_cookie(h: BaseHTTPRequestHandler, name: str) -> str:
    """The value of cookie ``name`` in the request's ``Cookie`` headers, or ""."""
    for header in h.headers.get_all("Cookie") or []:
        for part in header.split(";"):
            k, _, v = part.strip().partition("=")
            if k == name:
                return v
    return ""


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def handle_error(self, request: socket.socket | tuple[bytes, socket.socket], client_address: object) -> None:
        import sys

        # Clients that hang up mid-response (killed workers, deadlines) are part of the tests.
        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)


class TestWeb:
    __test__ = False  # not a pytest test class

    def __init__(self, model: WebModel, *, base_ip: str = "127.0.1.", first: int = 1, filler: int = 0,
                 articles: bool = False, noisy: int = 0) -> None:
        self.model = model
        if not (first >= 1 and first + model.sites - 1 <= 254):
            # 127.0.1.256 is no address: it would be looked up as a host name.
            raise ValueError(f"{model.sites} sites from {base_ip}{first} run past {base_ip}254")
        self.ips = [f"{base_ip}{first + i}" for i in range(model.sites)]
        self.filler = filler  # bytes of padding text per page, for realistic sizes
        self.articles = articles  # each page carries an article (heading, paragraphs): main text to extract
        # site 0 serves instead noisy articles /p/0.html../p/{noisy-1}.html (crawler.testweb.noisy) and
        # plain pages at their nav, tag, share and footer links
        self.noisy = noisy
        self.conditional = True  # answer If-None-Match / If-Modified-Since with 304
        self.log: list[Hit] = []
        self._lock = threading.Lock()
        self.routes: dict[tuple[int, str], Handler] = {}
        self.post_routes: dict[tuple[int, str], Handler] = {}
        self.any_query_routes: dict[tuple[int, str], Handler] = {}  # GET, whatever the query
        self._servers: list[_Server] = []
        self.ports: list[int] = []

    # -- addresses -------------------------------------------------------------------------
    def origin(self, site: int) -> str:
        return f"http://{self.ips[site]}:{self.ports[site]}"

    def url(self, site: int, path: str) -> str:
        return self.origin(site) + path

    def seeds(self) -> list[str]:
        return [self.url(s, "/") for s in range(self.model.sites)]

    def reachable_urls(self, seeds: list[tuple[int, str]] | None = None, max_depth: int | None = None) -> set[str]:
        seeds = seeds or [(s, "/") for s in range(self.model.sites)]
        return {self.url(s, p) for (s, p) in self.model.reachable(seeds, max_depth)}

    def site_of(self, host: str) -> int:
        return self.ips.index(host.split(":")[0])

    # -- serving ---------------------------------------------------------------------------
    def route(self, site: int, path: str, handler: Handler, *, method: str = "GET", any_query: bool = False) -> None:
        if method == "POST":
            self.post_routes[(site, path)] = handler
        elif any_query:
            self.any_query_routes[(site, path)] = handler
        else:
            self.routes[(site, path)] = handler

    def start(self) -> TestWeb:
        for site, ip in enumerate(self.ips):
            server = _Server((ip, 0), self._handler(site))
            self._servers.append(server)
            self.ports.append(server.server_address[1])
            threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
        return self

    def stop(self) -> None:
        for s in self._servers:
            s.shutdown()
            s.server_close()

    def hits(self) -> list[Hit]:
        with self._lock:
            return list(self.log)

    def render_href(self, here: int, here_path: str, link: Link, rng: random.Random) -> str:
        path = link.path
        if "?" in path:  # reorder the query: canonically the same URL
            base, q = path.split("?", 1)
            pairs = parse_qsl(q)
            rng.shuffle(pairs)
            path = f"{base}?{urlencode(pairs)}"
        style = rng.randrange(6)
        if link.site != here or style == 0:
            origin = self.origin(link.site)
            if style == 1:
                origin = origin.upper().replace("HTTP://", "HTTP://")
            return origin + path
        if style == 2 and path.startswith("/p/") and here_path.startswith("/p/"):
            return path[3:]  # relative to <base href="/p/">
        if style == 3:
            return path + "#section"
        if style == 4 and path.startswith("/p/"):
            return "/p/../p/" + path[3:]
        return path

    @staticmethod
    def article(site: int, path: str) -> tuple[str, list[str]]:
        """The heading and paragraphs of a page's article (``articles=True``)."""
        heading = f"Field notes from site {site} at {path}"
        paragraphs = [
            f"This article of site {site} at {path} describes how the river valley changed over the last "
            f"century, as farms gave way to orchards and the old mill became a library.",
            "Residents remember the floods of the early years, when the water reached the church steps and "
            "the school moved to the hill for a whole winter while the town rebuilt its bridges.",
            "Today the valley is known for its apples, its quiet roads and a festival every autumn that "
            "draws visitors from the neighbouring towns to taste the year's first cider.",
        ]
        return heading, paragraphs

    def render(self, site: int, path: str) -> bytes:
        page = self.model.pages[(site, path)]
        rng = random.Random(zlib.crc32(f"{site} {path} {self.model.seed}".encode()))
        items = []
        for link in page.links:
            rel = ' rel="nofollow"' if link.nofollow else ""
            items.append(f'<li><a href="{self.render_href(site, path, link, rng)}"{rel}>link {link.path}</a></li>')
        base = '<base href="/p/">' if path.startswith("/p/") else ""
        pad = ("<p>" + "lorem ipsum dolor sit amet " * (self.filler // 27) + "</p>") if self.filler else ""
        revision = f"<p>revision {page.version}</p>" if page.version else ""
        article = ""
        if self.articles:
            heading, paragraphs = self.article(site, path)
            article = (f"<article><h2>{escape(heading)}</h2>"
                       + "".join(f"<p>{escape(p)}</p>" for p in paragraphs) + "</article>")
        lang = " lang=en" if self.articles else ""
        html = (f"<!doctype html><html{lang}><head><meta charset=utf-8><title>Site {site} {path}</title>{base}"
                f"</head><body><h1>Site {site}</h1>{revision}{article}<ul>{''.join(items)}</ul>{pad}</body></html>")
        return html.encode()

    def _handler(self, site: int) -> type[BaseHTTPRequestHandler]:
        web = self

        class H(QuietHandler):
            status = 0

            def do_GET(self) -> None:
                start = time.time()
                parts = urlsplit(self.path)
                path = parts.path + (f"?{urlencode(sorted(parse_qsl(parts.query)))}" if parts.query else "")
                self.status = 0
                try:
                    self._serve(site, path)
                finally:
                    with web._lock:
                        web.log.append(Hit(site, path, start, self.headers.get("User-Agent", ""), time.time(),
                                           self.headers.get("Host", ""), self.status))

            def do_POST(self) -> None:
                start = time.time()
                path = urlsplit(self.path).path
                self.status = 0
                try:
                    handler = web.post_routes.get((site, path))
                    if handler is None:
                        self.rfile.read(int(self.headers.get("Content-Length") or 0))
                        self._send(405, b"<html><title>no</title></html>")
                    else:
                        handler(self)
                finally:
                    with web._lock:
                        web.log.append(Hit(site, "POST " + path, start, self.headers.get("User-Agent", ""),
                                           time.time(), self.headers.get("Host", ""), self.status))

            def _serve(self, site: int, path: str) -> None:
                custom = web.routes.get((site, path)) or web.any_query_routes.get((site, path.split("?", 1)[0]))
                if custom is not None:
                    custom(self)
                    return
                if web.noisy and site == 0:
                    self._noisy(path)
                    return
                page = web.model.pages.get((site, path))
                if page is None or page.status != 200:
                    self._send(404 if page is None else page.status, b"<html><title>missing</title></html>")
                    return
                body = web.render(site, path)
                etag = f'"{hashlib.sha1(body).hexdigest()[:16]}"'
                modified = formatdate(1_700_000_000 + 86400 * page.version, usegmt=True)
                validators = [("ETag", etag), ("Last-Modified", modified)]
                if web.conditional and (self.headers.get("If-None-Match") == etag or (
                        "If-None-Match" not in self.headers and self.headers.get("If-Modified-Since") == modified)):
                    self._send(304, b"", headers=validators)
                    return
                self._send(200, body, headers=validators)

            def _noisy(self, path: str) -> None:
                if path in noisy.NOISE_PATHS:
                    self._send(200, noisy.plain_page(path))
                    return
                num = path[len("/p/"):-len(".html")] if path.startswith("/p/") and path.endswith(".html") else ""
                if num.isdigit() and int(num) < web.noisy:
                    self._send(200, noisy.noisy_page(int(num), pages=web.noisy).html)
                    return
                self._send(404, b"<html><title>missing</title></html>")

            def _send(self, status: int, body: bytes, ctype: str = "text/html; charset=utf-8",
                      headers: list[tuple[str, str]] | None = None) -> None:
                self.status = status
                self.send_response(status)
                if status != 304:
                    self.send_header("Content-Type", ctype)
                for name, value in headers or []:
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        return H
