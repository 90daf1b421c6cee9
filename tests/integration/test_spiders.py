"""Spiders end to end: real workers run a spider's hooks on the loopback catalogue; its items
are stored, exported and fed; failing hooks cost only their own pages' items; a worker that
cannot run the job's spider stops the job with the reason."""

from __future__ import annotations

import csv
import io
import json
import os
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis

from crawler import control, jobs
from crawler.config.settings import Settings
from crawler.store import open_store
from crawler.testweb import TestWeb
from crawler.testweb.catalogue import Catalogue
from tests.conftest import Workers, wait_done
from tests.integration.test_crawl import ROOT, cli, no_private_redis_env
from tests.spiders.flaky import unlucky

EXAMPLE = "examples/catalogue_spider.py:CatalogueSpider"


def _catalogue(make_web: Callable[..., TestWeb]) -> tuple[TestWeb, Catalogue, str]:
    web = make_web(1, 1)
    shop = Catalogue()
    shop.mount(web, 0)
    return web, shop, web.origin(0)


def _store_items(out: Path) -> list[dict[str, Any]]:
    store = open_store(f"sqlite:///{out / 'crawl.db'}")
    try:
        return list(store.items())
    finally:
        store.close()


def _by_sku(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(items, key=lambda i: str(i["sku"]))


def test_the_example_spider_extracts_every_product(make_web: Callable[..., TestWeb], tmp_path: Path) -> None:
    web, shop, origin = _catalogue(make_web)
    out = tmp_path / "shop"
    res = cli("crawl", origin + "/", "--spider", EXAMPLE, "--out", str(out), "--workers", "2",
              env=no_private_redis_env())
    assert res.returncode == 0, res.stderr[-3000:]
    assert f"items: {len(shop.products)} in {out / 'items.jsonl'}" in res.stdout

    expected = _by_sku(shop.records(origin))
    rows = _store_items(out)
    assert _by_sku([r["item"] for r in rows]) == expected
    assert all(r["url"] == r["item"]["url"] for r in rows)
    # The feed beside the store, and the export, say the same.
    feed = [json.loads(line) for line in (out / "items.jsonl").read_text().splitlines()]
    assert _by_sku([{k: v for k, v in f.items() if not k.startswith("_")} for f in feed]) == expected
    assert {f["_url"] for f in feed} == {r["url"] for r in expected}
    exported = cli("export", str(out), "--items", "--format", "csv")
    assert exported.returncode == 0, exported.stderr
    table = list(csv.DictReader(io.StringIO(exported.stdout)))
    assert len(table) == len(expected)
    assert list(table[0])[:2] == ["_url", "_job_id"]
    assert {json.dumps(json.loads(t["tags"])) for t in table} == {json.dumps(r["tags"]) for r in expected}

    # follow_links = False: only listings, categories and products were fetched, never "/about".
    paths = {h.path for h in web.hits()}
    assert paths - {"/robots.txt"} == set(shop.paths())


def test_a_failing_hook_costs_only_its_pages_items(make_web: Callable[..., TestWeb], tmp_path: Path,
                                                   r: redis.Redis, redis_url: str) -> None:
    _, shop, origin = _catalogue(make_web)
    out = tmp_path / "flaky"
    # On the tests' Redis, so the job's counters are still there to read afterwards.
    res = cli("crawl", origin + "/", "--spider", "tests.spiders.flaky:FlakySpider", "--out", str(out),
              "--workers", "2", "--redis-url", redis_url)
    assert res.returncode == 0, res.stderr[-3000:]
    job = res.stdout.split("job ", 1)[1].split(":", 1)[0]
    records = shop.records(origin)
    failing = [r for r in records if unlucky(r["sku"])]
    out_of_stock = [r for r in records if r["stock"] == 0 and not unlucky(r["sku"])]
    assert failing and out_of_stock
    want = [{**r, "name": r["name"].upper()} for r in records
            if not unlucky(r["sku"]) and r["stock"] > 0]
    assert _by_sku([r["item"] for r in _store_items(out)]) == _by_sku(want)

    # Every product page has its row all the same; category pages were refused by allow().
    store = open_store(f"sqlite:///{out / 'crawl.db'}")
    try:
        urls = {p["url"] for p in store.pages()}
    finally:
        store.close()
    assert {r["url"] for r in records} <= urls
    assert not any("/category/" in u for u in urls)
    counters = {k: int(v) for k, v in jobs.status(r, job)["counters"].items()}
    assert counters["spider_error"] == len(failing)
    assert counters["spider_error:parse"] == len(failing)
    assert counters["items_dropped"] == len(out_of_stock)
    assert counters["items_fixed"] == len(want)
    assert counters["items"] == len(want)
    assert counters["links_denied_spider"] > 0
    logs = "".join(p.read_text(errors="replace") for p in (out / "logs").glob("worker-*.log"))
    assert logs.count("spider FlakySpider: parse raised") == len(failing)
    assert "RuntimeError: cannot read SKU-" in logs  # the traceback is in the worker log
    # ... and each failure, in one line, in the job's central log.
    central = [e["message"] for e in control.logs(r, job, level="ERROR", limit=1000)]
    hits = [m for m in central if "FlakySpider: parse raised" in m and "RuntimeError: cannot read SKU-" in m]
    assert len(hits) == len(failing)


def _spider_file(path: Path, version: str) -> Path:
    path.write_text(textwrap.dedent(f"""
        from crawler.spiders import Spider

        class Shop(Spider):
            version = "{version}"

            def parse(self, page):
                yield {{"title": page.css("title::text").get()}}
        """))
    return path


def _allow(monkeypatch: pytest.MonkeyPatch, directory: Path) -> None:
    """Let this test's submitter and the workers it starts load spiders from ``directory``."""
    monkeypatch.setenv("CRAWLER_SPIDER_PATHS", os.pathsep.join([os.environ["CRAWLER_SPIDER_PATHS"], str(directory)]))


def test_a_worker_without_the_jobs_spider_stops_the_job(make_web: Callable[..., TestWeb], tmp_path: Path,
                                                        workers: Workers, r: redis.Redis, redis_url: str,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    _, _, origin = _catalogue(make_web)
    _allow(monkeypatch, tmp_path)
    spider = _spider_file(tmp_path / "shop_spider.py", "1")
    settings = Settings.from_env(redis_url=redis_url, shards=1, store=f"sqlite:///{tmp_path / 'a.db'}",
                                 allow_networks=["127.0.0.0/8"], spider=f"{spider}:Shop")
    missing = jobs.submit(r, settings, [origin + "/"])
    spider.unlink()  # submitted from a machine that has it; this worker's machine does not
    workers.start("w", "shard-0,shared")
    st = wait_done(r, missing, timeout=60)
    assert st["status"] == jobs.STOPPED
    assert "does not exist on this machine" in st["error"], st["error"]
    assert st["counters"]["spider_unavailable"] >= 1
    assert not st["counters"].get("stored")


def test_a_spider_of_another_version_is_refused(tmp_path: Path, workers: Workers, r: redis.Redis,
                                                redis_url: str, make_web: Callable[..., TestWeb],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    _, _, origin = _catalogue(make_web)
    _allow(monkeypatch, tmp_path)
    spider = _spider_file(tmp_path / "v_spider.py", "1")
    settings = Settings.from_env(redis_url=redis_url, shards=1, store=f"sqlite:///{tmp_path / 'v.db'}",
                                 allow_networks=["127.0.0.0/8"], spider=f"{spider}:Shop")
    job = jobs.submit(r, settings, [origin + "/"])
    _spider_file(spider, "2")
    workers.start("w", "shard-0,shared")
    st = wait_done(r, job, timeout=60)
    assert "is version 2 on this worker, but the job was submitted with version 1" in st["error"], st["error"]


def test_an_installed_spider_runs_by_name_from_its_start_urls(make_web: Callable[..., TestWeb],
                                                             tmp_path: Path) -> None:
    _, shop, origin = _catalogue(make_web)
    site = tmp_path / "site-packages"
    (site / "shopspiders").mkdir(parents=True)
    (site / "shopspiders" / "__init__.py").write_text(textwrap.dedent(f"""
        from examples.catalogue_spider import CatalogueSpider

        class Shop(CatalogueSpider):
            start_urls = ["{origin}/catalogue/page-1.html"]

            def product(self, page):
                return {{**super().product(page), "type": page.headers.get("content-type")}}
        """))
    dist = site / "shopspiders-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: shopspiders\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[crawler.spiders]\nshop = shopspiders:Shop\n")
    # No WARC: response headers still reach the spider's hooks.
    env = {**no_private_redis_env(), "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)]), "CRAWLER_WARC": "0"}
    out = tmp_path / "out"
    res = cli("crawl", "--spider", "shop", "--out", str(out), "--workers", "1", env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    items = [r["item"] for r in _store_items(out)]
    assert len(items) == len(shop.products)  # listings only: no home page, no categories
    assert {i["type"] for i in items} == {"text/html; charset=utf-8"}

    unknown = cli("crawl", "--spider", "nosuch", "--out", str(tmp_path / "x"), env=env)
    assert unknown.returncode == 2
    assert "no spider named 'nosuch' (group crawler.spiders: shop)" in unknown.stderr
