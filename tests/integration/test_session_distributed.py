"""A login crawl as an operator runs it: two real Celery workers (each serving both shards, so
both fetch the protected host and meet one session), ``crawler submit`` with the example login
spider, secrets only in the workers' environment. The site is slow to log in (the other worker
waits on the lock) and ends every session mid-crawl (one re-login, not one per page)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import redis

from crawler import jobs
from crawler.state.keys import session_cookies
from crawler.store import open_store
from crawler.testweb import TestWeb
from crawler.testweb.login import LoginSite
from tests.conftest import ROOT, Workers
from tests.integration.test_session import EXAMPLE, _files_text, _redis_dump


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "crawler", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120, check=False)


def test_two_workers_log_in_once_per_session_and_no_secret_leaks(make_web: Callable[..., TestWeb], r: redis.Redis,
                                                                 redis_url: str, workers: Workers,
                                                                 tmp_path: Path) -> None:
    web = make_web(2, 12)  # site 0: the login site; site 1: a public site on the other shard
    site = LoginSite(records=24, login_delay=0.5)
    site.mount(web, 0)
    secrets = {"CRAWLER_SECRET_LOGIN_USER": site.user, "CRAWLER_SECRET_LOGIN_PASSWORD": site.password}
    worker_env = {"CRAWLER_SHARDS": "2", **secrets}
    workers.start("w0", "shard-0,shard-1,shared", env=worker_env)
    workers.start("w1", "shard-1,shard-0,shared", env=worker_env)

    store = f"sqlite:///{tmp_path / 'out' / 'crawl.db'}"
    # The submitter has no secrets at all: the job carries names, never values.
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRAWLER_SECRET")}
    env.update(CRAWLER_REDIS_URL=redis_url, CRAWLER_SHARDS="2")
    sub = _cli("submit", web.url(0, "/"), web.url(1, "/"), "--spider", EXAMPLE,
               "--spider-arg", f"login_url={web.url(0, '/login')}", "--per-host", "4", "--store", store,
               "--warc-dir", str(tmp_path / "out" / "warc"), env=env)
    assert sub.returncode == 0, sub.stderr
    job_id = sub.stdout.strip()

    # Watch everything Redis holds while the crawl runs (task messages included), and end every
    # session once a third of the member pages have been served.
    expired = False
    samples = 0
    deadline = time.monotonic() + 120
    while jobs.status(r, job_id)["status"] not in jobs.FINISHED:
        assert time.monotonic() < deadline, jobs.status(r, job_id)
        if not expired and site.protected_served >= 8:
            site.expire_all()
            expired = True
        dump = _redis_dump(r)
        assert site.password not in dump
        samples += 1
        time.sleep(0.05)
    assert expired, "the crawl ended before the site ended its sessions"
    print(f"\n{samples} samples of Redis during the crawl")

    counters = {k: int(v) for k, v in jobs.status(r, job_id)["counters"].items()}
    # One login per session: the first, and one after the site ended them all.
    assert site.logins == 2 and site.failed_logins == 0
    assert counters["logins"] == 2 and counters["session_ended"] == 1, counters
    assert counters["session_refetch"] >= 1 and "session_ended_stored" not in counters
    print(f"tasks that waited for the other worker's login: {counters.get('login_waits', 0)}; "
          f"pages fetched again after a login: {counters['session_refetch']}")
    logs = "".join((tmp_path / f"{n}.log").read_text(errors="replace") for n in ("w0", "w1"))
    assert logs.count("logged in (session") == 2
    assert "Traceback" not in logs, logs[-3000:]

    # Every protected page is stored as itself (not the login form it once came back as),
    # with its record.
    st = open_store(store)
    try:
        pages = {p["url"]: p for p in st.pages(job_id)}
        items = sorted((i["item"] for i in st.items(job_id)), key=lambda i: str(i["id"]))
    finally:
        st.close()
    for path in site.protected_paths():
        row = pages[web.url(0, path)]
        assert row["status"] == 200 and row["final_url"] == web.url(0, path), row
    assert items == site.records(web.origin(0))

    # No password anywhere, and no session cookie outside the session's own key in Redis.
    exports = [_cli("export", str(tmp_path / "out"), *flags, env=env) for flags in ((), ("--items",))]
    assert all(e.returncode == 0 for e in exports), [e.stderr for e in exports]
    texts = {
        "redis": _redis_dump(r),
        "files (store, WARC, worker logs)": _files_text(tmp_path),
        "exports": "".join(e.stdout for e in exports),
    }
    assert json.dumps(site.records(web.origin(0))[0]["id"]) in texts["exports"]
    for where, text in texts.items():
        assert site.password not in text, where
    jar_key = session_cookies(job_id).encode()
    outside_jar = "\n".join(line for line in texts["redis"].splitlines() if not line.startswith(repr(jar_key)))
    for sid in site.issued:
        for where, text in {**texts, "redis": outside_jar}.items():
            assert sid not in text, (where, sid)
    assert "Cookie: ***" in texts["files (store, WARC, worker logs)"]


def test_an_embedded_crawl_logs_in_with_the_example_spider(make_web: Callable[..., TestWeb], tmp_path: Path) -> None:
    web = make_web(1, 1)
    site = LoginSite(records=10)
    site.mount(web, 0)
    out = tmp_path / "members"
    env = {k: v for k, v in os.environ.items() if k != "CRAWLER_REDIS_URL"}
    env.update(CRAWLER_SECRET_LOGIN_USER=site.user, CRAWLER_SECRET_LOGIN_PASSWORD=site.password)
    res = _cli("crawl", web.url(0, "/"), "--spider", EXAMPLE, "--spider-arg", f"login_url={web.url(0, '/login')}",
               "--out", str(out), "--workers", "2", env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    assert site.logins == 1
    feed = [json.loads(line) for line in (out / "items.jsonl").read_text().splitlines()]
    got = sorted(({k: v for k, v in f.items() if not k.startswith("_")} for f in feed), key=lambda i: str(i["id"]))
    assert got == site.records(web.origin(0))
    text = _files_text(out) + res.stdout + res.stderr
    assert site.password not in text and not [sid for sid in site.issued if sid in text]
