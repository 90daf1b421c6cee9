"""A loopback site built the way script-built sites are: every page is the same empty shell that
loads a production build of a real front-end framework (Vue 3's ``vue.global.prod.js``, vendored
from the npm registry's ``vue`` package, MIT) and the app's own ``/static/routes.js`` and
``/static/app.js`` as external files. The app builds each page's text and links at once, after
300 ms, after 800 ms and from a ``fetch()`` of ``/api/page.json``, and routes with
``history.pushState``.

Among its pages, hostile ones (built by the same app): ``/hostile/popup`` opens a window,
``/hostile/form`` submits a form by POST, ``/hostile/redirect`` sends the page elsewhere by
``location`` (its target is a page to find), ``/hostile/canary`` asks for an address on a network
no crawl may reach (``canary_ip``, a server that counts what reaches it), ``/hostile/metadata`` for
the cloud metadata address and a private one (169.254.169.254, 10.0.0.1: out of the job's scope)
and ``/hostile/robots`` for a path robots.txt disallows; those three add a link once their
requests are over. ``/hostile/dialog`` raises an alert, a confirm, a prompt and sets a
beforeunload handler before adding its link; ``/hostile/download`` clicks, by script, a link to an
attachment (``Content-Disposition: attachment``, never to be asked for by the browser) and one
to a blob, then adds its link. ``/hostile/loop`` never yields (``while (true) {}``) once loaded;
``/hostile/storm`` adds its link, then starts a hundred ``setInterval`` timers that change the
page for ever: the first can only be stored from its HTML, the second as it stood at its
deadline.

``reachable`` is what a browser-equipped crawl must find; ``served`` counts what was asked for,
by (method, path); ``never`` lists what must never be asked for.
"""

from __future__ import annotations

import json
import sys
import threading
from collections import Counter
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from crawler.testweb.server import QuietHandler

STATIC = Path(__file__).with_name("static")
TEXT = ("Every word of this paragraph was put here by the application's script after the page loaded, "
        "the way a single-page application fills its empty shell from its bundle and its data. ") * 6
ROBOTS = b"User-agent: *\nDisallow: /private/\n"
HOSTILE = ("/hostile/popup", "/hostile/form", "/hostile/redirect", "/hostile/canary", "/hostile/robots",
           "/hostile/metadata", "/hostile/dialog", "/hostile/download", "/hostile/loop", "/hostile/storm")
# Read only until the render's deadline: they never settle.
ENDLESS = ("/hostile/loop", "/hostile/storm")
# Found only through what a hostile page does: a link it adds after its request, or where its
# script sends it.
HOSTILE_LEAVES = ("/hostile/after-popup", "/hostile/redirect-target", "/hostile/after-canary",
                  "/hostile/after-robots", "/hostile/after-metadata", "/hostile/after-dialog",
                  "/hostile/after-download", "/hostile/after-storm")
NEVER = (("GET", "/hostile/popup-target"), ("POST", "/hostile/submit"), ("GET", "/private/data.json"),
         ("GET", "/hostile/file.bin"))


def routes(sections: int) -> dict[str, dict[str, Any]]:
    """path -> the app's page: title, text, links added at once, at 300 ms, at 800 ms, and the
    links its JSON gives (``json``)."""
    pages: dict[str, dict[str, Any]] = {
        "/": {"now": [f"/section/{i}" for i in range(1, sections + 1)], "late": list(HOSTILE[:2]),
              "later": [HOSTILE[2]], "json": [*HOSTILE[3:], "/about"]},
    }
    for i in range(1, sections + 1):
        pages[f"/section/{i}"] = {"now": ["/"], "late": [f"/section/{i}/late"], "later": [f"/section/{i}/later"],
                                  "json": [f"/item/{i}"]}
        for leaf in (f"/section/{i}/late", f"/section/{i}/later", f"/item/{i}"):
            pages[leaf] = {"now": ["/"]}
    for path in ("/about", *HOSTILE, *HOSTILE_LEAVES):
        pages[path] = {"now": ["/"]}
    for path, page in pages.items():
        page.setdefault("late", [])
        page.setdefault("later", [])
        page.setdefault("json", [])
        page["title"] = f"app {path}"
        page["text"] = f"{path}: the part of the page built at once. {TEXT}"
    return pages


SHELL = (b'<!DOCTYPE html><html><head><meta charset="utf-8"><title>App</title>'
         b'<link rel="stylesheet" href="/static/app.css"></head>'
         b'<body><div id="app"></div><noscript>This app needs JavaScript.</noscript>'
         b'<script src="/static/vue.global.prod.js"></script><script src="/static/routes.js"></script>'
         b'<script src="/static/app.js"></script></body></html>')
CSS = b"main { font-family: sans-serif; } nav a { display: block; }"


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A browser closing a page hangs up on what it no longer wants: part of the tests.
        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)


class AppShellWeb:
    def __init__(self, ip: str = "127.0.4.30", canary_ip: str = "127.0.9.1", sections: int = 2) -> None:
        self.ip, self.canary_ip = ip, canary_ip
        self.pages = routes(sections)  # each section: 4 pages, 3 of them linked on timers or from JSON
        self.served: Counter[tuple[str, str]] = Counter()
        self.canary_hits: list[str] = []
        self._lock = threading.Lock()
        self._servers: list[ThreadingHTTPServer] = []
        self.port = 0

    @property
    def origin(self) -> str:
        return f"http://{self.ip}:{self.port}"

    @property
    def canary(self) -> str:
        return f"http://{self.canary_ip}:{self.port}"

    def seeds(self) -> list[str]:
        return [self.origin + "/"]

    def reachable(self) -> set[str]:
        return {self.origin + p for p in self.pages}

    def body(self, method: str, path: str, query: str) -> tuple[int, str, bytes]:
        if method != "GET":
            return 405, "text/plain", b"no"
        if path == "/robots.txt":
            return 200, "text/plain", ROBOTS
        if path == "/static/vue.global.prod.js":
            return 200, "application/javascript", (STATIC / "vue.global.prod.js").read_bytes()
        if path == "/static/app.js":
            return 200, "application/javascript", (STATIC / "app.js").read_bytes()
        if path == "/static/routes.js":
            routes = {"pages": self.pages, "canary": self.canary}
            return 200, "application/javascript", f"window.APP_ROUTES = {json.dumps(routes)};".encode()
        if path == "/static/app.css":
            return 200, "text/css", CSS
        if path == "/hostile/file.bin":
            return 200, "application/octet-stream", b"\0" * 1024
        if path == "/api/page.json":
            page = self.pages.get(parse_qs(query).get("path", [""])[0])
            if page is None:
                return 404, "application/json", b"{}"
            data = {"links": page["json"], "text": f"From the page's data: {TEXT}"}
            return 200, "application/json", json.dumps(data).encode()
        if path in self.pages:
            return 200, "text/html; charset=utf-8", SHELL
        return 404, "text/html; charset=utf-8", b"<html><title>not found</title></html>"

    def start(self) -> AppShellWeb:
        web = self

        class Handler(QuietHandler):
            def _answer(self, method: str) -> None:
                parts = urlsplit(self.path)
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with web._lock:
                    if self.server.server_address[0] == web.canary_ip:  # type: ignore[index]  # AF_INET
                        web.canary_hits.append(self.path)
                    else:
                        web.served[(method, parts.path)] += 1
                status, ctype, body = web.body(method, parts.path, parts.query)
                self.send_response(status)
                if parts.path == "/hostile/file.bin":
                    self.send_header("Content-Disposition", 'attachment; filename="file.bin"')
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                self._answer("GET")

            def do_POST(self) -> None:
                self._answer("POST")

        first = _Server((self.ip, 0), Handler)
        self.port = first.server_address[1]
        self._servers = [first, _Server((self.canary_ip, self.port), Handler)]
        for s in self._servers:
            threading.Thread(target=s.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        for s in self._servers:
            s.shutdown()
            s.server_close()
