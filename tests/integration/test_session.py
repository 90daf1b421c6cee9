"""Sessions against real servers on loopback: credentials per host from the worker's
environment, a form login through the guarded client (robots.txt obeyed), one login shared by
every task through Redis, a re-login when the site ends the session, and no secret or session
cookie in messages, Redis, WARC files, exports or logs."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
import redis

from crawler import jobs, stages
from crawler.config.credentials import Secrets
from crawler.config.settings import Settings
from crawler.fetch import FetchConfig
from crawler.fetch.client import runtime
from crawler.fetch.jar import CookieJar
from crawler.spiders.loader import prepare
from crawler.spiders.session import LoginFailed, Session, SessionHops
from crawler.spiders.sessionstate import SessionState
from crawler.stages.messages import FetchedPage
from crawler.stages.session import REFETCH_AFTER
from crawler.state import keys
from crawler.testweb import TestWeb
from crawler.testweb.login import LoginSite
from tests.conftest import TEST_NETWORKS
from tests.web import handlers as hw

EXAMPLE = "examples/login_spider.py:LoginSpider"
CFG = FetchConfig(user_agent="t", allow_networks=tuple(TEST_NETWORKS.split(",")), deadline=5)


def _fetch_all(ctx: stages.Context, job_id: str, r: redis.Redis, rounds: int = 20) -> list[FetchedPage]:
    """Dispatch and fetch (one shard, small batches) until nothing is left to dispatch now."""
    out: list[FetchedPage] = []
    idle = 0
    for _ in range(rounds):
        job = jobs.load(r, job_id, max_age=0)
        ctx.frontier.promote(job_id)
        d = ctx.frontier.dispatch(job_id, 0, max_urls=4, per_host=4, delay=0, lease_timeout=60, concurrency=4)
        batches = d.batches()
        if not batches:
            idle += 1
            if idle > 2:
                break
            time.sleep(REFETCH_AFTER * 2)  # pages waiting for the next login come back by then
            continue
        idle = 0
        for token, entries in batches:
            pages = stages.fetch_stage(ctx, job, token, [e.encode() for e in entries])
            out += pages
            parsed, links = stages.parse_stage(ctx, job, token, pages)
            stages.store_stage(ctx, job, token, parsed)
            for shard, batch in links.items():
                stages.dedup_stage(ctx, job, stages.link_token(token, shard), batch)
    return out


@pytest.fixture
def login_web(make_web: Callable[..., TestWeb]) -> Iterator[tuple[TestWeb, LoginSite]]:
    web = make_web(1, 1)
    site = LoginSite(records=6)
    site.mount(web, 0)
    yield web, site


def _session(site_env: dict[str, str]) -> Session:
    rt = runtime()
    return Session(rt.fetcher(CFG), CFG, rt.run, SessionHops(CookieJar(), Secrets(site_env)))


def test_submit_form_keeps_hidden_fields_and_the_site_cookie(login_web: tuple[TestWeb, LoginSite]) -> None:
    web, site = login_web
    session = _session({"CRAWLER_SECRET_PW": site.password})
    form = session.get(web.url(0, "/login?next=%2Fmembers%2Frecord-2.html"))
    assert form.css("input[name=csrf]::attr(value)").get()
    page = session.submit_form(form, {"username": site.user, "password": session.secret("PW")})
    # The POST's 302 became a GET of ``next``, sent with the cookie the POST set.
    assert page.status == 200 and page.final_url == web.url(0, "/members/record-2.html")
    assert page.css("div.record::attr(data-id)").get() == "R-1001"
    assert site.logins == 1 and list(session.cookies) == ["sid"]
    # Without the CSRF token the site refuses, as it would a forged form.
    bare = _session({})
    refused = bare.post(web.url(0, "/login"), {"username": site.user, "password": site.password})
    assert refused.css("p.error") and site.failed_logins == 1 and not bare.cookies
    with pytest.raises(LoginFailed, match="no form"):
        bare.submit_form(refused, {}, form_css="form#other")


def test_basic_auth_goes_to_its_host_only_and_never_into_messages(make_web: Callable[..., TestWeb], r: redis.Redis,
                                                                  tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    web = make_web(2, 1)
    seen: list[tuple[str, str, str]] = []  # (path, Authorization, X-Team)

    def guarded(inner: hw.Handler) -> hw.Handler:
        def handler(h: BaseHTTPRequestHandler) -> None:
            seen.append((h.path, h.headers.get("Authorization", ""), h.headers.get("X-Team", "")))
            if h.path.startswith("/private") and h.headers.get("Authorization") != "Basic " + token:
                hw.body(b"no", 401)(h)
                return
            inner(h)
        return handler

    token = base64.b64encode(b"bot:s3cret-pw").decode()
    monkeypatch.setenv("CRAWLER_SECRET_SITE_A", "bot:s3cret-pw")
    web.route(0, "/private", guarded(hw.body(hw.html("private", ["/away"]))))
    web.route(0, "/away", guarded(hw.redirect(web.url(1, "/landing"))))
    web.route(1, "/landing", guarded(hw.body(hw.html("landing"))))
    settings = Settings.from_env(store=f"sqlite:///{tmp_path}/c.db", shards=1, obey_robots=False,
                                 warc_dir=str(tmp_path / "warc"), allow_domains=web.ips,
                                 auth=[f"{web.ips[0]}=basic:SITE_A"], session_headers=["X-Team: crawl ops"])
    job_id = jobs.submit(r, settings, [web.url(0, "/private"), web.url(0, "/away")])
    pages = {p.url: p for p in _fetch_all(stages.Context.default(r), job_id, r, rounds=3)}
    private, away = pages[web.url(0, "/private")], pages[web.url(0, "/away")]
    assert private.status == 200 and away.status == 200 and away.final_url == web.url(1, "/landing")
    # Credentials went to their host only, not across the redirect; default headers everywhere.
    assert ("/private", "Basic " + token, "crawl ops") in seen
    assert ("/away", "Basic " + token, "crawl ops") in seen
    assert ("/landing", "", "crawl ops") in seen
    assert ("Authorization", "***") in private.request_headers
    text = json.dumps([p.to_json() for p in pages.values()]) + _files_text(tmp_path)
    assert "Authorization: ***" in _files_text(tmp_path / "warc")
    assert token not in text and "s3cret-pw" not in text
    assert "s3cret-pw" not in _redis_dump(r)


def test_a_missing_secret_is_counted_and_named(make_web: Callable[..., TestWeb], r: redis.Redis, tmp_path: Path,
                                               caplog: pytest.LogCaptureFixture) -> None:
    web = make_web(1, 1)
    settings = Settings.from_env(store=f"sqlite:///{tmp_path}/c.db", shards=1, obey_robots=False,
                                 auth=[f"{web.ips[0]}=bearer:NOT_SET_ANYWHERE"])
    job_id = jobs.submit(r, settings, web.seeds())
    [page] = _fetch_all(stages.Context.default(r), job_id, r, rounds=1)
    assert page.status == 200  # fetched, without credentials
    assert jobs.status(r, job_id)["counters"]["secret_missing"] == 1
    assert "secret NOT_SET_ANYWHERE is not set on this worker" in caplog.text


def _login_job(r: redis.Redis, web: TestWeb, tmp_path: Path, **extra: Any) -> str:
    settings = Settings.from_env(store=f"sqlite:///{tmp_path}/c.db", shards=1, spider=EXAMPLE, autothrottle=False,
                                 spider_args=[f"login_url={web.url(0, '/login')}"], **extra)
    settings, seeds = prepare(settings, [web.url(0, "/")])
    return jobs.submit(r, settings, seeds)


def test_login_once_refetch_after_the_session_ends_and_store_no_login_form(
        login_web: tuple[TestWeb, LoginSite], r: redis.Redis, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    web, site = login_web
    monkeypatch.setenv("CRAWLER_SECRET_LOGIN_USER", site.user)
    monkeypatch.setenv("CRAWLER_SECRET_LOGIN_PASSWORD", site.password)
    job_id = _login_job(r, web, tmp_path)
    ctx = stages.Context.default(r)
    first = _fetch_all(ctx, job_id, r, rounds=2)
    assert site.logins == 1 and first
    # The member index's own cookie joined the session's jar in Redis.
    _, jar = SessionState(r, job_id).jar()
    assert {c.name for c in jar} == {"sid", "view"}
    site.expire_all()  # the site ends every session mid-crawl
    _fetch_all(ctx, job_id, r)
    counters = {k: int(v) for k, v in jobs.status(r, job_id)["counters"].items()}
    assert site.logins == 2 and counters["logins"] == 2 and counters["session_ended"] == 1
    assert counters["session_refetch"] >= 1 and "session_ended_stored" not in counters
    store = ctx.page_store(f"sqlite:///{tmp_path}/c.db")
    stored = {p["url"]: p for p in store.pages(job_id)}
    for path in site.protected_paths():
        row = stored[web.url(0, path)]
        assert row["status"] == 200 and row["final_url"] == web.url(0, path), row
    items = sorted((i["item"] for i in store.items(job_id)), key=lambda i: str(i["id"]))
    assert items == site.records(web.origin(0))
    # The job is done: its session went with it.
    assert jobs.status(r, job_id)["status"] == jobs.DONE and not r.exists(*keys.session_all(job_id))


def test_a_wrong_password_logs_in_at_most_max_logins_times(login_web: tuple[TestWeb, LoginSite], r: redis.Redis,
                                                           tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    web, site = login_web
    monkeypatch.setenv("CRAWLER_SECRET_LOGIN_USER", site.user)
    monkeypatch.setenv("CRAWLER_SECRET_LOGIN_PASSWORD", "wrong")
    job_id = _login_job(r, web, tmp_path, max_logins=2)
    _fetch_all(stages.Context.default(r), job_id, r)
    counters = {k: int(v) for k, v in jobs.status(r, job_id)["counters"].items()}
    assert site.failed_logins == 2 and site.logins == 0
    assert counters["login_failed:rejected"] == 2 and "logins" not in counters
    # Past the bound, protected pages are kept as they came (the login form), counted.
    assert counters["session_ended_stored"] >= 1


def test_robots_txt_refusing_the_login_url_fails_the_login(login_web: tuple[TestWeb, LoginSite], r: redis.Redis,
                                                           tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    web, site = login_web
    web.route(0, "/robots.txt", hw.body(b"User-agent: *\nDisallow: /login\n", ctype="text/plain"))
    monkeypatch.setenv("CRAWLER_SECRET_LOGIN_USER", site.user)
    monkeypatch.setenv("CRAWLER_SECRET_LOGIN_PASSWORD", site.password)
    job_id = _login_job(r, web, tmp_path, max_logins=1)
    _fetch_all(stages.Context.default(r), job_id, r, rounds=2)
    counters = {k: int(v) for k, v in jobs.status(r, job_id)["counters"].items()}
    assert counters["login_failed:robots"] == 1
    assert not [h for h in web.hits() if h.path.startswith("/login") or h.path.startswith("POST")]


def test_session_state_ends_once_and_keeps_old_cookies_out(r: redis.Redis) -> None:
    from crawler.fetch.jar import parse_set_cookie

    state = SessionState(r, "j1", max_cookies=2)
    assert state.status().generation == 0 and not state.status().live
    token = state.lock(5)
    assert token is not None and state.lock(5) is None
    jar = CookieJar()
    jar.update("http://127.0.1.1/", [("Set-Cookie", "sid=1")])
    assert state.live(token, jar) == 1
    state.unlock(token)
    assert not state.locked()
    gen, got = state.jar()
    assert gen == 1 and [c.value for c in got] == ["1"]
    more = [parse_set_cookie(f"c{i}=v", "http://127.0.1.1/") for i in range(3)]
    assert state.save(1, [c for c in more if c is not None], now=0) == 2  # the bound: 2 cookies
    assert [state.end(1), state.end(1)] == [True, False]  # many pages see it end: one re-login
    late = parse_set_cookie("late=1", "http://127.0.1.1/")
    assert late is not None
    assert state.save(0, [late], now=0) == -1  # cookies of an older session are not kept
    other = state.lock(5)
    assert other is not None
    state.unlock("not-the-token")
    assert state.locked()


def _files_text(root: Path) -> str:
    """Every file under ``root`` (stores, WARC files decompressed, logs, exports), as text."""
    import gzip

    out = []
    for f in sorted(p for p in root.rglob("*") if p.is_file()):
        data = f.read_bytes()
        if f.name.endswith(".gz"):
            data = gzip.decompress(data)
        out.append(data.decode("latin-1"))
    return "\n".join(out)


def _redis_dump(r: redis.Redis) -> str:
    """Every key and value in the database, as text."""
    out = []
    for key in r.scan_iter(count=1000):
        kind = r.type(key).decode()
        if kind == "string":
            value: Any = r.get(key)
        elif kind == "hash":
            value = r.hgetall(key)
        elif kind == "list":
            value = r.lrange(key, 0, -1)
        elif kind == "set":
            value = r.smembers(key)
        elif kind == "zset":
            value = r.zrange(key, 0, -1)
        elif kind == "stream":
            value = r.xrange(key)
        else:
            value = kind
        out.append(f"{key!r} {value!r}")
    return "\n".join(out)


def test_a_cookie_job_keeps_its_own_cookies_and_no_other_job_sees_them(make_web: Callable[..., TestWeb],
                                                                       r: redis.Redis, tmp_path: Path) -> None:
    web = make_web(1, 1)
    sent: list[tuple[str, str]] = []  # (path, Cookie)

    def noting(inner: hw.Handler) -> hw.Handler:
        def handler(h: BaseHTTPRequestHandler) -> None:
            sent.append((h.path, h.headers.get("Cookie", "")))
            inner(h)
        return handler

    # /set sets a cookie and links to /next; a crawl with cookies sends it back there.
    web.route(0, "/set", noting(hw.body(hw.html("set", ["/next"]), headers={"Set-Cookie": "pref=dark; Path=/"})))
    web.route(0, "/next", noting(hw.body(hw.html("next"))))
    ctx = stages.Context.default(r)
    ids = []
    for cookies in (True, False, True):
        settings = Settings.from_env(store=f"sqlite:///{tmp_path}/c.db", shards=1, obey_robots=False,
                                     autothrottle=False, cookies=cookies)
        ids.append(jobs.submit(r, settings, [web.url(0, "/set")]))
        sent.clear()
        _fetch_all(ctx, ids[-1], r)
        # Each job starts without cookies: none from the job before it on this worker.
        assert sent == [("/set", ""), ("/next", "pref=dark" if cookies else "")], sent
    # Each job's cookies went when it was done.
    assert not [j for j in ids if r.exists(*keys.session_all(j))]


def test_a_host_freed_before_its_task_ends_has_shared_its_cookies_and_keeps_a_full_lease(
        make_web: Callable[..., TestWeb], r: redis.Redis, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # One fetch task holds a fast page that sets a cookie and a slow one (2.5 s). The fast page
    # is reported over while the slow one is out (``crawler.stages.stragglers``): its host may go
    # again then, so the cookie it set is in Redis by then, where another task's request finds it;
    # and its lease, renewed when the task ends, runs a whole timeout from there.
    web = make_web(2, 1)
    seen_then: list[list[bytes]] = []
    web.route(0, "/set", hw.body(hw.html("set"), headers={"Set-Cookie": "pref=dark; Path=/"}))

    def slow(h: BaseHTTPRequestHandler) -> None:
        time.sleep(2.0)
        seen_then.append(list(r.hkeys(keys.session_cookies(job_id))))
        time.sleep(0.5)
        hw.body(hw.html("slow"))(h)

    web.route(1, "/slow", slow)
    monkeypatch.setenv("CRAWLER_LEASE_TIMEOUT", "8")  # the workers' setting
    settings = Settings.from_env(store=f"sqlite:///{tmp_path}/c.db", shards=1, obey_robots=False,
                                 autothrottle=False, cookies=True)
    job_id = jobs.submit(r, settings, [web.url(0, "/set"), web.url(1, "/slow")])
    ctx = stages.Context.default(r)
    job = jobs.load(r, job_id, max_age=0)
    ctx.frontier.promote(job_id)
    d = ctx.frontier.dispatch(job_id, 0, max_urls=4, per_host=1, delay=0, lease_timeout=8, concurrency=4)
    ((token, entries),) = d.batches()
    assert len(entries) == 2
    pages = stages.fetch_stage(ctx, job, token, [e.encode() for e in entries])
    ended = time.time()
    assert sorted(p.status for p in pages) == [200, 200]
    assert seen_then and seen_then[0], "the cookie was not shared while the slow request was out"
    expiry = r.zscore(keys.lease_expiry(job_id), web.url(0, "/set"))
    assert expiry is not None and expiry >= ended + 8 - 1, (expiry, ended)
