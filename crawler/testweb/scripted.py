"""Two loopback hosts for the render tests: one that builds its pages in the browser, one that
does not.

The scripted host's HTML holds no links and little text: scripts add them, some at once, some
after a delay (``/slow``: on a timer longer than ``render_settle``, with nothing else happening
before it). Among its pages, one script never ends (``/loop``), one never stops changing its page
after adding a link (``/busy``: read at its deadline as it stands), and one asks for an address
no crawl may reach (``/blocked``: 10.255.255.1, which the guard must refuse before a packet
leaves) and then adds a link. The plain host is a chain of ordinary pages. ``reachable`` is
what a browser-equipped crawl must find; ``served`` counts what each host was asked for.
"""

from __future__ import annotations

import threading
from collections import Counter
from http.server import ThreadingHTTPServer

from crawler.testweb.server import QuietHandler

SCRIPTED_PAGES = ("/a1", "/a2", "/a3", "/a4")
TIMEOUT_PAGES = ("/loop", "/busy")  # rendered only until their deadline
LEAVES = ("/late1", "/late2", *(f"/leaf{i}" for i in range(1, 5)), "/slow-leaf", "/after-busy", "/after-blocked")
PLAIN_CHAIN = 8
FILLER = ("The quick brown fox jumps over the lazy dog while the crawler reads every word of it. " * 12).strip()


def _page(title: str, body: str = "", script: str = "") -> bytes:
    return (f"<!DOCTYPE html><html><head><title>{title}</title></head><body><main id=main>{body}</main>"
            f"<script>{script}</script></body></html>").encode()


def _add_links(paths: list[str], text: str = "") -> str:
    """JavaScript that appends these links (and a paragraph) to the page."""
    adds = "".join(f"a=document.createElement('a');a.href='{p}';a.textContent='{p}';m.appendChild(a);" for p in paths)
    para = f"p=document.createElement('p');p.textContent={text!r};m.appendChild(p);" if text else ""
    return f"var m=document.getElementById('main'),a,p;{adds}{para}"


class ScriptedWeb:
    def __init__(self, scripted_ip: str = "127.0.4.10", plain_ip: str = "127.0.4.11") -> None:
        self.ips = (scripted_ip, plain_ip)
        self.served: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()
        self._servers: list[ThreadingHTTPServer] = []
        self.port = 0

    def origin(self, ip: str) -> str:
        return f"http://{ip}:{self.port}"

    def seeds(self) -> list[str]:
        return [self.origin(self.ips[0]) + "/"]

    def scripted_paths(self) -> list[str]:
        return ["/", *SCRIPTED_PAGES, "/slow", *TIMEOUT_PAGES, "/blocked", *LEAVES]

    def plain_paths(self) -> list[str]:
        return ["/", *(f"/p{i}" for i in range(1, PLAIN_CHAIN + 1))]

    def reachable(self) -> set[str]:
        js, plain = (self.origin(ip) for ip in self.ips)
        return {js + p for p in self.scripted_paths()} | {plain + p for p in self.plain_paths()}

    def body(self, ip: str, path: str) -> bytes | None:
        plain = self.origin(self.ips[1])
        if ip == self.ips[1]:
            if path == "/":
                return _page("plain home", f"<p>{FILLER}</p><a href='/p1'>first</a>")
            n = int(path[2:]) if path.startswith("/p") and path[2:].isdigit() else 0
            if not 1 <= n <= PLAIN_CHAIN:
                return None
            nxt = f"<a href='/p{n + 1}'>next</a>" if n < PLAIN_CHAIN else ""
            return _page(f"plain {n}", f"<p>{FILLER}</p>{nxt}")
        if path == "/":
            now = _add_links([*SCRIPTED_PAGES, "/slow", *TIMEOUT_PAGES, "/blocked", plain + "/"], FILLER)
            later = _add_links(["/late1", "/late2"])
            return _page("scripted home", "", f"{now}setTimeout(function(){{{later}}}, 200);")
        if path in SCRIPTED_PAGES:
            i = SCRIPTED_PAGES.index(path) + 1
            return _page(f"scripted {i}", "", _add_links([f"/leaf{i}"], FILLER))
        if path in LEAVES:
            return _page(path[1:], "", _add_links([], FILLER))
        if path == "/slow":
            return _page("slow", "", f"setTimeout(function(){{{_add_links(['/slow-leaf'], FILLER)}}}, 1200);")
        if path == "/loop":
            return _page("loop", "<p>a script that never ends</p>", "while (true) {}")
        if path == "/busy":
            tick = "setInterval(function(){document.getElementById('tick').textContent=Date.now();}, 100);"
            return _page("busy", "<p id=tick></p>", _add_links(["/after-busy"], FILLER) + tick)
        if path == "/blocked":
            steal = ("fetch('http://10.255.255.1/steal').catch(function(){}).finally(function(){"
                     + _add_links(["/after-blocked"], FILLER) + "});")
            return _page("blocked", "", steal)
        return None

    def start(self) -> ScriptedWeb:
        web = self

        class Handler(QuietHandler):
            def do_GET(self) -> None:
                ip = str(self.server.server_address[0])  # type: ignore[index]  # an AF_INET address here
                path = self.path.split("?", 1)[0]
                with web._lock:
                    web.served[(str(ip), path)] += 1
                body = web.body(str(ip), path)
                self.send_response(200 if body is not None else 404)
                body = body if body is not None else b"not found"
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        first = ThreadingHTTPServer((self.ips[0], 0), Handler)
        self.port = first.server_address[1]
        self._servers = [first, ThreadingHTTPServer((self.ips[1], self.port), Handler)]
        for s in self._servers:
            s.daemon_threads = True
            threading.Thread(target=s.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        for s in self._servers:
            s.shutdown()
            s.server_close()
