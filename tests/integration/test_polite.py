"""Politeness and failure handling in whole crawls: robots.txt, retries with backoff, adaptive
delays, per-address budgets, sitemaps, dead links. Real workers, real Redis, loopback HTTP."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

from crawler import jobs
from crawler.config.settings import Settings
from crawler.local.redis_server import free_port
from crawler.testweb import TestWeb, WebModel
from tests.conftest import Workers, rows_by_url, wait_done
from tests.integration.test_crawl import cli
from tests.web import handlers as hw

ALL = "shard-0,shard-1,shard-2,shard-3"


def _crawl(r: redis.Redis, web: TestWeb, tmp_path: Path, seeds: list[str] | None = None,
           timeout: float = 90, **settings: Any) -> tuple[str, dict[str, Any], dict[str, dict[str, Any]]]:
    db = tmp_path / f"c{len(list(tmp_path.glob('c*.db')))}.db"
    job_id = jobs.submit(r, Settings.from_env(store=f"sqlite:///{db}", **settings), seeds or web.seeds())
    st = wait_done(r, job_id, timeout=timeout)
    return job_id, st, rows_by_url(db)


def _waiting_on_robots(r: redis.Redis, web: TestWeb, tmp_path: Path) -> tuple[str, dict[str, Any]]:
    """A job of ``web``'s seeds, and its status once some origin waits on its robots.txt (or 30 s)."""
    job_id = jobs.submit(r, Settings.from_env(store=f"sqlite:///{tmp_path / 'c.db'}"), web.seeds())
    deadline = time.monotonic() + 30
    while not (st := jobs.status(r, job_id))["robots_wait"] and time.monotonic() < deadline:
        time.sleep(0.1)
    return job_id, st


def _hits(web: TestWeb, path: str, site: int = 0) -> list[Any]:
    return [h for h in web.hits() if h.path == path and h.site == site]


def test_robots_rules_crawl_delay_and_one_fetch_per_host(make_web: Callable[..., TestWeb], workers: Workers,
                                                         r: redis.Redis, tmp_path: Path) -> None:
    web = make_web(1, 30)
    web.route(0, "/robots.txt", hw.body(b"User-agent: *\nDisallow: /\n\nUser-agent: crawler\n"
                                        b"Disallow: /list\nCrawl-delay: 0.3\n", ctype="text/plain"))
    workers.start("w0", ALL)
    workers.start("w1", ALL)
    job_id, _st, rows = _crawl(r, web, tmp_path)
    disallowed = {u for u in rows if "/list" in u}
    assert disallowed and all(rows[u]["error"] == "robots" and rows[u]["status"] is None for u in disallowed)
    assert not [h for h in web.hits() if h.path.startswith("/list")]  # never fetched
    assert all(rows[u]["status"] == 200 for u in rows if "/p/" in u)
    assert len(_hits(web, "/robots.txt")) == 1  # cached in Redis for both workers
    starts = sorted(h.start for h in web.hits() if h.path != "/robots.txt")
    assert min(b - a for a, b in itertools.pairwise(starts)) >= 0.3
    (host,) = jobs.hosts(r, job_id)
    assert host["delay"] >= 0.3
    res = cli("status", job_id, "--hosts")
    assert res.returncode == 0 and web.origin(0)[len("http://"):] in res.stdout


def test_robots_redirect_followed_and_4xx_allows_all(make_web: Callable[..., TestWeb], workers: Workers,
                                                     r: redis.Redis, tmp_path: Path) -> None:
    web = make_web(2, 10)
    web.route(0, "/robots.txt", hw.redirect("/real-robots.txt"))
    web.route(0, "/real-robots.txt", hw.body(b"User-agent: *\nDisallow: /p/3.html\n", ctype="text/plain"))
    web.route(1, "/robots.txt", hw.body(b"forbidden", 403))
    workers.start("w", ALL)
    _, _, rows = _crawl(r, web, tmp_path)
    assert rows[web.url(0, "/p/3.html")]["error"] == "robots"
    assert all(row["error"] != "robots" for u, row in rows.items() if u.startswith(web.origin(1)))
    assert len(rows) == len(web.reachable_urls())


def test_robots_5xx_holds_the_host_then_retries(make_web: Callable[..., TestWeb], workers: Workers,
                                                r: redis.Redis, tmp_path: Path) -> None:
    web = make_web(1, 5)
    web.route(0, "/robots.txt", hw.sequence(hw.body(b"busy", 503), hw.body(b"User-agent: *\nAllow: /\n",
                                                                           ctype="text/plain")))
    workers.start("w", ALL)
    _, st, rows = _crawl(r, web, tmp_path, robots_retry=1.0, retry_base=0.2)
    assert len(_hits(web, "/robots.txt")) == 2
    assert all(row["status"] == 200 for row in rows.values()) and len(rows) == len(web.reachable_urls())
    assert st["counters"]["retry:robots_unavailable"] >= 1


def test_retries_back_off_without_holding_a_slot(make_web: Callable[..., TestWeb], workers: Workers,
                                                 r: redis.Redis, tmp_path: Path) -> None:
    web = make_web(2, 20)
    ok = web.render(0, "/p/1.html")
    web.route(0, "/p/1.html", hw.sequence(hw.body(b"", 503), hw.body(b"", 502), hw.body(ok)))
    web.route(0, "/p/2.html", hw.body(b"down", 503))
    web.route(0, "/p/3.html", hw.sequence(hw.body(b"", 429, headers={"Retry-After": "1"}), hw.body(ok)))
    workers.start("w", ALL)
    _, st, rows = _crawl(r, web, tmp_path, retry_base=0.3, max_attempts=3, autothrottle=False)
    assert rows[web.url(0, "/p/1.html")]["status"] == 200 and rows[web.url(0, "/p/1.html")]["error"] is None
    down = rows[web.url(0, "/p/2.html")]
    assert down["status"] == 503 and down["error"] == "http_5xx"
    assert len(_hits(web, "/p/2.html")) == 3  # max_attempts, never more
    retried = _hits(web, "/p/3.html")
    assert len(retried) == 2 and retried[1].start - retried[0].start >= 1.0  # Retry-After honoured
    assert rows[web.url(0, "/p/3.html")]["status"] == 200
    # While /p/2.html waited out its backoff, the other site went on.
    first, last = _hits(web, "/p/2.html")[0].start, _hits(web, "/p/2.html")[-1].start
    assert any(first < h.start < last for h in web.hits() if h.site == 1)
    assert st["counters"]["retry:http_5xx"] == 4 and st["counters"]["retry:http_429"] == 1


def test_adaptive_delay_grows_on_429_and_shrinks_back(make_web: Callable[..., TestWeb], workers: Workers,
                                                      r: redis.Redis, tmp_path: Path) -> None:
    web = make_web(1, 25)
    ok = web.render(0, "/p/2.html")
    web.route(0, "/p/2.html", hw.sequence(hw.body(b"", 429, headers={"Retry-After": "2"}), hw.body(ok)))
    workers.start("w", ALL)
    job_id = jobs.submit(r, Settings.from_env(store=f"sqlite:///{tmp_path}/c.db", retry_base=0.1,
                                              max_delay=5.0), web.seeds())
    peak = 0.0
    import time

    deadline = time.monotonic() + 60
    while jobs.status(r, job_id)["status"] == "running" and time.monotonic() < deadline:
        hosts = jobs.hosts(r, job_id)
        if hosts:
            peak = max(peak, hosts[0]["delay"])
        time.sleep(0.05)
    final = jobs.hosts(r, job_id)[0]["delay"]
    assert peak >= 2.0  # the 429's Retry-After raised the host's delay
    assert final < peak / 4  # and healthy responses brought it back down
    starts = sorted(h.start for h in web.hits() if h.path != "/robots.txt")
    assert max(b - a for a, b in itertools.pairwise(starts)) >= 1.9


def test_host_names_on_one_address_share_its_budget(make_web: Callable[..., TestWeb], workers: Workers,
                                                    r: redis.Redis, tmp_path: Path) -> None:
    web = make_web(1, 3)
    names = ["a.test", "b.test", "c.test"]
    port = web.ports[0]
    for i in range(12):
        web.route(0, f"/n/{i}", hw.slow(0.15, hw.body(hw.html(f"n{i}"))))
    index = hw.html("index", [f"/n/{i}" for i in range(12)])
    web.route(0, "/", hw.body(index))
    workers.start("w", ALL)
    seeds = [f"http://{n}:{port}/" for n in names]
    _, _, rows = _crawl(r, web, tmp_path, seeds=seeds, resolve=[f"{n}={web.ips[0]}" for n in names],
                        per_host=2, per_ip=2)
    assert len(rows) == 3 + 3 * 12
    spans = sorted((h.start, h.end) for h in web.hits() if h.path.startswith("/n/"))
    # After each name's first request taught the crawler their shared address, at most two
    # requests were ever in flight at that address, over all three names.
    worst = max(sum(1 for s, e in spans if s <= t < e) for t, _ in spans[3:])
    assert worst <= 2


def test_sitemaps_seed_pages_no_link_reaches(make_web: Callable[..., TestWeb], workers: Workers,
                                             r: redis.Redis, tmp_path: Path) -> None:
    web = make_web(1, 5)
    orphan = web.url(0, "/orphan.html")
    web.route(0, "/orphan.html", hw.body(hw.html("orphan")))
    web.route(0, "/robots.txt", hw.body(f"User-agent: *\nAllow: /\nSitemap: {web.url(0, '/index.xml')}\n".encode(),
                                        ctype="text/plain"))
    web.route(0, "/index.xml", hw.body(
        f"<sitemapindex xmlns='http://www.sitemaps.org/schemas/sitemap/0.9'><sitemap><loc>{web.url(0, '/s1.xml')}"
        "</loc></sitemap></sitemapindex>".encode(), ctype="application/xml"))
    web.route(0, "/s1.xml", hw.body(
        f"<urlset xmlns='http://www.sitemaps.org/schemas/sitemap/0.9'><url><loc>{orphan}</loc></url>"
        "</urlset>".encode(), ctype="application/xml"))
    workers.start("w", ALL)
    _, _, without = _crawl(r, web, tmp_path)
    assert orphan not in without
    _, st, with_maps = _crawl(r, web, tmp_path, sitemaps=True)
    assert orphan in with_maps and with_maps[orphan]["title"] == "orphan"
    assert st["counters"]["sitemap_urls"] == 1


def test_deadlinks_lists_404s_and_who_links_to_them(make_web: Callable[..., TestWeb], workers: Workers,
                                                    r: redis.Redis, tmp_path: Path) -> None:
    web = make_web(2, 40)
    workers.start("w", ALL)
    job_id, _, rows = _crawl(r, web, tmp_path)
    res = cli("deadlinks", job_id, "--json")
    assert res.returncode == 0, res.stderr
    got = {d["url"]: set(d["linked_from"]) for d in map(json.loads, res.stdout.splitlines())}
    expected: dict[str, set[str]] = {}
    for (site, path), page in web.model.pages.items():
        for link in page.links:
            target = web.model.pages.get((link.site, link.path))
            if target is not None and target.status == 404 and web.url(site, path) in rows:
                expected.setdefault(web.url(link.site, link.path), set()).add(web.url(site, path))
    assert got == expected and got
    assert all(rows[u]["status"] == 404 for u in got)
    fetched = [web.url(h.site, h.path) for h in web.hits()]
    assert all(fetched.count(u) == 1 for u in got)  # 404 is never retried


def test_status_names_the_hosts_waiting_on_robots_txt(make_web: Callable[..., TestWeb], workers: Workers,
                                                      r: redis.Redis, tmp_path: Path) -> None:
    web = make_web(2, 3)
    web.route(1, "/robots.txt", hw.body(b"busy", 503))  # a server that is there and failing
    busy = web.origin(1)
    workers.start("w", ALL)
    job_id, st = _waiting_on_robots(r, web, tmp_path)
    try:
        [wait] = st["robots_wait"]
        assert wait["origin"] == busy and wait["reason"] == "http_5xx" and st["robots_waiting"] == 1
        assert 250 < wait["until"] - time.time() <= Settings().robots_retry * 1.5
        shown = cli("status", job_id)
        assert shown.returncode == 0, shown.stderr
        assert f"waiting on robots.txt: {busy} (http_5xx) until " in shown.stdout, shown.stdout
        assert json.loads(cli("status", job_id, "--json").stdout)["robots_wait"][0]["origin"] == busy
    finally:
        jobs.stop(r, job_id)


def test_a_host_that_refuses_connections_fails_its_urls_as_connect_errors_within_seconds(
        make_web: Callable[..., TestWeb], workers: Workers, r: redis.Redis, tmp_path: Path) -> None:
    # robots.txt reached no server: the origin stays disallowed (nothing but robots.txt is asked
    # of it), but only for retry_base, as the page's own connect error would wait; before, each
    # attempt sat out robots_retry (5 minutes) and a dead seed took 10 minutes to fail.
    web = make_web(1, 3)
    dead = f"http://127.0.2.9:{free_port('127.0.2.9')}"  # a port nothing listens on
    workers.start("w", ALL)
    started = time.monotonic()
    _, st, rows = _crawl(r, web, tmp_path, seeds=[*web.seeds(), f"{dead}/", f"{dead}/other"], timeout=60)
    assert time.monotonic() - started < 45
    assert {u: row["error"] for u, row in rows.items() if u.startswith(dead)} == {f"{dead}/": "connect",
                                                                                f"{dead}/other": "connect"}
    assert all(row["status"] == 200 for u, row in rows.items() if not u.startswith(dead))
    c = st["counters"]
    # Every attempt of both URLs was made (max_attempts each), none under another reason.
    assert c["error:connect"] == 2 and c["retry:connect"] == 2 * (Settings().max_attempts - 1), c
    assert not c.get("retry:robots_unavailable") and not st["robots_wait"], st


def test_a_slow_server_does_not_hold_the_hosts_fetched_beside_it(make_web: Callable[..., TestWeb], workers: Workers,
                                                                  r: redis.Redis, tmp_path: Path) -> None:
    # A URL of each host goes out in one fetch task; one server takes 4 s to answer. The other
    # host's slot is freed once its request is over (``crawler.stages.stragglers``), not when the
    # task ends: its next queued pages go out while the slow one is still out.
    web = make_web(2, 12)
    slow = 4.0
    web.route(1, "/", hw.slow(slow, hw.body(hw.html("slow"))))
    workers.start("w0", ALL, pool="prefork")  # as celery worker runs by default: a process per core
    seeds = [web.url(1, "/"), *(web.url(0, WebModel.page_path(i)) for i in range(12))]
    _job_id, st, rows = _crawl(r, web, tmp_path, seeds=seeds, timeout=60, per_host=1)
    assert st["status"] == "done" and rows[web.url(1, "/")]["status"] == 200
    (slow_hit,) = _hits(web, "/", site=1)
    assert slow_hit.end - slow_hit.start >= slow
    fast = [h for h in web.hits() if h.site == 0 and h.path != "/robots.txt"]
    beside = [h for h in fast if h.start < slow_hit.end]
    assert len(beside) >= 6, f"{len(beside)} of site 0's {len(fast)} requests started while site 1's was out"


def test_pages_robots_txt_held_back_leave_their_hosts_adaptive_delay_alone(r: redis.Redis) -> None:
    # Held back because the origin's robots.txt reached no server, they carry ``connect`` but
    # were never sent: as robots-disallowed ones, they are no news of the server's speed (each
    # halved a delay a 429 had raised).
    from crawler.errors import Reason
    from crawler.fetch.client import FetchResult
    from crawler.frontier import Frontier
    from crawler.stages.politeness import Politeness, blocked_result
    from crawler.state.jobconf import Job
    from crawler.urls import host_key

    url = "http://127.0.3.1:8080/a"
    job = Job("j1", Settings.from_env(), frozenset())
    Frontier(r).set_host_delays("j1", {host_key(url): 4.0})
    politeness = Politeness(r)
    assert politeness.delay_updates(job, [blocked_result(url, Reason.CONNECT)], {}) == {host_key(url): 4.0}
    sent = FetchResult(url=url, final_url=url, error=Reason.CONNECT, elapsed=0.0)
    assert politeness.delay_updates(job, [sent], {})[host_key(url)] < 4.0  # a request that was made


def test_a_robots_txt_redirected_to_a_dead_server_holds_a_live_origin_for_robots_retry(
        make_web: Callable[..., TestWeb], workers: Workers, r: redis.Redis, tmp_path: Path) -> None:
    # The origin answered; only its robots.txt's new home is not there. Its pages wait as for a
    # 5xx (status names the wait), not fail as connect errors of a server that is up.
    web = make_web(1, 3)
    dead = f"http://127.0.2.9:{free_port('127.0.2.9')}"  # a port nothing listens on
    web.route(0, "/robots.txt", hw.redirect(dead + "/robots.txt"))
    workers.start("w", ALL)
    job_id, st = _waiting_on_robots(r, web, tmp_path)
    try:
        [wait] = st["robots_wait"]
        assert wait["origin"] == web.origin(0) and wait["reason"] == "connect", wait
        assert 250 < wait["until"] - time.time() <= Settings().robots_retry * 1.5
        assert not st["counters"].get("error:connect"), st["counters"]
        assert [h.path for h in web.hits()] == ["/robots.txt"]  # the page itself never asked
    finally:
        jobs.stop(r, job_id)
