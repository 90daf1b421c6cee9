"""Scrapy spiders run as they are, without a crawl: the adapter hands each page to the Scrapy
callback as a real Scrapy response and translates what it yields; what it cannot honour is
refused at submission with one line naming it."""

from __future__ import annotations

import asyncio
import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from crawler.config.settings import Settings
from crawler.spiders import DropItem, Page, Request, Spider
from crawler.spiders.loader import SpiderUnavailable, find, load_class, prepare

scrapy = pytest.importorskip("scrapy")

from crawler.spiders import scrapy_compat  # noqa: E402 - needs Scrapy, skipped above without it

# Scrapy 2.19 deprecates FormRequest.from_response (the spiders being ported still call it).
pytestmark = pytest.mark.filterwarnings("ignore::scrapy.exceptions.ScrapyDeprecationWarning")

LIST = (b'<html><body><div class="quote"><span class="text">One</span><small class="author">Ada</small>'
        b'<a href="/author/Ada/">(about)</a></div><ul class="pager"><li class="next"><a href="/page/2/">Next</a>'
        b'</li></ul><form action="/login" method="post"><input type="hidden" name="csrf_token" value="tok">'
        b'<input name="username"></form></body></html>')
AUTHOR = b'<html><body><h3 class="author-title"> Ada </h3><span class="born">1815</span></body></html>'

SPIDER = '''
import dataclasses

import attrs
import scrapy
from itemloaders.processors import MapCompose, TakeFirst
from scrapy.loader import ItemLoader


class AuthorItem(scrapy.Item):
    name = scrapy.Field()
    born = scrapy.Field()


@dataclasses.dataclass
class Line:
    text: str


@attrs.define
class Pair:
    a: int
    b: int


class Quotes(scrapy.Spider):
    name = "quotes"
    handle_httpstatus_list = [410]

    def parse(self, response):
        for q in response.css("div.quote"):
            quote = {"text": q.css("span.text::text").get(), "author": q.css("small.author::text").get()}
            yield response.follow(q.css("a::attr(href)").get(), callback=self.parse_author,
                                  cb_kwargs={"quote": quote}, meta={"from": response.url}, priority=3,
                                  errback=self.lost, dont_filter=True)
        yield from response.follow_all(css="li.next a")
        yield scrapy.FormRequest.from_response(response, formdata={"username": "u"}, callback=self.after)
        yield Line("plain")
        yield Pair(1, 2)
        yield None

    def parse_author(self, response, quote):
        loader = ItemLoader(AuthorItem(), response=response)
        loader.default_input_processor = MapCompose(str.strip)
        loader.default_output_processor = TakeFirst()
        loader.add_css("name", "h3.author-title::text")
        loader.add_css("born", ".born::text")
        yield {**quote, **loader.load_item(), "from": response.meta["from"], "depth": response.meta["depth"]}

    def after(self, response):
        return {"status": response.status}

    def lost(self, failure):
        response = getattr(failure.value, "response", None)
        yield {"lost": failure.request.url, "status": response.status if response else None,
               "kind": type(failure.value).__name__}

    async def api(self, response):
        yield {"json": response.json()["n"], "type": type(response).__name__}

    def odd(self, response):
        yield scrapy.Request("http://h/c", cookies={"a": "1"})
        yield scrapy.Request("http://h/l", callback=lambda r: None)
        yield scrapy.Request("http://h/p", meta={"proxy": "http://p:1"})
        yield "garbage"
'''


def _load(tmp_path: Path, source: str = SPIDER, name: str = "Quotes") -> type[Spider]:
    (tmp_path / "spider.py").write_text(textwrap.dedent(source))
    return load_class(find(f"{tmp_path / 'spider.py'}:{name}", [str(tmp_path)]))


def _page(url: str, body: bytes, request: Request | None = None, status: int = 200,
          ctype: str = "text/html; charset=utf-8", error: str | None = None, depth: int = 1) -> Page:
    page = Page(url, status=status, headers=[("Content-Type", ctype)], body=body, error=error, depth=depth)
    if request is not None:
        page.request = request  # type: ignore[attr-defined]  # as the parse stage sets it
    return page


def _call(spider: Spider, req: Request, page: Page) -> list[Any]:
    fn = getattr(spider, req.callback or "parse")
    return list(fn(page, **req.cb_kwargs))


def test_callbacks_get_a_scrapy_response_and_their_requests_keep_callback_and_data(tmp_path: Path) -> None:
    spider = _load(tmp_path)()
    out = list(spider.parse(_page("http://h/", LIST)))
    author, nxt, form, line, pair = out
    assert isinstance(author, Request) and author.url == "http://h/author/Ada/"
    assert author.callback == scrapy_compat.CALLBACK + "parse_author"
    assert author.errback == scrapy_compat.ERRBACK + "lost"
    assert author.cb_kwargs == {"quote": {"text": "One", "author": "Ada"}}
    assert (author.meta, author.priority, author.dont_filter) == ({"from": "http://h/"}, 3, True)
    assert nxt == Request("http://h/page/2/")  # no callback: parse, as in Scrapy
    assert form.method == "POST" and form.callback == scrapy_compat.CALLBACK + "after"
    assert dict(form.headers)["Content-Type"] == "application/x-www-form-urlencoded"
    assert sorted(form.body.split(b"&")) == [b"csrf_token=tok", b"username=u"]
    assert (line, pair) == ({"text": "plain"}, {"a": 1, "b": 2})

    # The request travels as JSON (the frontier's form) and reaches the callback on any worker.
    travelled = Request(**{**author.__dict__, "cb_kwargs": json.loads(json.dumps(author.cb_kwargs))})
    got = _call(spider, travelled, _page(author.url, AUTHOR, travelled, depth=2))
    assert got == [{"text": "One", "author": "Ada", "name": "Ada", "born": "1815", "from": "http://h/", "depth": 2}]


def test_async_callbacks_json_and_binary_responses(tmp_path: Path) -> None:
    spider = _load(tmp_path)()
    req = Request("http://h/api", callback=scrapy_compat.CALLBACK + "api")
    got = _call(spider, req, _page(req.url, b'{"n": 7}', req, ctype="application/json"))
    assert got == [{"json": 7, "type": "JsonResponse"}]
    response = spider.response(_page("http://h/x.bin", b"\x00\x01", ctype="application/octet-stream"))  # type: ignore[attr-defined]
    assert type(response) is scrapy.http.Response and response.body == b"\x00\x01"


def test_failures_go_to_the_errback_as_scrapy_raises_them(tmp_path: Path) -> None:
    spider = _load(tmp_path)()
    req = Request("http://h/gone", callback=scrapy_compat.CALLBACK + "parse_author",
                  errback=scrapy_compat.ERRBACK + "lost", cb_kwargs={"quote": {}}, meta={"from": "x"})
    errback = getattr(spider, req.errback or "")
    assert list(errback(_page(req.url, b"no", req, status=404, error="http_4xx"))) == [
        {"lost": "http://h/gone", "status": 404, "kind": "HttpError"}]
    assert list(errback(Page(req.url, error="timeout"))) == [
        {"lost": "http://h/gone", "status": None, "kind": "DownloadTimeoutError"}]
    # A 200 that failed all the same (cut at max_body) is Scrapy's cancelled download, not a page.
    assert list(errback(_page(req.url, b"x", req, status=200, error="too_large"))) == [
        {"lost": "http://h/gone", "status": None, "kind": "IgnoreRequest"}]
    # A status the spider handles (handle_httpstatus_list) goes to the callback instead.
    assert _load(tmp_path)().on_error  # the default errback: nothing for a plain failure
    got = list(errback(_page(req.url, AUTHOR, req, status=410, error="http_4xx")))
    assert got[0]["name"] == "Ada"


def test_what_cannot_be_translated_is_counted_not_followed(tmp_path: Path) -> None:
    spider = _load(tmp_path)()
    req = Request("http://h/odd", callback=scrapy_compat.CALLBACK + "odd")
    got = _call(spider, req, _page(req.url, b"<html></html>", req))
    assert [type(v).__name__ for v in got] == ["NotTranslated"] * 3 + ["str"]
    reasons = " ".join(v.reason for v in got[:3])
    assert "cookies" in reasons and "not a method of the spider" in reasons and "'proxy'" in reasons


def test_what_cannot_be_translated_is_logged_once_with_its_reason(tmp_path: Path,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    from crawler.spiders.run import run_page_hook

    spider = _load(tmp_path)()
    req = Request("http://h/odd", callback=scrapy_compat.CALLBACK + "odd")
    with caplog.at_level("ERROR"):
        got = run_page_hook(spider, req.callback or "", _page(req.url, b"<html></html>", req), 100, 10**6)
    assert got.counts["spider_error"] == 4  # three requests it cannot follow and a str
    lines = [r.getMessage() for r in caplog.records]
    assert not any("NotTranslated" in line for line in lines), lines  # an internal type means nothing to a user
    assert sum("is not followed" in line for line in lines) == 3 and any("yielded a str" in line for line in lines)


@pytest.mark.parametrize("start", [
    'async def start(self):\n        yield scrapy.Request("http://h/a", callback=self.parse, meta={"k": 1})\n'
    '        yield {"from": "start"}',
    'def start_requests(self):\n        yield scrapy.Request("http://h/a", callback=self.parse, meta={"k": 1})\n'
    '        yield {"from": "start"}',
])
def test_start_and_start_requests_sync_or_async(tmp_path: Path, start: str) -> None:
    source = f"import scrapy\n\nclass S(scrapy.Spider):\n    name = 's'\n\n    {start}\n"
    spider = _load(tmp_path, source, "S")()

    async def take() -> list[Any]:
        return [v async for v in spider.start_requests()]  # type: ignore[attr-defined]

    assert asyncio.run(take()) == [Request("http://h/a", meta={"k": 1}), {"from": "start"}]


def test_start_urls_default_and_allowed_domains(tmp_path: Path) -> None:
    source = ("import scrapy\n\nclass S(scrapy.Spider):\n    name = 's'\n    allowed_domains = ['example.org']\n"
              "    def __init__(self, base='http://a.example.org', **kw):\n        super().__init__(**kw)\n"
              "        self.start_urls = [base + '/']\n")
    spider = _load(tmp_path, source, "S")(base="http://b.example.org")

    async def take() -> list[Any]:
        return [v async for v in spider.start_requests()]  # type: ignore[attr-defined]

    assert asyncio.run(take()) == [Request("http://b.example.org/")]
    assert spider.allow("http://x.example.org/p") and spider.allow("http://example.org/")
    assert not spider.allow("http://example.com/") and not spider.allow("http://badexample.org/")


def _submit(tmp_path: Path, body: str, base: str = "scrapy.Spider", head: str = "import scrapy",
            **settings: Any) -> Settings:
    (tmp_path / "s.py").write_text(f"{head}\n\nclass S({base}):\n    name = 's'\n{textwrap.indent(body, '    ')}\n")
    got, _ = prepare(Settings(spider=f"{tmp_path / 's.py'}:S", spider_paths=[str(tmp_path)], **settings),
                     ["http://h/"])
    return got


def test_custom_settings_become_the_jobs_settings_unless_a_flag_says_otherwise(tmp_path: Path) -> None:
    got = _submit(tmp_path, 'custom_settings = {"DOWNLOAD_DELAY": 1.5, "CONCURRENT_REQUESTS_PER_DOMAIN": 3, '
                            '"ROBOTSTXT_OBEY": False, "USER_AGENT": "qbot/1", "DEPTH_LIMIT": 4, '
                            '"CLOSESPIDER_PAGECOUNT": 50, "RETRY_TIMES": 4, "LOG_LEVEL": "INFO"}')
    assert (got.delay, got.per_host, got.obey_robots, got.user_agent, got.max_depth, got.max_pages,
            got.max_attempts, got.cookies) == (1.5, 3, False, "qbot/1", 4, 50, 5, True)
    assert _submit(tmp_path, 'custom_settings = {"DOWNLOAD_DELAY": 1.5}', delay=0.25).delay == 0.25
    assert _submit(tmp_path, 'download_delay = 2\ncustom_settings = {"COOKIES_ENABLED": False}').cookies is False
    assert _submit(tmp_path, "download_delay = 2", "Spider", "from scrapy import Spider").delay == 2.0


@pytest.mark.parametrize(("body", "base", "head", "named"), [
    ('custom_settings = {"DOWNLOADER_MIDDLEWARES": {"x.Y": 1}}', "scrapy.Spider", "import scrapy",
     "setting DOWNLOADER_MIDDLEWARES is not supported"),
    ('custom_settings = {"SPIDER_MIDDLEWARES": {"x.Y": 1}}', "scrapy.Spider", "import scrapy",
     "setting SPIDER_MIDDLEWARES"),
    ('custom_settings = {"EXTENSIONS": {}}', "scrapy.Spider", "import scrapy", "setting EXTENSIONS"),
    ('custom_settings = {"CONCURRENT_ITEMS": 50}', "scrapy.Spider", "import scrapy",
     "setting CONCURRENT_ITEMS has no counterpart"),
    ("custom_settings = dict(CONCURRENT_ITEMS=1)", "scrapy.Spider", "import scrapy",
     "custom_settings must be a literal dict"),
    ("@classmethod\ndef from_crawler(cls, crawler):\n    return cls()", "scrapy.Spider", "import scrapy",
     "from_crawler"),
    ("rules = ()", "CrawlSpider", "from scrapy.spiders import CrawlSpider", "CrawlSpider"),
    ("pass", "spiders.SitemapSpider", "from scrapy import spiders", "SitemapSpider"),
    ('http_user = "u"', "scrapy.Spider", "import scrapy", "'http_user'"),
])
def test_what_cannot_be_honoured_fails_the_submission_in_one_line(tmp_path: Path, body: str, base: str,
                                                                  head: str, named: str) -> None:
    with pytest.raises(SpiderUnavailable) as err:
        _submit(tmp_path, body, base, head)
    assert named in str(err.value) and "\n" not in str(err.value)
    # A worker (or `crawler crawl`) importing the class refuses it the same way.
    with pytest.raises(SpiderUnavailable, match="Scrapy spider S"):
        load_class(find(f"{tmp_path / 's.py'}:S", [str(tmp_path)]))


def test_the_settings_map_refuses_bad_values(tmp_path: Path) -> None:
    with pytest.raises(SpiderUnavailable, match="CONCURRENT_REQUESTS_PER_DOMAIN: not a whole number"):
        _submit(tmp_path, 'custom_settings = {"CONCURRENT_REQUESTS_PER_DOMAIN": 1.5}')


def test_item_pipelines_are_scrapys_own_classes_in_scrapys_order(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "pipes.py").write_text(textwrap.dedent("""
        from scrapy.exceptions import DropItem

        class Old:  # Scrapy before 2.13: the spider is an argument
            def open_spider(self, spider):
                self.name = spider.name

            def process_item(self, item, spider):
                if item.get("drop"):
                    raise DropItem("unwanted")
                return {**item, "by": self.name}

        class New:  # Scrapy 2.13 and later: no spider
            def process_item(self, item):
                return {**item, "seen": True}
    """))
    monkeypatch.setenv("CRAWLER_SPIDER_PATHS", str(tmp_path))  # a worker's own setting
    source = ("import scrapy\n\nclass S(scrapy.Spider):\n    name = 's'\n"
              "    custom_settings = {'ITEM_PIPELINES': {'pipes.New': 500, 'pipes.Old': 100, 'pipes.Off': None}}\n")
    cls = _load(tmp_path, source, "S")
    spider = cls()
    old, new = (p() for p in cls.pipelines)  # type: ignore[operator]
    old.open_spider(spider)
    assert new.process_item(old.process_item({"a": 1}, spider), spider) == {"a": 1, "by": "s", "seen": True}
    with pytest.raises(DropItem, match="unwanted"):
        old.process_item({"drop": 1}, spider)


def test_a_spider_reached_through_its_own_base_class_is_read_as_scrapys(tmp_path: Path) -> None:
    (tmp_path / "s.py").write_text(textwrap.dedent("""
        from scrapy import Spider as ScrapySpider

        class Base(ScrapySpider):
            custom_settings = {"DEPTH_LIMIT": 2}

        class S(Base):
            name = "s"
    """))
    got, seeds = prepare(Settings(spider=f"{tmp_path / 's.py'}:S", spider_paths=[str(tmp_path)]), [])
    assert (got.max_depth, got.cookies, got.spider_start_requests, seeds) == (2, True, True, [])


def test_a_scrapy_spiders_start_urls_are_not_seeds_its_start_yields_them_or_not(tmp_path: Path) -> None:
    # Taken as seeds, start_urls were fetched where an overridden start() means Scrapy never
    # reads them, and scoped the job to their domains, dropping start()'s other hosts.
    (tmp_path / "s.py").write_text(textwrap.dedent("""
        import scrapy

        class S(scrapy.Spider):
            name = "s"
            start_urls = ["http://a.example/b"]

            async def start(self):
                yield scrapy.Request("http://c.example/")
    """))
    got, seeds = prepare(Settings(spider=f"{tmp_path / 's.py'}:S", spider_paths=[str(tmp_path)]), [])
    assert (seeds, got.allow_domains, got.spider_start_requests) == ([], [], True)
    # With Scrapy's own start(), start_urls are what it yields: the job's seeds, as before.
    (tmp_path / "d.py").write_text(textwrap.dedent("""
        import scrapy

        class D(scrapy.Spider):
            name = "d"
            start_urls = ["http://a.example/b"]
    """))
    got, seeds = prepare(Settings(spider=f"{tmp_path / 'd.py'}:D", spider_paths=[str(tmp_path)]), [])
    assert (seeds, got.spider_start_requests) == (["http://a.example/b"], True)


# -- parity with Scrapy 2.19 itself: its own middleware, exceptions and JSON encoder as oracles --

@pytest.mark.parametrize("spider_codes", [None, [404], []])
@pytest.mark.parametrize("settings", [{}, {"HTTPERROR_ALLOWED_CODES": [500]}, {"HTTPERROR_ALLOW_ALL": True}])
@pytest.mark.parametrize("meta", [{}, {"handle_httpstatus_list": [500]}, {"handle_httpstatus_list": []},
                                  {"handle_httpstatus_all": True}, {"handle_httpstatus_all": False}])
def test_which_failed_statuses_reach_the_callback_is_scrapys_httperror_decision(
        tmp_path: Path, spider_codes: list[int] | None, settings: dict[str, Any], meta: dict[str, Any]) -> None:
    from scrapy.http import HtmlResponse
    from scrapy.settings import Settings as ScrapySettings
    from scrapy.spidermiddlewares.httperror import HttpError, HttpErrorMiddleware

    attr = "" if spider_codes is None else f"    handle_httpstatus_list = {spider_codes!r}\n"
    source = f"import scrapy\n\nclass S(scrapy.Spider):\n    name = 's'\n    custom_settings = {settings!r}\n{attr}"
    spider = _load(tmp_path, source, "S")()
    oracle = HttpErrorMiddleware(ScrapySettings(settings))
    oracle.crawler = type("C", (), {"spider": spider.scrapy})()  # type: ignore[attr-defined,assignment]
    for status in (404, 500, 503):
        req = scrapy.Request("http://h/x", meta=meta)
        try:
            oracle.process_spider_input(HtmlResponse("http://h/x", status=status, request=req))
            scrapy_says = True
        except HttpError:
            scrapy_says = False
        assert spider._accepts(status, meta) is scrapy_says, (status, meta)  # type: ignore[attr-defined]


ERRBACK_SPIDER = '''
import scrapy
from scrapy.exceptions import CannotResolveHostError, DownloadConnectionRefusedError, DownloadTimeoutError
from twisted.internet import error


class S(scrapy.Spider):
    name = "s"

    def lost(self, failure):
        yield {"type": failure.type.__name__,
               "scrapy": [bool(failure.check(c)) for c in
                          (DownloadConnectionRefusedError, CannotResolveHostError, DownloadTimeoutError)],
               "twisted": [bool(failure.check(c)) for c in
                           (error.ConnectionRefusedError, error.DNSLookupError, error.TimeoutError)]}
'''


def test_errbacks_get_the_exceptions_scrapy_219_raises_and_twisteds_still_match(tmp_path: Path) -> None:
    from scrapy.utils._download_handlers import wrap_twisted_exceptions
    from twisted.internet import error

    spider = _load(tmp_path, ERRBACK_SPIDER, "S")()
    req = Request("http://h/x", errback=scrapy_compat.ERRBACK + "lost")
    for i, (reason, twisted) in enumerate((("connect", error.ConnectionRefusedError), ("dns", error.DNSLookupError),
                                           ("timeout", error.TimeoutError))):
        try:  # what Scrapy's own download handlers turn Twisted's error into
            with wrap_twisted_exceptions():
                raise twisted()
        except Exception as exc:
            scrapy_raises = type(exc)
        [got] = list(getattr(spider, req.errback or "")(_page(req.url, b"", req, status=0, error=reason)))
        assert got["type"] == scrapy_raises.__name__
        assert got["scrapy"] == [j == i for j in range(3)] and got["twisted"] == [j == i for j in range(3)]


def test_items_are_written_as_scrapys_feed_exports_write_them(tmp_path: Path) -> None:
    import dataclasses
    import datetime
    import decimal

    from scrapy.utils.serialize import ScrapyJSONEncoder

    from crawler.spiders.run import dumps_item

    @dataclasses.dataclass
    class Inner:
        k: int

    class Part(scrapy.Item):
        k = scrapy.Field()

    item = {"tags": {"only-one"}, "price": decimal.Decimal("1.10"),
            "at": datetime.datetime(2026, 2, 3, 4, 5, 6, 7), "day": datetime.date(2026, 2, 3),
            "tz": datetime.datetime(2026, 2, 3, tzinfo=datetime.UTC), "time": datetime.time(4, 5),
            "tup": (1, 2), "inner": Inner(1), "part": Part(k=2), "deep": [{"d": decimal.Decimal("2")}]}
    ours = json.loads(dumps_item(item))
    assert ours == json.loads(json.dumps(item, cls=ScrapyJSONEncoder))
    assert ours["tags"] == ["only-one"] and ours["price"] == "1.10" and ours["day"] == "2026-02-03"


FROM_CRAWLER_PIPES = '''
class MongoPipeline:  # the shape of Scrapy's own documentation example
    def __init__(self, mongo_uri, mongo_db):
        self.mongo_uri, self.mongo_db = mongo_uri, mongo_db

    @classmethod
    def from_crawler(cls, crawler):
        crawler.stats.inc_value("built")
        return cls(crawler.settings.get("MONGO_URI"), crawler.settings.get("MONGO_DATABASE", "items"))

    def open_spider(self):
        self.opened = True

    def process_item(self, item):
        return {**item, "uri": self.mongo_uri, "db": self.mongo_db, "opened": self.opened}


class Named:
    def __init__(self, bot, spider):
        self.bot, self.spider = bot, spider

    @classmethod
    def from_crawler(cls, crawler):
        return cls(crawler.settings.get("BOT_NAME"), crawler.spider.name)

    def process_item(self, item, spider):
        return {**item, "bot": self.bot, "by": self.spider, "same": spider is self.spider_obj}

    def open_spider(self, spider):
        self.spider_obj = spider


class Signals:
    @classmethod
    def from_crawler(cls, crawler):
        crawler.signals.connect(print, signal=object())
        return cls()

    def process_item(self, item):
        return item
'''


def test_item_pipelines_with_from_crawler_get_the_spiders_settings(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from crawler.spiders.pipelines import Pipelines, PipelineUnavailable

    (tmp_path / "fc_pipes.py").write_text(FROM_CRAWLER_PIPES)
    monkeypatch.setenv("CRAWLER_SPIDER_PATHS", str(tmp_path))
    source = ("import scrapy\n\nclass S(scrapy.Spider):\n    name = 's'\n"
              "    custom_settings = {'MONGO_URI': 'mongodb://127.0.0.1:1', "
              "'ITEM_PIPELINES': {'fc_pipes.MongoPipeline': 1, 'fc_pipes.Named': 2}}\n")
    cls = _load(tmp_path, source, "S")
    spider = cls()
    pipes = Pipelines(spider, list(cls.pipelines))
    got = pipes.process({"a": 1}, "http://h/")
    assert got.item == {"a": 1, "uri": "mongodb://127.0.0.1:1", "db": "items", "opened": True,
                        "bot": "scrapybot", "by": "s", "same": True}, got.counts
    assert spider.scrapy_crawler().stats.get_value("built") == 1  # type: ignore[attr-defined]

    # One that cannot be built here stops the job with its reason: the same error on every item,
    # never a traceback per item.
    (tmp_path / "other.py").write_text(source.replace("fc_pipes.Named", "fc_pipes.Signals"))
    cls2 = load_class(find(f"{tmp_path / 'other.py'}:S", [str(tmp_path)]))
    broken = Pipelines(cls2(), list(cls2.pipelines))
    with pytest.raises(PipelineUnavailable, match=r"crawler\.signals") as first:
        broken.process({"a": 1}, "http://h/")
    with pytest.raises(PipelineUnavailable) as again:
        broken.process({"a": 2}, "http://h/")
    assert again.value is first.value and "\n" not in str(first.value)


def test_scrapys_own_setting_names_are_those_of_the_installed_scrapy(tmp_path: Path) -> None:
    from scrapy.settings import default_settings

    from crawler.spiders import scrapy_names

    assert {n for n in dir(default_settings) if n.isupper() and not n.startswith("_")} == scrapy_names.NAMES
    # A setting that is not Scrapy's is the spider's own: accepted, for its code and pipelines.
    got = _submit(tmp_path, 'custom_settings = {"MONGO_URI": "mongodb://127.0.0.1:1", "DOWNLOAD_DELAY": 2}')
    assert got.delay == 2.0
