"""Session cookies at rest: sealed with the workers' key whenever they sit in Redis, gone when the
job ends, never written in the clear by a worker without a key, and a value that will not open
is a counted, logged error after which the spider logs in again. Real Redis, real HTTP, real
Celery workers; every key of the database read, whatever its type, during and after a crawl."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from cryptography.fernet import Fernet

from crawler import control, jobs, stages
from crawler.config.secretbox import KEY_FILE_VAR, KEY_VAR, SecretBox, new_key
from crawler.config.settings import Settings
from crawler.local.lifeline import PARENT_ENV
from crawler.spiders.sessionstate import SESSION_TTL, SessionState
from crawler.state import joblog, keys
from crawler.store import open_store
from crawler.testweb import TestWeb
from crawler.testweb.login import LoginSite
from tests.conftest import ROOT, Workers, wait_done
from tests.integration.test_session import EXAMPLE, _fetch_all, _files_text, _login_job, _redis_dump


@pytest.fixture
def login_web(make_web: Callable[..., TestWeb]) -> Iterator[tuple[TestWeb, LoginSite]]:
    web = make_web(1, 1)
    site = LoginSite(records=8)
    site.mount(web, 0)
    yield web, site


def _logins(site: LoginSite) -> dict[str, str]:
    return {"CRAWLER_SECRET_LOGIN_USER": site.user, "CRAWLER_SECRET_LOGIN_PASSWORD": site.password}


def _watch(r: redis.Redis, job_id: str, site: LoginSite, timeout: float = 60) -> int:
    """Read every key and value of the database until the job is over, asserting that neither
    the password nor a session id the site issued is in any; returns the samples that found the
    job's session cookies in Redis (sealed)."""
    jar, with_cookies = keys.session_cookies(job_id), 0
    deadline = time.monotonic() + timeout
    while jobs.status(r, job_id)["status"] not in jobs.FINISHED:
        assert time.monotonic() < deadline, jobs.status(r, job_id)
        cookies = r.hlen(jar)
        dump = _redis_dump(r)
        issued = list(site.issued)  # after the dump: any id in it was issued before
        assert site.password not in dump
        assert not [sid for sid in issued if sid in dump]
        if cookies:
            with_cookies += 1
            ttl = r.pttl(jar)
            assert ttl == -2 or 0 < ttl <= SESSION_TTL * 1000  # the backstop (-2: the job just ended)
        time.sleep(0.01)
    return with_cookies


def test_a_login_crawl_keeps_no_cookie_or_password_in_redis_during_or_after_it(
        login_web: tuple[TestWeb, LoginSite], r: redis.Redis, workers: Workers, tmp_path: Path) -> None:
    web, site = login_web
    workers.start("w0", "shard-0,shared", env={"CRAWLER_SHARDS": "1", **_logins(site)})
    job_id = _login_job(r, web, tmp_path, delay=0.1)  # slow enough to look at Redis many times
    sampled = _watch(r, job_id, site)
    assert sampled >= 3, "never saw the session's cookies in Redis while the crawl ran"
    st = wait_done(r, job_id)
    assert st["status"] == jobs.DONE and site.logins == 1 and st["counters"]["logins"] == 1
    assert len(_items(tmp_path, job_id)) == len(site.rows)
    dump = _redis_dump(r)
    assert site.password not in dump and not [sid for sid in site.issued if sid in dump]
    assert not r.exists(*keys.session_all(job_id))  # the job is done: its session is gone
    assert "session_undecryptable" not in st["counters"]


def test_an_embedded_crawl_hands_its_workers_a_key_of_its_own_through_their_environment(
        login_web: tuple[TestWeb, LoginSite], r: redis.Redis, redis_url: str, tmp_path: Path) -> None:
    web, site = login_web
    out = tmp_path / "members"
    env = {k: v for k, v in os.environ.items() if k not in (KEY_VAR, KEY_FILE_VAR)}
    env.update(CRAWLER_REDIS_URL=redis_url, **_logins(site))  # our Redis, so we can read it meanwhile
    crawl = subprocess.Popen(
        [sys.executable, "-m", "crawler", "crawl", web.url(0, "/"), "--spider", EXAMPLE, "--spider-arg",
         f"login_url={web.url(0, '/login')}", "--out", str(out), "--workers", "1", "--delay", "0.1"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        worker_keys: set[str] = set()
        deadline = time.monotonic() + 30
        while not r.zcard(keys.ALL_JOBS) or not worker_keys:
            assert time.monotonic() < deadline and crawl.poll() is None, crawl.stderr and crawl.stderr.read()
            worker_keys |= _children_env(crawl.pid, KEY_VAR)
            time.sleep(0.05)
        [job_id] = jobs.known(r)
        _watch(r, job_id, site)
        stdout, stderr = crawl.communicate(timeout=30)
    finally:
        if crawl.poll() is None:
            crawl.kill()
            crawl.wait()
    assert crawl.returncode == 0, stderr[-3000:]
    [key] = worker_keys  # one key, for every worker of the run
    Fernet(key)  # a Fernet key, made for the run
    assert site.logins == 1 and len((out / "items.jsonl").read_text().splitlines()) == len(site.rows)
    everything = _redis_dump(r) + _files_text(out) + stdout + stderr
    for secret in (key, site.password, *site.issued):
        assert secret not in everything
    assert not r.exists(*keys.session_all(job_id))


def _items(tmp_path: Path, job_id: str) -> list[object]:
    store = open_store(f"sqlite:///{tmp_path}/c.db")
    try:
        return list(store.items(job_id))
    finally:
        store.close()


def _children_env(parent: int, name: str) -> set[str]:
    """The values of ``name`` in the environments of the processes ``parent`` started (the
    crawl's workers, found by the lifeline variable they carry); also checks that no process's
    command line holds one."""
    found, cmdlines = set(), []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            environ = (proc / "environ").read_bytes().split(b"\0")
            cmdlines.append((proc / "cmdline").read_bytes())
        except OSError:
            continue
        if f"{PARENT_ENV}={parent}".encode() in environ:
            found |= {v.decode().partition("=")[2] for v in environ if v.startswith(f"{name}=".encode())}
    assert not [c for c in cmdlines for k in found if k.encode() in c], "a key on a command line"
    return found


def test_a_cookie_that_does_not_decrypt_is_counted_and_the_spider_logs_in_again(
        login_web: tuple[TestWeb, LoginSite], r: redis.Redis, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    web, site = login_web
    for k, v in _logins(site).items():
        monkeypatch.setenv(k, v)
    job_id = _login_job(r, web, tmp_path)
    ctx = stages.Context.default(r)
    _fetch_all(ctx, job_id, r, rounds=2)
    assert site.logins == 1 and r.hlen(keys.session_cookies(job_id)) == 2  # sid, and the index's view
    monkeypatch.setenv(KEY_VAR, new_key())  # this worker's key is now another one
    _fetch_all(ctx, job_id, r)
    counters = {k: int(v) for k, v in jobs.status(r, job_id)["counters"].items()}
    assert counters["session_undecryptable"] == 2 and site.logins == 2 and counters["logins"] == 2
    assert len(_items(tmp_path, job_id)) == len(site.rows)  # every record, none lost to the login form
    [line] = [rec.getMessage() for rec in caplog.records if "did not decrypt" in rec.getMessage()]
    assert line == (f"job {job_id}: 2 session cookie(s) did not decrypt with this worker's key (sealed under "
                    "another key, or changed in Redis): dropped")


def test_tampered_and_rotated_values_at_the_session_state(r: redis.Redis) -> None:
    from crawler.fetch.jar import CookieJar

    old, new = new_key(), new_key()
    state = SessionState(r, "j1", box=SecretBox([old]))
    token = state.lock(5)
    assert token is not None
    jar = CookieJar()
    jar.update("http://127.0.1.1/", [("Set-Cookie", "sid=s3cret-value"), ("Set-Cookie", "pref=dark")])
    assert state.live(token, jar) == 1
    # Rotation: a worker with the new key first and the old one after opens what the old sealed.
    rotated = SessionState(r, "j1", box=SecretBox([new, old]))
    assert {c.value for c in rotated.jar()[1]} == {"s3cret-value", "dark"} and rotated.unreadable == 0
    # A value changed in Redis opens with no key: left out, counted, and removed.
    field = next(f for f in r.hkeys(keys.session_cookies("j1")) if f.endswith(b"\tsid"))
    r.hset(keys.session_cookies("j1"), field, b"gAAAAA" + b"x" * 80)
    _, got = rotated.jar()
    assert [c.name for c in got] == ["pref"] and rotated.unreadable == 1
    assert not r.hexists(keys.session_cookies("j1"), field)


def test_stopping_a_job_deletes_its_session_and_nothing_writes_it_back(
        login_web: tuple[TestWeb, LoginSite], r: redis.Redis, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    web, site = login_web
    for k, v in _logins(site).items():
        monkeypatch.setenv(k, v)
    job_id = _login_job(r, web, tmp_path)
    _fetch_all(stages.Context.default(r), job_id, r, rounds=2)
    state = SessionState(r, job_id)
    generation, jar = state.jar()
    assert generation == 1 and len(jar) == 2 and r.exists(*keys.session_all(job_id)) == 2  # sess, jar
    control.stop(r, job_id)
    assert not r.exists(*keys.session_all(job_id))
    # A fetch task still under way finishes without putting the session back.
    assert state.save(generation, list(jar), now=time.time()) == -1
    token = state.lock(5)
    assert token is not None and state.attempt() == -2 and state.live(token, jar) == -2
    state.unlock(token)
    assert not r.exists(*keys.session_all(job_id))


def test_a_worker_without_a_key_refuses_a_job_that_keeps_a_session(
        make_web: Callable[..., TestWeb], r: redis.Redis, workers: Workers, tmp_path: Path) -> None:
    web = make_web(1, 3)
    workers.start("w0", "shard-0,shared", env={"CRAWLER_SHARDS": "1", KEY_VAR: ""})
    plain = Settings.from_env(store=f"sqlite:///{tmp_path}/c.db", shards=1, obey_robots=False, autothrottle=False)
    # A job without a session does not need the key.
    assert wait_done(r, jobs.submit(r, plain, web.seeds()), timeout=30)["status"] == jobs.DONE
    hits = len(web.hits())
    job_id = jobs.submit(r, plain.replace(cookies=True), web.seeds())
    st = wait_done(r, job_id, timeout=30)
    assert st["status"] == jobs.STOPPED and st["counters"]["session_key_missing"] == 1, st
    assert f"no session key on this worker: set {KEY_VAR}" in str(st["error"])
    assert len(web.hits()) == hits and not st["counters"].get("fetched")  # refused before fetching
    assert not r.exists(*keys.session_all(job_id))
    errors = [e["message"] for e in joblog.read(r, job_id, level="ERROR")]
    assert any("no session key on this worker" in m for m in errors), errors
