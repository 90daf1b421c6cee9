"""A private PostgreSQL server on a free loopback port, for tests (as ``redis_server`` is for Redis).

The binaries come from ``CRAWLER_PG_BIN`` (a directory holding ``initdb`` and ``postgres``), else
the ``initdb`` on PATH, else the newest ``/usr/lib/postgresql/*/bin``. The cluster lives in a
temporary directory (its unix socket too), with trust authentication for the superuser
``postgres`` and no durability work (fsync off): it is a scratch server. PostgreSQL refuses to
run as root, so as root it runs as the ``postgres`` user (``CRAWLER_PG_USER`` names another).
``stop()`` shuts the server down and keeps its data, so ``start()`` brings the same cluster back
on the same port (an outage, as a test needs); ``close()`` also removes the directory.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg

from crawler.errors import CrawlerError
from crawler.local.redis_server import free_port


class PgServerError(CrawlerError, RuntimeError):
    pass


def _version_key(path: Path) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", path.parent.name))


def find_pg_bin() -> Path:
    """The directory whose ``initdb`` and ``postgres`` to run (they must be of one version)."""
    explicit = os.environ.get("CRAWLER_PG_BIN", "")
    if explicit:
        candidates = [Path(explicit)]
    else:
        on_path = shutil.which("initdb")
        # Debian links only some tools into PATH; the real directory holds postgres as well.
        candidates = [Path(os.path.realpath(on_path)).parent] if on_path else []
        candidates += sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=_version_key, reverse=True)
    for d in candidates:
        if all(os.access(d / tool, os.X_OK) for tool in ("initdb", "postgres")):
            return d
    where = f"CRAWLER_PG_BIN={explicit}" if explicit else "PATH or /usr/lib/postgresql/*/bin"
    raise PgServerError(f"no PostgreSQL initdb and postgres found in {where}; install PostgreSQL "
                        "or set CRAWLER_TEST_POSTGRES to a server the tests may create databases in")


def run_as() -> pwd.struct_passwd | None:
    """The account to run PostgreSQL as: None when we are not root, else ``postgres``."""
    if os.geteuid() != 0:
        return None
    name = os.environ.get("CRAWLER_PG_USER", "postgres")
    try:
        return pwd.getpwnam(name)
    except KeyError:
        raise PgServerError(f"running as root, and PostgreSQL refuses to run as root, but there is no user "
                            f"{name!r} to run it as: create one (useradd --system {name}), set CRAWLER_PG_USER "
                            f"to another, or set CRAWLER_TEST_POSTGRES to a running server") from None


class PgServer:
    def __init__(self, *, port: int | None = None) -> None:
        self.port = port or free_port()
        self.bin = find_pg_bin()
        self.user = run_as()
        self.dir = Path(tempfile.mkdtemp(prefix="crawler-pg-"))
        self.data = self.dir / "data"
        self.log = self.dir / "postgres.log"
        self.proc: subprocess.Popen[bytes] | None = None
        if self.user:
            os.chown(self.dir, self.user.pw_uid, self.user.pw_gid)

    @property
    def admin_url(self) -> str:
        """The superuser's URL, for creating and dropping databases."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _cmd(self, *args: str) -> list[str]:
        if not self.user:
            return list(args)
        # setpriv execs in place (runuser would fork), so our child's pid is the postmaster's.
        return ["setpriv", f"--reuid={self.user.pw_uid}", f"--regid={self.user.pw_gid}", "--clear-groups",
                "--reset-env", "--", *args]

    def _initdb(self) -> None:
        done = subprocess.run(
            self._cmd(str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust",
                      "--no-locale", "-E", "UTF8", "--no-sync"),
            capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise PgServerError(f"initdb failed ({done.returncode}): {(done.stderr or done.stdout).strip()[-500:]}")

    def start(self, timeout: float = 30.0) -> PgServer:
        if self.proc and self.proc.poll() is None:
            return self
        if not (self.data / "PG_VERSION").exists():
            self._initdb()
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                self._cmd(str(self.bin / "postgres"), "-D", str(self.data), "-p", str(self.port),
                          "-c", "listen_addresses=127.0.0.1", "-c", f"unix_socket_directories={self.dir}",
                          "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
                          "-c", "shared_buffers=16MB", "-c", "max_connections=200"),
                stdout=log, stderr=log, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise PgServerError(f"postgres exited with {self.proc.returncode}: {self.log_tail()}")
            try:
                with psycopg.connect(self.admin_url, connect_timeout=2) as conn:
                    # Whoever answers must be our server: the port may have been taken meanwhile.
                    row = conn.execute("SELECT current_setting('data_directory')").fetchone()
                if row and Path(row[0]).resolve() == self.data.resolve():
                    return self
                raise PgServerError(f"port {self.port} is answered by another PostgreSQL ({row})")
            except psycopg.OperationalError:
                time.sleep(0.1)
        self.stop()
        raise PgServerError(f"postgres did not answer on port {self.port} within {timeout}s: {self.log_tail()}")

    def stop(self, timeout: float = 20.0) -> None:
        """Fast shutdown (SIGINT: sessions are ended, work is written); the data stays."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                # The postmaster's children are in its process group: none outlives it.
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.proc = None

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def log_tail(self, chars: int = 500) -> str:
        try:
            return self.log.read_text(errors="replace").strip()[-chars:]
        except OSError:
            return ""

    def __enter__(self) -> PgServer:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc: object) -> None:
        self.close()
