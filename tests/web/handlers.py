"""Route handlers for pathological servers: redirects, statuses, slow and odd bodies."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler

Handler = Callable[[BaseHTTPRequestHandler], None]


def body(data: bytes, status: int = 200, ctype: str = "text/html", headers: dict[str, str] | None = None) -> Handler:
    def handler(h: BaseHTTPRequestHandler) -> None:
        h.send_response(status)
        for k, v in {"Content-Type": ctype, "Content-Length": str(len(data)), **(headers or {})}.items():
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(data)
    return handler


def redirect(to: str, status: int = 301) -> Handler:
    return body(b"", status, headers={"Location": to})


def sequence(*handlers: Handler) -> Handler:
    """The n-th request gets the n-th handler; the last one repeats."""
    lock = threading.Lock()
    calls = [0]

    def handler(h: BaseHTTPRequestHandler) -> None:
        with lock:
            i = min(calls[0], len(handlers) - 1)
            calls[0] += 1
        handlers[i](h)
    return handler


def slow(seconds: float, then: Handler) -> Handler:
    def handler(h: BaseHTTPRequestHandler) -> None:
        time.sleep(seconds)
        then(h)
    return handler


def html(title: str, links: list[str] = (), extra: str = "") -> bytes:
    anchors = "".join(f'<a href="{u}">{u}</a>' for u in links)
    return f"<html><head><title>{title}</title></head><body>{anchors}{extra}</body></html>".encode()


def trickle(chunks: int = 30, every: float = 1.0) -> Handler:
    """Promises a large body, then sends one byte per ``every`` seconds."""
    def handler(h: BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "text/html")
        h.send_header("Content-Length", "100000")
        h.end_headers()
        for _ in range(chunks):
            h.wfile.write(b"x")
            h.wfile.flush()
            time.sleep(every)
    return handler
