"""Real parts only: a private redis-server per test process (never the machine's 6379), a fresh
Redis database per test, the synthetic web on loopback, and real Celery worker processes."""

from __future__ import annotations

import itertools
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from crawler.local.redis_server import RedisServer
from crawler.testweb import TestWeb, WebModel

ROOT = Path(__file__).resolve().parent.parent

# The loopback networks the test webs live on. Everything else, 127.0.9.0/24 included, stays
# blocked by the network guard, as it is for a real crawl.
TEST_NETWORKS = "127.0.0.1/32,127.0.1.0/24,127.0.2.0/24,127.0.4.0/24"


@pytest.fixture(autouse=True)
def _test_networks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRAWLER_ALLOW_NETWORKS", TEST_NETWORKS)


# Where the suite's own spiders live: the only directories its submitters and the workers it
# starts (they inherit the environment) may load spider files and modules from.
SPIDER_DIRS = (ROOT / "tests" / "spiders", ROOT / "examples")


@pytest.fixture(autouse=True)
def _test_spider_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRAWLER_SPIDER_PATHS", os.pathsep.join(map(str, SPIDER_DIRS)))


@pytest.fixture(autouse=True)
def _session_key(monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh session key (``crawler.config.secretbox``) for the test process and the workers it starts,
    as every worker of a cluster has one; a test about its absence removes it."""
    from crawler.config.secretbox import KEY_FILE_VAR, KEY_VAR, new_key

    key = new_key()
    monkeypatch.setenv(KEY_VAR, key)
    monkeypatch.delenv(KEY_FILE_VAR, raising=False)
    return key


# Integration modules whose subject is not Redis (the browser, parsing and spiders, fetching, the
# store, secrets): their Redis use is what the rest of the suite covers already, so the second
# pass on the oldest supported Redis (``make test``) leaves them out, as it does chaos runs.
REDIS_INCIDENTAL = frozenset({
    "render", "render_appshell", "render_browser", "render_console", "render_guard", "web_console", "web_guard",
    "scrapy_compat", "spiders", "spider_paths", "quotes_site", "extract", "forms", "hostile", "bombs", "fetch",
    "cookies", "redirect_loops", "scope", "noise_links", "sitemaps", "stop_signals", "pg_server", "store",
    "store_backends", "items_store", "secrets", "session_secrecy",
})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        path = Path(str(item.fspath))
        if path.parent.name == "integration" and path.stem.removeprefix("test_") in REDIS_INCIDENTAL:
            item.add_marker(pytest.mark.redis_incidental)


def pytest_report_header(config: pytest.Config) -> str:
    from crawler.local.redis_server import find_redis_server

    return f"private Redis servers: {find_redis_server()} (CRAWLER_REDIS_SERVER picks another)"


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    with RedisServer() as server:
        yield server


_dbs = itertools.count(1)


@pytest.fixture
def redis_url(redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch) -> str:
    url = f"redis://127.0.0.1:{redis_server.port}/{next(_dbs) % 63 + 1}"
    client = redis.Redis.from_url(url)
    client.flushdb()
    client.close()
    monkeypatch.setenv("CRAWLER_REDIS_URL", url)
    return url


@pytest.fixture
def r(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


@pytest.fixture
def make_web() -> Iterator[Callable[..., TestWeb]]:
    webs: list[TestWeb] = []

    def make(sites: int, pages: int, *, seed: int = 1, **kw: object) -> TestWeb:
        web = TestWeb(WebModel(sites, pages, seed=seed), **kw).start()
        webs.append(web)
        return web

    yield make
    for web in webs:
        web.stop()


class Workers:
    """Real ``celery -A crawler worker`` processes, as an operator would run them."""

    def __init__(self, redis_url: str, log_dir: Path) -> None:
        self.redis_url = redis_url
        self.log_dir = log_dir
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, queues: str, *, wait: bool = True, env: dict[str, str] | None = None,
              pool: str = "solo") -> subprocess.Popen[bytes]:
        log = self.log_dir / f"{name}.log"
        cmd = [sys.executable, "-m", "celery", "-A", "crawler", "worker", "-Q", queues, "-n", f"{name}@%h",
               "--pool", pool, "--without-gossip", "--without-mingle", "--loglevel", "INFO",
               "--logfile", str(log)]
        full_env = {**os.environ, "CRAWLER_REDIS_URL": self.redis_url, **(env or {})}
        proc = subprocess.Popen(cmd, env=full_env, cwd=ROOT, stdout=subprocess.DEVNULL,
                                stderr=open(self.log_dir / f"{name}.stderr", "wb"))  # noqa: SIM115
        self.procs[name] = proc
        if wait:
            self.wait_ready(name)
        return proc

    def wait_ready(self, name: str, timeout: float = 30.0) -> None:
        log = self.log_dir / f"{name}.log"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if log.exists() and "ready." in log.read_text(errors="replace"):
                return
            if self.procs[name].poll() is not None:
                raise RuntimeError(f"worker {name} exited: {(self.log_dir / f'{name}.stderr').read_text()[-2000:]}")
            time.sleep(0.1)
        raise TimeoutError(f"worker {name} not ready after {timeout}s")

    def stop(self, name: str | None = None, timeout: float = 15.0) -> None:
        for n in [name] if name else list(self.procs):
            p = self.procs.pop(n)
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()


@pytest.fixture
def workers(redis_url: str, tmp_path: Path) -> Iterator[Workers]:
    w = Workers(redis_url, tmp_path)
    yield w
    w.stop()


def rows_by_url(db: Path) -> dict[str, dict[str, Any]]:
    """Every row of an SQLite store's pages table, by URL."""
    conn = sqlite3.connect(db)
    conn.row_factory = sqlite3.Row
    try:
        return {r["url"]: dict(r) for r in conn.execute("SELECT * FROM pages")}
    finally:
        conn.close()


def stored_items(store_url: str, job_id: str) -> list[dict[str, Any]]:
    """The items a job's spider yielded, as a store (any backend) holds them."""
    from crawler.store import open_store

    store = open_store(store_url)
    try:
        return [row["item"] for row in store.items(job_id)]
    finally:
        store.close()


def wait_done(client: redis.Redis, job_id: str, timeout: float = 90.0) -> dict[str, object]:
    from crawler import jobs

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = jobs.status(client, job_id)
        if st["status"] in jobs.FINISHED:
            return st
        time.sleep(0.1)
    raise TimeoutError(f"job {job_id} not done after {timeout}s: {jobs.status(client, job_id)}")


@pytest.fixture(scope="session")
def postgres_admin() -> Iterator[str]:
    """A PostgreSQL server to create throwaway databases in, as the superuser: the one
    ``CRAWLER_TEST_POSTGRES`` names, else a private server per test process (never the machine's
    5432), started on first use and stopped at the end of the session."""
    external = os.environ.get("CRAWLER_TEST_POSTGRES", "")
    if external:
        yield external
        return
    from crawler.local.pg_server import PgServer

    with PgServer() as server:
        yield server.admin_url


def fresh_database(admin_url: str) -> str:
    """A new empty database on the server of ``admin_url``; its URL."""
    import uuid

    import psycopg

    name = f"crawler_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    return f"{admin_url.rsplit('/', 1)[0]}/{name}"


@pytest.fixture
def pg_url(postgres_admin: str) -> Iterator[str]:
    """A fresh PostgreSQL database for one test, dropped afterwards."""
    import psycopg

    url = fresh_database(postgres_admin)
    try:
        yield url
    finally:
        with psycopg.connect(postgres_admin, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {url.rsplit('/', 1)[1]} WITH (FORCE)")


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Each store backend in turn."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'crawl.db'}"
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture(autouse=True)
def _never_the_machines_redis(monkeypatch: pytest.MonkeyPatch) -> None:
    """Anything in the test process that falls back to the default broker (6379) fails loudly
    instead of quietly using a Redis the suite does not own."""
    from crawler import app

    monkeypatch.setattr(app.conf, "broker_url", "redis://127.0.0.1:1/0")
