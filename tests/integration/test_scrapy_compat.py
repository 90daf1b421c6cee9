"""Scrapy spiders run unchanged: the tutorial-style spiders of ``examples/scrapy_*.py`` are run by
Scrapy itself and by the crawler (two Celery workers, two shards), and give the same items as
sets; the same spiders written with the crawler's own API (``examples/quotes*_spider.py``) give
them too. What the crawler cannot honour fails the submission with one line naming it, and the
crawler imports no Scrapy module unless a Scrapy spider is used."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis

from crawler import jobs
from crawler.config.settings import Settings
from crawler.local.redis_server import free_port
from crawler.store import open_store
from crawler.testweb import TestWeb
from tests.conftest import ROOT, Workers, rows_by_url, wait_done
from tests.integration.test_crawl import cli
from tests.integration.test_quotes_site import EXAMPLES, SCRAPY_SPIDERS, as_set, expected, quotes_web, run_scrapy

# The crawler's own spiders for the same site: (file, class, the model's name for its items,
# extra settings: a spider with start_requests and no seeds is scoped by its domains).
OWN_SPIDERS = [("quotes_spider.py", "QuotesSpider", "quotes", False),
               ("quotes_spider.py", "AuthorSpider", "author", False),
               ("quotes_api_spider.py", "QuotesApiSpider", "quotes-api", True),
               ("quotes_login_spider.py", "QuotesLoginSpider", "quotes-login", False)]


def _items(store: str, job: str) -> list[dict[str, Any]]:
    s = open_store(store)
    try:
        return [row["item"] for row in s.items() if row.get("job_id", job) == job]
    finally:
        s.close()


def _two_workers(workers: Workers) -> None:
    for n in (0, 1):
        workers.start(f"w{n}", f"shard-{n},shared", env={"CRAWLER_SHARDS": "2"})


def _submit(r: redis.Redis, redis_url: str, store: str, spider: str, seeds: list[str], **kw: Any) -> str:
    settings = Settings.from_env(redis_url=redis_url, shards=2, store=store, allow_networks=["127.0.0.0/8"],
                                 spider=spider, **kw)
    return jobs.submit(r, settings, seeds)


def _ours_and_scrapys(r: redis.Redis, redis_url: str, workers: Workers, tmp_path: Path,
                      monkeypatch: pytest.MonkeyPatch, name: str, source: str, cls: str,
                      **args: str) -> tuple[Path, str, dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    """The spider ``cls`` of ``source`` (written to ``<name>.py``, no seeds: its own start), run by
    the crawler (two workers) and by Scrapy itself with the same arguments: (our store's file, our
    job, its final status, our items, Scrapy's items)."""
    monkeypatch.setenv("CRAWLER_SPIDER_PATHS", os.pathsep.join([os.environ["CRAWLER_SPIDER_PATHS"], str(tmp_path)]))
    file = tmp_path / f"{name}.py"
    file.write_text(source)
    _two_workers(workers)
    db = tmp_path / f"{name}.db"
    job = _submit(r, redis_url, f"sqlite:///{db}", f"{file}:{cls}", [],
                  spider_args=[f"{k}={v}" for k, v in args.items()])
    by_scrapy = run_scrapy(file, cls, tmp_path, **args)
    st = wait_done(r, job, timeout=180)
    assert st["status"] == jobs.DONE, (st.get("error"), st.get("counters"))
    return db, job, st, _items(f"sqlite:///{db}", job), by_scrapy


def test_scrapy_spiders_run_unchanged_and_give_scrapys_own_items(make_web: Callable[..., TestWeb], tmp_path: Path,
                                                                  workers: Workers, r: redis.Redis,
                                                                  redis_url: str) -> None:
    pytest.importorskip("scrapy")
    _, site, origin = quotes_web(make_web)
    _two_workers(workers)
    submitted = {}
    for file, cls, _ in SCRAPY_SPIDERS:
        store = f"sqlite:///{tmp_path / f'{cls}.db'}"
        # No seeds: the Scrapy spider's start() (or start_urls) runs on a worker, as in Scrapy.
        submitted[cls] = (store, _submit(r, redis_url, store, f"{EXAMPLES / file}:{cls}", [],
                                         spider_args=[f"base={origin}"]))
    by_scrapy = {cls: run_scrapy(EXAMPLES / file, cls, tmp_path, base=origin) for file, cls, _ in SCRAPY_SPIDERS}
    for _, cls, name in SCRAPY_SPIDERS:
        store, job = submitted[cls]
        st = wait_done(r, job, timeout=180)
        assert st["status"] == jobs.DONE, (cls, st.get("error"), st.get("counters"))
        ours = _items(store, job)
        assert len(ours) == len(as_set(ours)), cls  # no item twice
        assert as_set(ours) == as_set(by_scrapy[cls]), cls
        assert as_set(ours) == as_set(expected(site, name)), cls
        counters = {k: int(v) for k, v in st["counters"].items()}
        assert not counters.get("spider_error"), (cls, counters)
    # The session the login spider opened is the one that saw the favourites page.
    assert site.logins == 2 and site.refused_logins == 0  # Scrapy's login and ours
    # custom_settings reached the job: CONCURRENT_REQUESTS_PER_DOMAIN -> per_host.
    author_job = submitted["AuthorSpider"][1]
    assert json.loads(jobs.status(r, author_job)["settings"])["per_host"] == 4


def test_the_same_spiders_in_the_crawlers_own_api_give_the_same_items(make_web: Callable[..., TestWeb],
                                                                      tmp_path: Path, workers: Workers,
                                                                      r: redis.Redis, redis_url: str) -> None:
    web, site, origin = quotes_web(make_web)
    _two_workers(workers)
    submitted = {}
    for file, cls, name, starts in OWN_SPIDERS:
        store = f"sqlite:///{tmp_path / f'own-{cls}.db'}"
        seeds = [] if starts else [origin + ("/login" if name == "quotes-login" else "/")]
        submitted[cls] = (store, name, _submit(r, redis_url, store, f"{EXAMPLES / file}:{cls}", seeds,
                                               spider_args=[f"base={origin}"], allow_domains=[web.ips[0]],
                                               cookies=True))
    for cls, (store, name, job) in submitted.items():
        st = wait_done(r, job, timeout=180)
        assert st["status"] == jobs.DONE, (cls, st.get("error"), st.get("counters"))
        ours = _items(store, job)
        assert len(ours) == len(as_set(ours)), cls
        assert as_set(ours) == as_set(expected(site, name)), cls


def test_what_the_crawler_cannot_honour_fails_the_submission_in_one_line(tmp_path: Path, redis_url: str,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRAWLER_SPIDER_PATHS", os.pathsep.join([os.environ["CRAWLER_SPIDER_PATHS"], str(tmp_path)]))
    cases = {
        'custom_settings = {"DOWNLOADER_MIDDLEWARES": {"myproject.middlewares.Proxy": 543}}':
            "setting DOWNLOADER_MIDDLEWARES is not supported: downloader middlewares do not run here",
        'custom_settings = {"SPIDER_MIDDLEWARES": {"myproject.middlewares.Depth": 50}}':
            "setting SPIDER_MIDDLEWARES is not supported",
        'custom_settings = {"HTTPCACHE_ENABLED": True}': "setting HTTPCACHE_ENABLED has no counterpart",
        "@classmethod\ndef from_crawler(cls, crawler, *a, **kw):\n"
        "    spider = super().from_crawler(crawler, *a, **kw)\n"
        "    crawler.signals.connect(spider.idle, signal='spider_idle')\n    return spider":
            "from_crawler (the crawler, its signals and stats do not exist here) is not supported",
    }
    for i, (body, message) in enumerate(cases.items()):
        file = tmp_path / f"bad_{i}.py"
        file.write_text(f"import scrapy\n\n\nclass Bad(scrapy.Spider):\n    name = 'bad'\n"
                        f"{textwrap.indent(body, '    ')}\n")
        res = cli("submit", "http://127.0.1.1/", "--spider", f"{file}:Bad", "--redis-url", redis_url,
                  "--store", f"sqlite:///{tmp_path / 'x.db'}")
        assert res.returncode != 0, res.stdout
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], res.stderr


def test_the_crawler_runs_without_scrapy_installed(make_web: Callable[..., TestWeb], tmp_path: Path) -> None:
    # Scrapy made unimportable, as on a machine without the extra: a crawl with a spider of ours
    # runs, and a Scrapy spider is refused in one line saying what to install.
    blocker = tmp_path / "sitecustomize.py"
    blocker.write_text(textwrap.dedent("""
        import sys
        class _NoScrapy:
            def find_spec(self, name, path=None, target=None):
                if name == "scrapy" or name.startswith("scrapy."):
                    raise ModuleNotFoundError(f"No module named {name!r}", name=name)
                return None
        sys.meta_path.insert(0, _NoScrapy())
    """))
    _, site, origin = quotes_web(make_web)
    env = {k: v for k, v in os.environ.items() if k != "CRAWLER_REDIS_URL"}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(ROOT)])
    res = cli("crawl", origin + "/", "--spider", f"{EXAMPLES / 'quotes_spider.py'}:AuthorSpider", "--out",
              str(tmp_path / "out"), "--workers", "1", env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    assert f"items: {len(site.author_records())}" in res.stdout
    res = cli("crawl", origin + "/", "--spider", f"{EXAMPLES / 'scrapy_quotes.py'}:AuthorSpider", "--out",
              str(tmp_path / "out2"), env=env)
    assert res.returncode != 0
    assert "No module named 'scrapy' (a Scrapy spider needs the extra: pip install 'crawler[scrapy]')" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr


def test_the_crawler_imports_no_scrapy_module_unless_a_scrapy_spider_is_used() -> None:
    probe = textwrap.dedent(f"""
        import sys
        import crawler, crawler.cli, crawler.celeryapp.tasks, crawler.embedded
        from crawler.spiders import loader
        found = loader.find("{EXAMPLES / 'catalogue_spider.py'}:CatalogueSpider", ["{EXAMPLES}"])
        loader.instantiate(loader.load_class(found), [])
        print(sorted(m for m in sys.modules if m == "scrapy" or m.startswith("scrapy.")))
        found = loader.find("{EXAMPLES / 'scrapy_quotes.py'}:QuotesSpider", ["{EXAMPLES}"])
        print(type(loader.instantiate(loader.load_class(found), [])).__qualname__, "scrapy" in sys.modules)
    """)
    res = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=60,
                         check=False)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.splitlines() == ["[]", "Scrapy[QuotesSpider] True"]


PARITY_SPIDER = '''
import datetime
import decimal

import scrapy
from scrapy.exceptions import DownloadConnectionRefusedError
from scrapy.spidermiddlewares.httperror import HttpError


class Parity(scrapy.Spider):
    name = "parity"
    custom_settings = {"ROBOTSTXT_OBEY": False, "RETRY_TIMES": 0}
    handle_httpstatus_list = [404]

    def __init__(self, base="", refused="", **kw):
        super().__init__(**kw)
        self.base, self.refused = base, refused

    async def start(self):
        metas = {"none": {}, "empty": {"handle_httpstatus_list": []}, "other": {"handle_httpstatus_list": [500]},
                 "all": {"handle_httpstatus_all": True}}
        for tag, meta in metas.items():
            yield scrapy.Request(f"{self.base}/missing-{tag}", callback=self.got, errback=self.lost,
                                 meta=meta, cb_kwargs={"tag": tag})
        yield scrapy.Request(self.refused, callback=self.got, errback=self.lost, cb_kwargs={"tag": "refused"})
        yield scrapy.Request(self.base + "/", callback=self.typed)

    def got(self, response, tag):
        yield {"tag": tag, "to": "callback", "status": response.status}

    def lost(self, failure):
        tag = failure.request.cb_kwargs["tag"]
        status = failure.value.response.status if failure.check(HttpError) else None
        yield {"tag": tag, "to": "errback", "type": failure.type.__name__, "status": status,
               "refused": bool(failure.check(DownloadConnectionRefusedError))}

    def typed(self, response):
        yield {"tags": {"only-one"}, "price": decimal.Decimal("1.10"), "day": datetime.date(2026, 2, 3),
               "at": datetime.datetime(2026, 2, 3, 4, 5, 6), "tup": (1, 2)}
'''


def test_failed_requests_and_item_types_reach_the_spider_as_in_scrapy(
        make_web: Callable[..., TestWeb], tmp_path: Path, workers: Workers, r: redis.Redis, redis_url: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("scrapy")
    _, _, origin = quotes_web(make_web)
    refused = f"http://127.0.0.1:{free_port()}/x"  # a port nothing listens on: the connection is refused
    _, _, _, ours, by_scrapy = _ours_and_scrapys(r, redis_url, workers, tmp_path, monkeypatch, "parity_spider",
                                                 PARITY_SPIDER, "Parity", base=origin, refused=refused)
    assert as_set(ours) == as_set(by_scrapy)
    assert {"tag": "empty", "to": "errback", "type": "HttpError", "status": 404, "refused": False} in ours
    assert {"tag": "refused", "to": "errback", "type": "DownloadConnectionRefusedError", "status": None,
            "refused": True} in ours
    assert {"tags": ["only-one"], "price": "1.10", "day": "2026-02-03", "at": "2026-02-03T04:05:06",
            "tup": [1, 2]} in ours


REDIRECT_SPIDER = textwrap.dedent('''
    import scrapy


    class Moved(scrapy.Spider):
        name = "moved"
        custom_settings = {"ROBOTSTXT_OBEY": False}

        def start_requests(self):
            yield scrapy.Request(self.base + "/")

        async def start(self):
            yield scrapy.Request(self.base + "/")

        def parse(self, response):
            yield {"url": response.url, "title": response.css("title::text").get()}
            yield from response.follow_all(css="a")
''')


def test_a_page_reached_by_several_redirects_and_links_is_parsed_once_as_in_scrapy(
        make_web: Callable[..., TestWeb], tmp_path: Path, workers: Workers, r: redis.Redis, redis_url: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Moved pages as real sites keep them: two old URLs and a chain of two hops ending at a page
    # also linked directly, and one that moved to a page nothing else links. Scrapy's duplicate
    # filter drops a redirect to a URL it has seen, so each page's callback runs once; before,
    # the crawler ran it once per way in (the same item up to four times).
    pytest.importorskip("scrapy")
    from tests.web import handlers as hw

    web = make_web(1, 1)
    origin = web.origin(0)
    web.route(0, "/", hw.body(hw.html("home", ["/old-a", "/old-b", "/hop-1", "/new", "/moved"])))
    web.route(0, "/old-a", hw.redirect("/new"))
    web.route(0, "/old-b", hw.redirect(origin + "/new", 302))
    web.route(0, "/hop-1", hw.redirect("/hop-2"))
    web.route(0, "/hop-2", hw.redirect("/new", 307))
    web.route(0, "/new", hw.body(hw.html("new", ["/"])))
    web.route(0, "/moved", hw.redirect("/fresh"))
    web.route(0, "/fresh", hw.body(hw.html("fresh", ["/new"])))
    db, _, st, ours, by_scrapy = _ours_and_scrapys(r, redis_url, workers, tmp_path, monkeypatch, "moved_spider",
                                                   REDIRECT_SPIDER, "Moved", base=origin)
    assert len(by_scrapy) == len(as_set(by_scrapy)) == 3  # home, new, fresh: once each
    assert len(ours) == len(as_set(ours)), ours  # no item twice
    assert as_set(ours) == as_set(by_scrapy)
    # Every way in was fetched and has its row; of the rows ending at one page, one was parsed
    # and the others say whose duplicate they are.
    rows = rows_by_url(db)
    by_final: dict[str, list[dict[str, Any]]] = {}
    for row in rows.values():
        by_final.setdefault(row["final_url"], []).append(row)
    new = origin + "/new"
    assert sorted(u for u, row in rows.items() if row["final_url"] == new) == sorted(
        origin + p for p in ("/old-a", "/old-b", "/hop-1", "/new") if origin + p in rows)
    for final, group in by_final.items():
        assert [row["near_duplicate_of"] for row in group].count(None) == 1, (final, group)
        assert all(row["near_duplicate_of"] in (None, final) for row in group), group
    assert int(st["counters"]["redirect_duplicates"]) == len(rows) - len(by_final)


START_SPIDER = textwrap.dedent('''
    import scrapy


    class Starts(scrapy.Spider):
        name = "starts"
        custom_settings = {"ROBOTSTXT_OBEY": False}

        start_urls = ["START_URL"]  # never read: start() is overridden

        def __init__(self, base="", other="", **kw):
            super().__init__(**kw)
            self.base, self.other = base, other

        async def start(self):
            yield scrapy.Request(self.base + "/p/2.html")
            yield scrapy.Request(self.other + "/p/3.html")

        def parse(self, response):
            yield {"url": response.url}
''')


def test_a_spider_whose_start_overrides_its_start_urls_starts_where_scrapys_does(
        make_web: Callable[..., TestWeb], tmp_path: Path, workers: Workers, r: redis.Redis, redis_url: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # start() yields pages of two hosts; start_urls names a third page that Scrapy never asks
    # for. Before, the job took start_urls as its seeds: it fetched that page, and scoped to its
    # host dropped the other host's request as out of scope.
    pytest.importorskip("scrapy")
    web = make_web(2, 5)
    base, other = web.origin(0), web.origin(1)
    source = START_SPIDER.replace("START_URL", base + "/p/1.html")  # a literal, as the probe wrote it
    db, _, _, ours, by_scrapy = _ours_and_scrapys(r, redis_url, workers, tmp_path, monkeypatch, "starts_spider",
                                                  source, "Starts", base=base, other=other)
    assert as_set(by_scrapy) == as_set([{"url": base + "/p/2.html"}, {"url": other + "/p/3.html"}])
    assert as_set(ours) == as_set(by_scrapy)
    assert base + "/p/1.html" not in rows_by_url(db)
