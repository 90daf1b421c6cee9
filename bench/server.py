"""Static servers for the benchmark web: nginx when the machine has it, else a single-threaded
asyncio server answering from pages held in memory. Either logs every request (time, status,
address, target) so completeness and duplicate fetches are counted by the server, the same way for
every crawler, and either runs as its own process so its CPU is measured apart.

    python -m bench.server ROOT PORT LOG IP [IP ...]   # the asyncio server, until SIGTERM
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from bench.web import file_of


@dataclass(frozen=True)
class Request:
    at: float
    status: int
    ip: str
    target: str


def _response(status: int, body: bytes) -> bytes:
    reason = {200: "OK", 404: "Not Found"}[status]
    head = (f"HTTP/1.1 {status} {reason}\r\nServer: bench\r\nContent-Type: text/html; charset=utf-8\r\n"
            f"Content-Length: {len(body)}\r\n\r\n")
    return head.encode() + body


class _Http(asyncio.Protocol):
    def __init__(self, pages: dict[tuple[str, str], bytes], log: list[tuple[float, int, str, str]],
                 slow: dict[str, float] | None = None) -> None:
        self.pages = pages
        self.log = log
        self.slow = slow or {}  # address -> seconds each of its answers waits (a slow server)
        self.buf = b""
        self.ip = ""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.ip = transport.get_extra_info("sockname")[0]

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while (end := self.buf.find(b"\r\n\r\n")) >= 0:
            head, self.buf = self.buf[:end], self.buf[end + 4 :]
            line = head.split(b"\r\n", 1)[0].split(b" ")
            target = line[1].decode("latin-1") if len(line) > 2 else "/"
            path = target.split("?", 1)[0].split("#", 1)[0]
            reply = self.pages.get((self.ip, path))
            status = 200 if reply is not None else 404
            self.log.append((time.time(), status, self.ip, target))
            close = b"connection: close" in head.lower()
            wait = self.slow.get(self.ip, 0.0)
            if wait:  # answers on one connection keep their order: each waits as long
                asyncio.get_running_loop().call_later(wait, self._answer, reply, close)
            else:
                self._answer(reply, close)
            if close:
                return

    def _answer(self, reply: bytes | None, close: bool) -> None:
        assert self.transport is not None
        if self.transport.is_closing():
            return
        self.transport.write(reply if reply is not None else _NOT_FOUND)
        if close:
            self.transport.close()


_NOT_FOUND = _response(404, b"<html><body>not found</body></html>")


def load_pages(root: Path, ips: list[str]) -> dict[tuple[str, str], bytes]:
    pages: dict[tuple[str, str], bytes] = {}
    for ip in ips:
        base = root / ip
        for f in base.rglob("*.html"):
            rel = "/" + str(f.relative_to(base))
            pages[(ip, rel)] = _response(200, f.read_bytes())
            if rel == "/" + file_of("/"):
                pages[(ip, "/")] = pages[(ip, rel)]
        robots = base / "robots.txt"
        if robots.exists():  # a web that has one (bench/polite.py); otherwise robots.txt is a 404
            pages[(ip, "/robots.txt")] = _response(200, robots.read_bytes())
    return pages


SLOW_ENV = "BENCH_SLOW"  # "<seconds> <ip> <ip> ...": addresses that answer that much later


def serve(root: Path, port: int, log_path: Path, ips: list[str]) -> None:
    pages = load_pages(root, ips)
    log: list[tuple[float, int, str, str]] = []
    wait, *slow_ips = os.environ.get(SLOW_ENV, "0").split()
    slow = dict.fromkeys(slow_ips, float(wait))
    loop = asyncio.new_event_loop()
    servers = [loop.run_until_complete(loop.create_server(lambda: _Http(pages, log, slow), ip, port, backlog=1024,
                                                          reuse_address=True)) for ip in ips]
    loop.add_signal_handler(signal.SIGTERM, loop.stop)
    print("ready", flush=True)
    loop.run_forever()
    for s in servers:
        s.close()
    with open(log_path, "w") as out:
        out.writelines(f"{at:.3f} {status} {ip} {target}\n" for at, status, ip, target in log)


def port_free(ips: list[str], port: int) -> bool:
    for ip in ips:
        with socket.socket() as s:
            try:
                s.bind((ip, port))
            except OSError:
                return False
    return True


def free_port(ips: list[str]) -> int:
    for _ in range(50):
        with socket.socket() as s:
            s.bind((ips[0], 0))
            port = s.getsockname()[1]
        if port_free(ips, port):
            return port
    raise RuntimeError("no port free on every benchmark address")


class StaticServer:
    """One run's server: started fresh per run so its log and CPU belong to that run."""

    kind = ""

    def __init__(self, root: Path, ips: list[str], port: int) -> None:
        self.root = root
        self.ips = ips
        self.port = port
        self.dir = Path(tempfile.mkdtemp(prefix=f"bench-{self.kind}-"))
        self.log_path = self.dir / "access.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def pids(self) -> list[int]:
        if self.proc is None:
            return []
        p = psutil.Process(self.proc.pid)
        return [p.pid] + [c.pid for c in p.children(recursive=True)]

    def _wait_listening(self, timeout: float = 120.0) -> None:  # a big web takes a while to load
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.kind} exited with {self.proc.returncode}; see {self.dir}")
            try:
                with socket.create_connection((self.ips[-1], self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"{self.kind} did not start listening on port {self.port}")

    def requests(self) -> list[Request]:
        out = []
        for line in self.log_path.read_text().splitlines():
            at, status, ip, target = line.split(" ", 3)
            out.append(Request(float(at), int(status), ip, target))
        return out

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


class PythonServer(StaticServer):
    kind = "asyncio"

    def __init__(self, root: Path, ips: list[str], port: int, slow: tuple[float, list[str]] | None = None) -> None:
        super().__init__(root, ips, port)
        self.slow = slow  # (seconds, addresses) that answer that much later

    def start(self) -> PythonServer:
        env = dict(os.environ)
        env.pop(SLOW_ENV, None)
        if self.slow:
            env[SLOW_ENV] = " ".join([repr(self.slow[0]), *self.slow[1]])
        self.proc = subprocess.Popen([sys.executable, "-m", "bench.server", str(self.root), str(self.port),
                                      str(self.log_path), *self.ips], stdout=subprocess.DEVNULL, env=env)
        self._wait_listening()
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(30)


class NginxServer(StaticServer):
    kind = "nginx"

    def start(self) -> NginxServer:
        servers = "".join(
            f"server {{ listen {ip}:{self.port} reuseport; root {self.root / ip}; index index.html; }}\n"
            for ip in self.ips)
        # One worker: nginx's per-request cost is small and a single process is easy to attribute.
        user = "user root root;\n" if os.geteuid() == 0 else ""
        conf = (f"{user}worker_processes 1;\npid {self.dir}/nginx.pid;\nerror_log {self.dir}/error.log warn;\n"
                "events { worker_connections 4096; }\n"
                "http {\n  default_type text/html;\n  types { text/html html; }\n"
                f"  client_body_temp_path {self.dir}; proxy_temp_path {self.dir}; fastcgi_temp_path {self.dir};\n"
                f"  uwsgi_temp_path {self.dir}; scgi_temp_path {self.dir};\n"
                "  log_format bench '$msec $status $server_addr $request_uri';\n"
                f"  access_log {self.log_path} bench buffer=256k flush=1s;\n"
                "  sendfile on; tcp_nopush on; keepalive_requests 100000; keepalive_timeout 60s;\n"
                "  open_file_cache max=20000 inactive=60s;\n"
                f"{servers}}}\n")
        (self.dir / "nginx.conf").write_text(conf)
        cmd = [nginx_binary() or "nginx", "-p", str(self.dir), "-c", str(self.dir / "nginx.conf"), "-g", "daemon off;"]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self._wait_listening()
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT)  # graceful: workers flush the access log
            self.proc.wait(30)


def nginx_binary() -> str | None:
    return shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx", "/usr/local/nginx/sbin/nginx")
                                          if os.access(p, os.X_OK)), None)


def make_server(kind: str, root: Path, ips: list[str], port: int,
                slow: tuple[float, list[str]] | None = None) -> StaticServer:
    """``kind``: nginx, asyncio, or auto (nginx if installed); ``slow``: (seconds, addresses)
    whose answers wait that long (the asyncio server only)."""
    if slow:
        return PythonServer(root, ips, port, slow)
    if kind == "auto":
        kind = "nginx" if nginx_binary() else "asyncio"
    if kind == "nginx":
        if not nginx_binary():
            raise RuntimeError("nginx is not installed (apt-get install nginx-light), use --server asyncio")
        return NginxServer(root, ips, port)
    return PythonServer(root, ips, port)


if __name__ == "__main__":
    serve(Path(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3]), sys.argv[4:])
