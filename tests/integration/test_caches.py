"""Per-process caches stay within their bounds, close what they evict, and never carry one job's
robots.txt answer over to a job with another network policy. Real Redis, real workers, real
httpx clients, loopback HTTP."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import redis

from crawler import jobs, stages
from crawler.config.settings import Settings, process_limit
from crawler.fetch.client import FetchConfig, Runtime
from crawler.fetch.robots import RobotsCache, RobotsPolicy, robots_scope
from crawler.lru import LRU
from crawler.store.base import PageRecord
from crawler.testweb import TestWeb
from tests.conftest import TEST_NETWORKS, Workers, rows_by_url, wait_done
from tests.web import handlers as hw

ALL = "shard-0,shard-1,shard-2,shard-3"


def _crawl(r: redis.Redis, tmp_path: Path, name: str, seeds: list[str], **settings: Any) -> dict[str, dict[str, Any]]:
    db = tmp_path / f"{name}.db"
    job_id = jobs.submit(r, Settings.from_env(store=f"sqlite:///{db}", warc=False, **settings), seeds)
    wait_done(r, job_id, timeout=60)
    return rows_by_url(db)


# -- robots.txt per network policy ---------------------------------------------------------------

def test_a_guard_verdict_is_not_cached_for_a_job_allowed_that_network(
        make_web: Callable[..., TestWeb], workers: Workers, r: redis.Redis, tmp_path: Path) -> None:
    web = make_web(1, 3)
    workers.start("w", ALL)
    refused = _crawl(r, tmp_path, "a", web.seeds(), allow_networks=[])
    assert refused and all(row["error"] == "blocked_network" for row in refused.values())

    allowed = _crawl(r, tmp_path, "b", web.seeds())
    assert set(allowed) == web.reachable_urls()
    assert all(row["status"] == 200 and row["error"] is None for row in allowed.values())
    assert [h.path for h in web.hits()].count("/robots.txt") == 1  # fetched by job B, not read from A
    assert not any(b"blocked_network" in (r.get(k) or b"") for k in r.scan_iter("c:robots:*"))


class _Site:
    """One loopback server answering every path with a page and /robots.txt with ``robots``."""

    def __init__(self, ip: str, port: int, robots: bytes) -> None:
        self.hits: list[str] = []
        site = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                site.hits.append(self.path)
                if self.path == "/robots.txt":
                    hw.body(robots, ctype="text/plain")(self)
                else:
                    hw.body(hw.html("page"))(self)

        self.server = ThreadingHTTPServer((ip, port), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def two_servers_one_port() -> Iterator[tuple[_Site, _Site]]:
    """127.0.1.41 disallows everything, 127.0.1.42 allows everything, on the same port: one
    origin name, resolved to either by a job's --resolve."""
    for _ in range(20):
        strict = _Site("127.0.1.41", 0, b"User-agent: *\nDisallow: /\n")
        try:
            lax = _Site("127.0.1.42", strict.server.server_address[1], b"User-agent: *\nAllow: /\n")
        except OSError:
            strict.stop()
            continue
        yield strict, lax
        strict.stop()
        lax.stop()
        return
    raise RuntimeError("no port free on both addresses")


def test_robots_fetched_through_a_resolve_map_stays_with_that_map(
        two_servers_one_port: tuple[_Site, _Site], workers: Workers, r: redis.Redis, tmp_path: Path) -> None:
    strict, lax = two_servers_one_port
    port = strict.server.server_address[1]
    origin = f"http://tenant.invalid:{port}"
    workers.start("w", ALL)
    c = _crawl(r, tmp_path, "c", [origin + "/"], resolve=["tenant.invalid=127.0.1.41"])
    assert c[origin + "/"]["error"] == "robots"

    nets = tuple(TEST_NETWORKS.split(","))
    # A job without that resolve entry (it would ask DNS, which a test never does) finds nothing.
    assert RobotsCache(r).lookup([origin], robots_scope(nets, ())) == {}
    assert RobotsCache(r).lookup([origin], robots_scope(nets, (("tenant.invalid", "127.0.1.41"),)))

    d = _crawl(r, tmp_path, "d", [origin + "/"], resolve=["tenant.invalid=127.0.1.42"])
    assert d[origin + "/"]["status"] == 200 and d[origin + "/"]["error"] is None
    assert lax.hits.count("/robots.txt") == 1 and strict.hits.count("/robots.txt") == 1


# -- bounded per-process caches ------------------------------------------------------------------

def test_robots_cache_is_bounded_by_count_and_bytes(r: redis.Redis) -> None:
    cache = RobotsCache(r, size=50, max_bytes=200_000)
    later = time.time() + 600
    cache.save({f"http://h{i}.test": RobotsPolicy(200, "User-agent: *\nDisallow: /x\n", later)
                for i in range(200)}, "public")
    assert len(cache._local) == 50
    big = "User-agent: *\n" + "".join(f"Disallow: /p{i}/*\n" for i in range(40))  # ~80 KB parsed
    cache.save({f"http://big{i}.test": RobotsPolicy(200, big, later) for i in range(20)}, "public")
    assert cache._local.nbytes <= 200_000 and 0 < len(cache._local) < 20
    # What left the process is still in Redis for every worker.
    assert len(cache.lookup([f"http://h{i}.test" for i in range(200)], "public")) == 200


def _sockets_closed(transport: object) -> bool:
    """A closed client's connections went too: httpcore's pools emptied, or aiohttp's session
    (and the connector it owns) closed."""
    pool = getattr(transport, "_pool", None)
    if pool is not None:
        return not pool.pools
    session = getattr(transport, "client", None)
    return bool(getattr(session, "closed", False))


def test_http_clients_beyond_the_bound_are_closed(make_web: Callable[..., TestWeb]) -> None:
    web = make_web(1, 2)
    rt = Runtime(max_clients=2)
    nets = TEST_NETWORKS.split(",")
    configs = [FetchConfig(user_agent="t", allow_networks=(*nets, f"10.{i}.0.0/16")) for i in range(5)]
    fetchers = []
    for cfg in configs:
        f = rt.fetcher(cfg)
        assert rt.run(f.fetch_many([web.url(0, "/")], cfg))[0].status == 200
        fetchers.append(f)
    assert len(rt._fetchers) == 2
    for f in fetchers[:3]:
        assert f.client.is_closed
        assert _sockets_closed(f.client._transport)
    assert not any(f.client.is_closed for f in fetchers[3:])
    assert rt.fetcher(configs[0]) is not fetchers[0]  # a policy used again gets a new client
    rt.run(fetchers[4].client.aclose())
    rt.loop.close()


def test_job_handles_are_evicted_after_many_jobs(r: redis.Redis, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRAWLER_JOB_CACHE_SIZE", "3")
    monkeypatch.setenv("CRAWLER_OPEN_STORES", "2")
    monkeypatch.setattr(jobs, "_cache", LRU(process_limit("job_cache_size")))
    ctx = stages.Context.default(r)
    opened = []
    for i in range(8):
        store = f"sqlite:///{tmp_path / f'j{i}.db'}"
        job = jobs.load(r, jobs.submit(r, Settings.from_env(store=store), [f"http://127.0.1.9:1/{i}"]))
        ctx.seen_set(job)
        s = ctx.page_store(store)
        w = ctx.warc(str(tmp_path / f"warc{i}"), 1_000_000)
        w.write(PageRecord(url=f"http://127.0.1.9:1/{i}", job_id=job.id, fetch_id="t", status=200),
                http_version="HTTP/1.1", request_headers=[], response_headers=[], body=b"x")
        opened.append((s, w))
    assert len(jobs._cache) == 3 and len(ctx._seen_sets) == 3
    assert len(ctx._stores) == 2 and len(ctx._warcs) == 2
    for s, w in opened[:6]:
        with pytest.raises(sqlite3.ProgrammingError):  # closed, not just forgotten
            s.conn.execute("SELECT 1")
        assert w._fh is None
    for s, w in opened[6:]:
        s.conn.execute("SELECT 1")
        assert w._fh is not None
    ctx.close()
