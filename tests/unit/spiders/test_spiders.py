"""The spider API without a crawl: what hooks yield becomes items and links, failures are
counted, Page gives selectors over the parsed tree, and the loader finds spiders and checks
their version."""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
import textwrap
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from crawler.config.settings import SettingError, Settings
from crawler.spiders import Follow, Page, Spider
from crawler.spiders.loader import SpiderUnavailable, find, load, parse_args, prepare, version_of
from crawler.spiders.run import allowed, as_item, overrides, run_page_hook
from crawler.stages.messages import FetchedPage
from crawler.store.export import item_columns, item_rows
from tests.conftest import ROOT

HTML = b"""<html><head><title>T</title><base href="http://h/dir/"></head><body>
<h1 class=name>Kettle</h1><p class=price>12.50</p><a href="a.html">A</a><a href="/b">B</a></body></html>"""


def _page(body: bytes = HTML, **kw: Any) -> Page:
    return Page("http://h/x", status=200, headers=[("Content-Type", "text/html"), ("Set-Cookie", "a=1"),
                                                   ("set-cookie", "b=2")], body=body, **kw)


@dataclasses.dataclass
class Product:
    name: str
    price: float


class Shop(Spider):
    def parse(self, page: Page) -> Iterator[Any]:
        yield {"name": page.css("h1.name::text").get(), "price": float(page.xpath("//p[@class='price']/text()").get())}
        yield Product("dc", 1.0)
        yield page.follow("a.html")
        yield Follow("http://h/other")


def test_page_selectors_headers_and_links() -> None:
    page = _page()
    assert page.css("title::text").get() == "T"
    assert page.xpath("//a/@href").getall() == ["a.html", "/b"]
    assert page.headers["content-type"] == "text/html"
    assert page.headers["SET-COOKIE"] == "a=1, b=2"
    assert page.headers.getlist("set-cookie") == ["a=1", "b=2"]
    assert page.links == ["http://h/dir/a.html", "http://h/b"]  # against <base href>
    assert page.follow("c.html") == Follow("http://h/dir/c.html")
    assert page.soup.find("h1").text == "Kettle"
    assert "Kettle" in page.text
    assert _page(b"").css("a").getall() == []  # an empty body: selectors that find nothing


def test_parse_yields_items_and_links() -> None:
    got = run_page_hook(Shop(), "parse", _page(), max_items=10, max_bytes=10_000)
    assert got.items == [{"name": "Kettle", "price": 12.5}, {"name": "dc", "price": 1.0}]
    assert got.links == ["http://h/dir/a.html", "http://h/other"]
    assert not got.counts


class Broken(Spider):
    def parse(self, page: Page) -> Iterator[Any]:
        yield {"ok": 1}
        raise ValueError("boom")


class Weird(Spider):
    def parse(self, page: Page) -> Iterator[Any]:
        yield "http://h/a-string"  # neither an item nor a link
        yield {"nan": float("nan")}  # not JSON
        yield {"when": dataclasses}  # str()-able: stored as its text
        yield from ({"n": i} for i in range(5))

    def check_item(self, item: dict[str, Any], page: Page) -> dict[str, Any] | None:
        if item.get("n") == 1:
            return None
        if item.get("n") == 2:
            raise KeyError("bad")
        if item.get("n") == 3:
            return {**item, "fixed": True}
        return item


def test_hook_failures_are_counted_never_raised(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR):
        got = run_page_hook(Broken(), "parse", _page(), 10, 10_000)
    assert got.items == [] and got.links == []  # half a page's items would look complete
    assert got.counts == Counter({"spider_error": 1, "spider_error:parse": 1})
    assert "ValueError: boom" in caplog.text  # the traceback

    got = run_page_hook(Weird(), "parse", _page(), 10, 10_000)
    assert [i.get("n") for i in got.items] == [None, 0, 3, 4]
    assert got.items[0]["when"].startswith("<module")
    assert got.items[2]["fixed"] is True
    assert got.counts["spider_error"] == 3  # the str, the NaN item, the raising check
    assert got.counts["items_dropped"] == 2
    assert got.counts["items_fixed"] == 1


def test_items_past_the_caps_are_counted() -> None:
    class Many(Spider):
        def parse(self, page: Page) -> Iterator[Any]:
            yield from ({"i": i, "pad": "x" * 50} for i in range(20))

    assert len(run_page_hook(Many(), "parse", _page(), 5, 10**6).items) == 5
    capped = run_page_hook(Many(), "parse", _page(), 100, 300)
    assert len(capped.items) == 4 and capped.counts["items_capped"] == 16
    # Which cap, so the crawl's summary can name the setting to raise.
    assert capped.counts["items_capped:max_item_bytes"] == 16
    by_count = run_page_hook(Many(), "parse", _page(), 5, 10**6)
    assert by_count.counts["items_capped:max_items_per_page"] == 15


def test_the_crawl_summary_says_how_many_items_were_capped_and_by_which_setting() -> None:
    from crawler.cli.crawling import capped

    settings = Settings(max_items_per_page=1000)
    assert capped({"counters": {"stored": 1}}, settings) == ""
    line = capped({"counters": {"items_capped": 49_000, "items_capped:max_items_per_page": 49_000}}, settings)
    assert "49000 more not kept" in line and "max_items_per_page=1000 (CRAWLER_MAX_ITEMS_PER_PAGE)" in line
    both = capped({"counters": {"items_capped": 5, "items_capped:max_items_per_page": 2,
                                "items_capped:max_item_bytes": 3}}, settings)
    assert "2 by max_items_per_page" in both and "3 by max_item_bytes=1000000 (CRAWLER_MAX_ITEM_BYTES)" in both


def test_allow_and_overrides() -> None:
    class Picky(Spider):
        def allow(self, url: str) -> bool:
            if "raise" in url:
                raise RuntimeError
            return "/ok" in url

    counts: Counter[str] = Counter()
    assert allowed(Picky(), "http://h/ok", counts) and not allowed(Picky(), "http://h/no", counts)
    assert not allowed(Picky(), "http://h/raise", counts) and counts["spider_error:allow"] == 1
    assert overrides(Picky(), "allow") and not overrides(Picky(), "parse")
    assert as_item(Product("a", 1)) == {"name": "a", "price": 1} and as_item(3) is None


def test_session_ended_by_default() -> None:
    class Site(Spider):
        login_url = "http://h/login"

    s = Site()
    assert s.session_ended(Page("http://h/p", status=403))
    assert s.session_ended(Page("http://h/p", final_url="http://h/login?next=/p", status=200))
    assert not s.session_ended(Page("http://h/p", status=200))
    assert not Spider().session_ended(Page("http://h/p", final_url="http://h/login", status=200))


def _write(path: Path, version: str = "") -> Path:
    path.write_text(textwrap.dedent(f"""
        from crawler.spiders import Spider

        class S(Spider):
            {"version = " + repr(version) if version else "pass"}
            start_urls = ["http://127.0.1.1/"]
            allowed_domains = ["127.0.1.1"]

            def __init__(self, **kw):
                super().__init__(**kw)
                if kw.get("fail"):
                    raise ValueError("bad argument")

        NotASpider = object
        """))
    return path


def test_loader_finds_versions_and_errors(tmp_path: Path) -> None:
    f = _write(tmp_path / "s.py")
    paths = [str(tmp_path)]
    found = find(f"{f}:S", paths)
    assert found.target == f"{f.resolve()}:S" and found.root == tmp_path.resolve()
    v1 = version_of(found.target, paths)
    assert v1.startswith("src-")
    assert load(found.target, v1, ["category=Science Fiction"], paths).category == "Science Fiction"  # type: ignore[attr-defined]
    assert version_of(f"{ROOT / 'examples' / 'catalogue_spider.py'}:CatalogueSpider", [str(ROOT / "examples")]) == "1"
    for ref, message in [
        (f"{tmp_path / 'none.py'}:S", "does not exist on this machine"),
        (f"{f}:Missing", "has no 'Missing'"),
        (f"{f}:NotASpider", "is not a subclass of crawler.spiders.Spider"),
        ("no_such_module_xyz:S", "module 'no_such_module_xyz' .* is not under a directory CRAWLER_SPIDER_PATHS lists"),
    ]:
        with pytest.raises(SpiderUnavailable, match=message):
            load(ref, "", [], paths)
    with pytest.raises(SpiderUnavailable, match="CRAWLER_SPIDER_PATHS is not set here"):
        find(f"{f}:S", [])
    with pytest.raises(SpiderUnavailable, match="no spider named 'nosuch'"):
        find("nosuch", paths)
    with pytest.raises(SpiderUnavailable, match="is version src-"):
        load(found.target, "src-000000000000", [], paths)
    with pytest.raises(SpiderUnavailable, match="constructor raised ValueError: bad argument"):
        load(found.target, v1, ["fail=1"], paths)
    with pytest.raises(SpiderUnavailable, match="not key=value"):
        parse_args(["=x"])


def test_prepare_records_target_version_seeds_and_domains(tmp_path: Path) -> None:
    f = _write(tmp_path / "p.py", version="7")
    allowed_here = Settings(spider_paths=[str(tmp_path)])
    settings, seeds = prepare(allowed_here.replace(spider=f"{f}:S"), [])
    assert settings.spider == f"{f.resolve()}:S" and settings.spider_version == "7"
    assert seeds == ["http://127.0.1.1/"] and settings.allow_domains == ["127.0.1.1"]
    given, seeds = prepare(allowed_here.replace(spider=f"{f}:S", allow_domains=["x.org"]), ["http://x.org/"])
    assert given.allow_domains == ["x.org"] and seeds == ["http://x.org/"]
    assert prepare(Settings(), ["http://a/"]) == (Settings(), ["http://a/"])
    with pytest.raises(SettingError, match="spider_args"):
        Settings(spider_args=["a=\n"]).validated()
    assert Settings(spider_args=["a=two words"]).validated()
    listed = Settings.from_env({"CRAWLER_SPIDER_PATHS": f"/a b{os.pathsep}/c,/d"})
    assert listed.spider_paths == ["/a b", "/c", "/d"] and "spider_paths" not in listed.job_settings()


CANARY = """
import pathlib
pathlib.Path({marker!r}).write_text("imported")
from crawler.spiders import Spider

class Cls(Spider):
    start_urls = ["http://127.0.1.1/"]
"""


def test_spiders_outside_the_listed_directories_are_refused_unread(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    listed, outside = tmp_path / "listed", tmp_path / "outside"
    (listed / "pkg").mkdir(parents=True)
    outside.mkdir()
    marker = tmp_path / "imported"
    canary = outside / "canary.py"
    canary.write_text(CANARY.format(marker=str(marker)))
    (listed / "link.py").symlink_to(canary)
    (listed / "pkg" / "__init__.py").write_text("")
    (listed / "pkg" / "base.py").write_text("from crawler.spiders import Spider\n\nclass Base(Spider):\n    pass\n")
    (listed / "pkg" / "shop.py").write_text("from .base import Base\n\nclass Shop(Base):\n    version = 'v3'\n")
    monkeypatch.chdir(outside)  # a bare module name must not be found beside the submitter
    paths = [str(listed)]
    for ref in (f"{canary}:Cls", "canary:Cls", f"{listed}/../outside/canary.py:Cls", f"{listed / 'link.py'}:Cls"):
        with pytest.raises(SpiderUnavailable, match="is not under a directory CRAWLER_SPIDER_PATHS lists"):
            prepare(Settings(spider=ref, spider_paths=paths), ["http://127.0.1.1/"])
        with pytest.raises(SpiderUnavailable, match="is not under a directory CRAWLER_SPIDER_PATHS lists"):
            load(ref, "", [], paths)
    assert not marker.exists()
    # A module under a listed directory: found there, imported from there (its package too).
    settings, _ = prepare(Settings(spider="pkg.shop:Shop", spider_paths=paths), ["http://127.0.1.1/"])
    assert settings.spider == "pkg.shop:Shop" and settings.spider_version == "v3"
    assert type(load("pkg.shop:Shop", "v3", [], paths)).__name__ == "Shop"
    assert Path(sys.modules["pkg.shop"].__file__ or "").is_relative_to(listed)
    for name in ("pkg.shop", "pkg.base", "pkg"):
        sys.modules.pop(name, None)


def _scrapy_project(base: Path, package: str) -> Path:
    """A ``scrapy startproject`` tree under ``base``: its spider imports the project's items."""
    (base / package / "spiders").mkdir(parents=True)
    (base / "scrapy.cfg").write_text(f"[settings]\ndefault = {package}.settings\n")
    (base / package / "__init__.py").write_text("")
    (base / package / "spiders" / "__init__.py").write_text("")
    (base / package / "items.py").write_text("from dataclasses import dataclass\n\n@dataclass\nclass Product:\n"
                                             "    name: str\n")
    spider = base / package / "spiders" / "products.py"
    spider.write_text(f"from crawler.spiders import Spider\nfrom {package}.items import Product\n\n"
                      "class Products(Spider):\n    version = '1'\n\n"
                      "    def parse(self, page):\n        yield Product(page.url)\n")
    return spider


def test_a_spider_file_in_a_scrapy_project_imports_the_project_as_scrapy_does(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))
    project = tmp_path / "proj"
    package = f"shopproj_{abs(hash(str(tmp_path))) % 10**8}"
    spider = _scrapy_project(project, package)
    ref = f"{spider}:Products"
    # Only the spiders' directory is listed: the project root above it is not this worker's to
    # import from, so the spider's import of its project fails, and nothing was added to the path.
    with pytest.raises(SpiderUnavailable, match="ModuleNotFoundError"):
        load(ref, "", [], [str(spider.parent)])
    assert str(project) not in sys.path and package not in sys.modules
    # The project root listed: the spider's own imports work, as under `scrapy crawl`.
    got = load(ref, "1", [], [str(spider.parent), str(project)])
    assert list(run_page_hook(got, "parse", _page(), 10, 10**6).items) == [{"name": "http://h/x"}]
    assert Path(sys.modules[package].__file__ or "").is_relative_to(project)
    for name in [m for m in sys.modules if m.startswith(package)]:
        sys.modules.pop(name, None)


def test_crawl_lists_the_scrapy_project_root_of_its_spider_file(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from crawler.spiders.loader import prepare_local

    monkeypatch.setattr(sys, "path", list(sys.path))
    project = tmp_path / "proj"
    package = f"crawlproj_{abs(hash(str(tmp_path))) % 10**8}"
    spider = _scrapy_project(project, package)
    settings, _ = prepare_local(Settings(spider=f"{spider}:Products", spider_paths=[]), ["http://127.0.1.1/"])
    assert settings.spider_paths == [str(project)]  # the crawl's workers import the project from there
    for name in [m for m in sys.modules if m.startswith(package)]:
        sys.modules.pop(name, None)


def test_items_travel_in_page_messages_and_export_flat() -> None:
    page = FetchedPage("http://h/x", items=({"a": 1, "b": [1, 2]},), items_parsed=True)
    assert FetchedPage.from_json(page.to_json()) == page
    rows = [{"url": "http://h/x", "job_id": "j", "item": {"a": 1, "url": "own"}},
            {"url": "http://h/y", "job_id": "j", "item": {"b": 2}}]
    flat = list(item_rows(rows))
    assert flat[0] == {"_url": "http://h/x", "_job_id": "j", "a": 1, "url": "own"}
    assert item_columns(flat) == ["_url", "_job_id", "a", "url", "b"]
