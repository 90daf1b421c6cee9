"""Running a ``scrapy.Spider`` subclass as it is (``--spider file.py:Class``, with the ``scrapy``
extra installed).

Imported only when such a spider is loaded (``crawler.spiders.loader`` checks for ``scrapy`` in
``sys.modules`` first): a crawler without Scrapy spiders never imports Scrapy.

``wrap`` makes a crawler ``Spider`` class around the Scrapy class. Its callbacks turn each
``Page`` into a real Scrapy response (``HtmlResponse``, ``TextResponse``, ``XmlResponse`` or
``Response``, chosen by Scrapy's own ``responsetypes``; ``response.request`` a real
``scrapy.Request`` carrying the request's callback, ``cb_kwargs`` and ``meta``), call the Scrapy
spider's method with it, and translate what it yields: a ``scrapy.Request`` (``FormRequest``,
``response.follow`` ...) becomes the crawler's ``Request`` with its callback and errback stored by
name, items (dicts, ``scrapy.Item``, dataclasses, attrs) become dicts through ``itemadapter``.
Everything else about the spider, selectors, ``ItemLoader``, ``response.json()``, is Scrapy's own
code running on the real response. What Scrapy's engine would have done around the spider is
done by the crawler: scheduling, dedup, retries, robots.txt, cookies, politeness, and the
settings ``crawler.spiders.scrapy_settings`` maps; what it cannot do is refused, never ignored.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import re
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from functools import cache
from typing import Any, ClassVar
from urllib.parse import urlsplit

import scrapy
from itemadapter import ItemAdapter
from scrapy import exceptions as scrapy_exceptions
from scrapy.exceptions import DropItem as ScrapyDropItem
from scrapy.exceptions import IgnoreRequest
from scrapy.http import Headers, Response
from scrapy.responsetypes import responsetypes
from scrapy.settings import Settings as ScrapySettings
from scrapy.spidermiddlewares.httperror import HttpError
from scrapy.statscollectors import MemoryStatsCollector
from scrapy.utils.misc import build_from_crawler
from twisted.internet import error as twisted_error
from twisted.python.failure import Failure

from crawler.spiders import pipelines as item_pipelines
from crawler.spiders import scrapy_settings
from crawler.spiders.base import Spider
from crawler.spiders.page import Page
from crawler.spiders.request import Request, request
from crawler.spiders.scrapy_settings import ScrapyUnsupported

log = logging.getLogger(__name__)

# A Scrapy method is stored by the name of the wrapper method that calls it: callbacks and
# errbacks apart (one method may serve as both), and never clashing with a crawler hook a
# Scrapy spider may also define (``login``, ``headers``, ``allow``...).
CALLBACK = "scrapy_cb__"
ERRBACK = "scrapy_eb__"

# Meta keys Scrapy's middlewares act on, which the crawler cannot honour per request.
_UNSUPPORTED_META = {
    "proxy": "per-request proxies", "cookiejar": "several cookie jars per job",
    "dont_merge_cookies": "requests outside the job's cookie jar", "bindaddress": "a bind address",
    "dont_redirect": "per-request redirect control", "dont_retry": "per-request retry control",
    "max_retry_times": "per-request retry counts", "download_timeout": "per-request timeouts",
    "dont_obey_robotstxt": "per-request robots.txt exceptions", "download_maxsize": "per-request size limits",
    "dont_cache": "Scrapy's HTTP cache", "referrer_policy": "per-request referrer policies",
}
# Keys Scrapy's engine sets on a response's meta; a spider passing ``response.meta`` on keeps
# none of them (the crawler counts depth itself).
_ENGINE_META = frozenset({"depth", "download_slot", "download_latency", "redirect_times", "redirect_ttl",
                          "redirect_urls", "redirect_reasons", "retry_times"})
_SCRAPY_SPIDER_ATTRS = frozenset(dir(scrapy.Spider))


class NotTranslated:
    """What a Scrapy callback yielded that has no crawler counterpart (a request with ``cookies``,
    a lambda as callback, a meta key a middleware would act on). Passed on as it is, so the page
    hook runner counts it ``spider_error``; the reason is logged here."""

    crawler_logged = True  # the hook runner counts it without a second line naming an internal type

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def __repr__(self) -> str:
        return f"<NotTranslated {self.reason}>"


def check(cls: type[scrapy.Spider]) -> None:
    """ScrapyUnsupported naming the first thing of ``cls`` the crawler cannot honour."""
    name = cls.__qualname__
    for base in cls.__mro__:
        if base.__name__ in scrapy_settings.REFUSED_BASES and base.__module__.startswith("scrapy."):
            raise ScrapyUnsupported(f"Scrapy spider {name}: {scrapy_settings.REFUSED_BASES[base.__name__]}")
    for method, why in scrapy_settings.REFUSED_METHODS.items():
        if _own(cls, method):
            raise ScrapyUnsupported(f"Scrapy spider {name}: {why} is not supported")
    attributes = {a: getattr(cls, a) for a in (*scrapy_settings.ATTRIBUTES, *scrapy_settings.REFUSED_ATTRIBUTES)
                  if hasattr(cls, a)}
    scrapy_settings.job_changes(name, cls.custom_settings, attributes)


def _own(cls: type, attr: str) -> bool:
    """Does ``cls`` (or a base below ``scrapy.Spider``) define ``attr`` itself?"""
    for klass in cls.__mro__:
        if klass is scrapy.Spider or klass.__module__.startswith("scrapy."):
            return False
        if attr in vars(klass):
            return True
    return False


def _methods(cls: type[scrapy.Spider]) -> set[str]:
    """The spider's own methods: any of them may be a callback or an errback."""
    names = {"parse"}
    for klass in cls.__mro__:
        if klass is scrapy.Spider or klass.__module__.startswith("scrapy."):
            break
        names.update(n for n, v in vars(klass).items()
                     if not n.startswith("__") and (inspect.isfunction(v) or isinstance(v, staticmethod)))
    return names


@cache
def wrap(cls: type[scrapy.Spider]) -> type[Spider]:
    """A crawler spider class running ``cls``; ScrapyUnsupported if ``cls`` uses something the
    crawler cannot honour."""
    check(cls)
    namespace: dict[str, Any] = {
        "__module__": __name__, "__qualname__": f"Scrapy[{cls.__qualname__}]", "__doc__": cls.__doc__,
        "scrapy_class": cls, "name": getattr(cls, "name", "") or cls.__name__,
        "start_urls": tuple(getattr(cls, "start_urls", ()) or ()),
        "allowed_domains": tuple(getattr(cls, "allowed_domains", ()) or ()),
        "pipelines": tuple(_pipeline(ref) for ref in scrapy_settings.pipelines_of(cls.custom_settings)),
    }
    for method in _methods(cls):
        namespace[CALLBACK + method] = _callback(method)
        namespace[ERRBACK + method] = _errback(method)
    return type(f"Scrapy{cls.__name__}", (ScrapySpider,), namespace)


def _callback(method: str) -> Callable[..., Iterator[Any]]:
    def callback(self: ScrapySpider, page: Page, **cb_kwargs: Any) -> Iterator[Any]:
        return self.call(method, page, cb_kwargs)
    callback.__name__ = callback.__qualname__ = CALLBACK + method
    return callback


def _errback(method: str) -> Callable[..., Iterator[Any]]:
    def errback(self: ScrapySpider, page: Page, **_: Any) -> Iterator[Any]:
        return self.failed(page, method)
    errback.__name__ = errback.__qualname__ = ERRBACK + method
    return errback


class ScrapySpider(Spider):
    """A crawler spider running a Scrapy spider (``scrapy_class``); made by ``wrap``."""

    scrapy_class: ClassVar[type[scrapy.Spider]]
    follow_links: ClassVar[bool] = False  # Scrapy follows only what its callbacks yield

    def __init__(self, **kwargs: str) -> None:
        # Not the base class's: the arguments are the Scrapy spider's (``-a key=value``).
        cls = self.scrapy_class
        self.scrapy = cls(**kwargs)
        settings = ScrapySettings()
        settings.setdict(cls.custom_settings or {}, priority="spider")
        self.scrapy.settings = settings
        self._crawler: ScrapyCrawler | None = None
        domains = getattr(self.scrapy, "allowed_domains", None) or ()
        self._domains = tuple(str(d).lower().split(":", 1)[0].lstrip(".") for d in domains if d)

    def scrapy_crawler(self) -> ScrapyCrawler:
        """The crawler Scrapy pipelines' ``from_crawler`` get, made once. Not the Scrapy
        spider's ``self.crawler``: its stats would reach no counter, and a callback using them
        must fail (counted) rather than count into nothing."""
        if self._crawler is None:
            self._crawler = ScrapyCrawler(self.scrapy)
        return self._crawler

    def __getattr__(self, name: str) -> Any:
        # What a pipeline asks of "the spider" (``spider.name``, its own attributes) is the
        # Scrapy spider's.
        if name in ("scrapy", "_crawler"):
            raise AttributeError(name)
        got = getattr(self.scrapy, name)
        if inspect.ismethod(got) and got.__self__ is self.scrapy:
            # Not its methods: a request naming one without the wrapper's prefix would have it
            # called with a Page instead of a Scrapy response (counted no_callback instead).
            raise AttributeError(name)
        return got

    def __repr__(self) -> str:
        return f"<{type(self).__qualname__} {self.scrapy.name!r}>"

    # -- crawler hooks ---------------------------------------------------------------------

    def allow(self, url: str) -> bool:
        """Scrapy's offsite rule: the host is an allowed domain or below one."""
        if not self._domains:
            return True
        host = (urlsplit(url).hostname or "").lower()
        return any(host == d or host.endswith("." + d) for d in self._domains)

    def parse(self, page: Page, **cb_kwargs: Any) -> Iterator[Any]:
        return self.call(None, page, cb_kwargs)

    def on_error(self, page: Page, **_: Any) -> Iterator[Any]:
        return self.failed(page, None)

    async def start_requests(self) -> AsyncIterator[Any]:
        """The Scrapy spider's ``start()`` (Scrapy 2.13 and later), else its ``start_requests()``
        (earlier), else its ``start_urls``; translated one by one, as the crawler asks for more."""
        spider = self.scrapy
        if not _own(type(spider), "start"):
            if _own(type(spider), "start_requests"):
                old_style: Callable[[], Iterable[Any]] = spider.start_requests  # type: ignore[attr-defined]
                for value in old_style():  # Scrapy before 2.13
                    for out in self._translate(value):
                        yield out
            else:
                # Scrapy's default start() marks these dont_filter; plain requests instead, so a
                # start URL also given as a seed is not fetched twice.
                for url in getattr(spider, "start_urls", None) or ():
                    yield Request(url)
            return
        async for value in spider.start():
            for out in self._translate(value):
                yield out

    # -- callbacks -------------------------------------------------------------------------

    def call(self, method: str | None, page: Page, cb_kwargs: dict[str, Any]) -> Iterator[Any]:
        response = self.response(page)
        fn = self.scrapy._parse if method is None else getattr(self.scrapy, method)
        return self._translate(fn(response, **cb_kwargs))

    def failed(self, page: Page, errback: str | None) -> Iterator[Any]:
        """A failed request, as Scrapy hands it on: a response whose status the spider accepts
        (``handle_httpstatus_list``, ``HTTPERROR_ALLOWED_CODES``...) to the callback, anything
        else to the errback as a twisted ``Failure`` (``HttpError`` with the response,
        ``DNSLookupError``, ``TimeoutError``...), with ``failure.request`` set."""
        ours = _request_of(page)
        response = self.response(page) if page.status else None
        if response is not None and not 200 <= response.status < 300 and self._accepts(response.status, ours.meta):
            return self.call(_method_of(ours.callback, CALLBACK), page, dict(ours.cb_kwargs))
        if errback is None:
            return iter(())
        failure = Failure(_exception(page, response))  # type: ignore[no-untyped-call]
        failure.request = response.request if response is not None else self._scrapy_request(ours, page.url)  # type: ignore[attr-defined]
        return self._translate(getattr(self.scrapy, errback)(failure))

    def _accepts(self, status: int, meta: Any) -> bool:
        """Scrapy's HttpErrorMiddleware: the request's ``handle_httpstatus_all``, else its
        ``handle_httpstatus_list`` (which replaces the rest, ``[]`` allowing none), else
        ``HTTPERROR_ALLOW_ALL``, else the spider's ``handle_httpstatus_list`` (which replaces
        ``HTTPERROR_ALLOWED_CODES``), else that setting."""
        if meta.get("handle_httpstatus_all", False):
            return True
        settings = self.scrapy.settings
        if "handle_httpstatus_list" in meta:
            allowed = meta["handle_httpstatus_list"]
        elif settings.getbool("HTTPERROR_ALLOW_ALL"):
            return True
        else:
            allowed = getattr(self.scrapy, "handle_httpstatus_list", settings.getlist("HTTPERROR_ALLOWED_CODES"))
        try:
            return status in allowed
        except TypeError:  # not a container: Scrapy would fail the page, nothing is allowed
            return False

    def response(self, page: Page) -> Response:
        """The page as the Scrapy response its spider would have got."""
        headers = Headers({k: page.headers.getlist(k) for k in page.headers})
        url = page.final_url or page.url
        cls = responsetypes.from_args(headers=headers, url=url, body=page.body)
        req = self._scrapy_request(_request_of(page), url, depth=page.depth,
                                   redirected=[page.url] if url != page.url else [])
        # What Scrapy's downloader and middlewares would have written in the request's meta.
        req.meta["download_latency"] = page.latency
        if page.attempts > 1:
            req.meta["retry_times"] = page.attempts - 1
        if page.redirects:
            req.meta["redirect_times"] = page.redirects
        return cls(url=url, status=page.status or 200, headers=headers, body=page.body, request=req,
                   protocol={"HTTP/2": "h2"}.get(page.protocol, page.protocol) or None)

    def _scrapy_request(self, ours: Request, url: str, depth: int = 0,
                        redirected: list[str] | None = None) -> scrapy.Request:
        meta = dict(ours.meta)
        meta["depth"] = depth
        if redirected:
            meta["redirect_urls"] = redirected
        callback = _method_of(ours.callback, CALLBACK)
        errback = _method_of(ours.errback, ERRBACK)
        return scrapy.Request(
            url, callback=getattr(self.scrapy, callback) if callback else None, method=ours.method,
            headers=dict(ours.headers) or None, body=ours.body or None, meta=meta, cb_kwargs=dict(ours.cb_kwargs),
            priority=ours.priority, dont_filter=ours.dont_filter,
            errback=getattr(self.scrapy, errback) if errback else None)

    # -- translating what the Scrapy spider gives ------------------------------------------

    def _translate(self, result: Any) -> Iterator[Any]:
        for value in _flatten(result):
            if value is None:
                continue  # Scrapy skips None too
            if isinstance(value, scrapy.Request):
                yield self._request(value)
            elif ItemAdapter.is_item(value):
                yield ItemAdapter(value).asdict()
            else:
                yield value  # not an item nor a request: the hook runner counts it, naming its type

    def _request(self, req: scrapy.Request) -> Request | NotTranslated:
        why = self._untranslatable(req)
        if why:
            log.error("Scrapy spider %s: a request for %s is not followed: %s", self.scrapy.name, req.url[:200], why)
            return NotTranslated(why)
        meta = {k: v for k, v in req.meta.items() if k not in _ENGINE_META}
        return request(req.url, self._name(req.callback, CALLBACK), method=req.method,
                       headers=req.headers.to_unicode_dict() if req.headers else None, body=req.body or None,
                       cb_kwargs=req.cb_kwargs, meta=meta, priority=req.priority, dont_filter=req.dont_filter,
                       errback=self._name(req.errback, ERRBACK))

    def _untranslatable(self, req: scrapy.Request) -> str:
        if req.cookies:
            return "Request(cookies=...) is not supported (cookies come from the job's jar: --cookies)"
        for key in req.meta:
            if key in _UNSUPPORTED_META:
                return f"meta key {key!r} ({_UNSUPPORTED_META[key]}) is not supported"
        for fn, kind in ((req.callback, "callback"), (req.errback, "errback")):
            if fn is not None and not (getattr(fn, "__self__", None) is self.scrapy and
                                       hasattr(type(self), CALLBACK + getattr(fn, "__name__", ""))):
                return f"its {kind} {fn!r} is not a method of the spider"
        return ""

    @staticmethod
    def _name(fn: Any, prefix: str) -> str | None:
        if fn is None:
            return None
        name = fn.__name__
        return None if prefix == CALLBACK and name == "parse" else prefix + name


def _request_of(page: Page) -> Request:
    got = getattr(page, "request", None)
    return got if isinstance(got, Request) else Request(page.url)


def _method_of(stored: str | None, prefix: str) -> str | None:
    if stored and stored.startswith(prefix):
        return stored[len(prefix):]
    return None


# What Scrapy 2.19's download handlers raise (they wrap Twisted's errors in their own), as
# classes that are Twisted's too: an errback checking either, ``failure.check(
# DownloadConnectionRefusedError)`` or the ``ConnectionRefusedError`` of older Scrapy spiders,
# matches. Named as Scrapy's, as ``failure.type.__name__`` shows.
class DownloadConnectionRefusedError(scrapy_exceptions.DownloadConnectionRefusedError,
                                     twisted_error.ConnectionRefusedError):
    """Connection was refused by other side."""

    def __init__(self, message: str = "") -> None:
        twisted_error.ConnectionRefusedError.__init__(self, string=message)  # type: ignore[no-untyped-call]


class CannotResolveHostError(scrapy_exceptions.CannotResolveHostError, twisted_error.DNSLookupError):
    """DNS lookup failed."""


class DownloadTimeoutError(scrapy_exceptions.DownloadTimeoutError, twisted_error.TimeoutError):
    """User timeout caused connection failure."""

    def __init__(self, message: str = "") -> None:
        twisted_error.TimeoutError.__init__(self, string=message)  # type: ignore[no-untyped-call]


def _exception(page: Page, response: Response | None) -> Exception:
    """What Scrapy's downloader or HttpErrorMiddleware would have raised for this failure."""
    reason = page.error or ""
    if response is not None and not 200 <= response.status < 300:
        return HttpError(response, "Ignoring non-200 response")
    if reason == "dns":
        return CannotResolveHostError(page.url)
    if reason == "connect":
        return DownloadConnectionRefusedError(page.url)
    if reason == "timeout":
        return DownloadTimeoutError(page.url)
    if reason == "protocol":  # the connection broke mid-response: Twisted's ResponseFailed, wrapped
        return scrapy_exceptions.DownloadFailedError(page.url)
    if reason == "robots":
        return IgnoreRequest("Forbidden by robots.txt")
    return IgnoreRequest(reason or "failed")


def _flatten(result: Any) -> Iterable[Any]:
    """A callback's result as values: None, one request or item, an iterable, a coroutine or an
    async generator (run to its end here: the stages are synchronous)."""
    if result is None:
        return ()
    if isinstance(result, scrapy.Request) or ItemAdapter.is_item(result) or isinstance(result, (str, bytes)):
        return (result,)
    if inspect.isasyncgen(result):
        return asyncio.run(_collect(result))
    if inspect.iscoroutine(result):
        return _flatten(asyncio.run(result))
    if isinstance(result, Iterable):
        return result
    return (result,)


async def _collect(gen: AsyncIterator[Any]) -> list[Any]:
    return [value async for value in gen]


# -- item pipelines (ITEM_PIPELINES) ---------------------------------------------------------

_SEPARATORS = re.compile(f"[,{re.escape(os.pathsep)}]")


def _worker_paths() -> list[str]:
    # The directories this worker may load code from, as its settings read them.
    return [p for p in _SEPARATORS.split(os.environ.get("CRAWLER_SPIDER_PATHS", "")) if p.strip()]


class ScrapyCrawler:
    """What a Scrapy component's ``from_crawler(crawler)`` gets here: ``settings`` (a frozen
    Scrapy ``Settings``: Scrapy's defaults and the spider's ``custom_settings``), ``spider`` and
    ``stats`` (a Scrapy ``MemoryStatsCollector`` of this worker process; it reaches no job
    counter). Nothing else of Scrapy's crawler exists here: asking for it (``crawler.signals``,
    ``crawler.engine``) raises, so the pipeline cannot be built and the job stops, saying why."""

    def __init__(self, spider: scrapy.Spider) -> None:
        self.spider = spider
        self.settings = spider.settings.copy()
        self.settings.freeze()
        self.stats = MemoryStatsCollector(self)  # type: ignore[arg-type]  # it reads .settings only

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(f"crawler.{name} does not exist under this crawler (a Scrapy pipeline's from_crawler "
                             "gets crawler.settings, crawler.spider and crawler.stats only)")


def _pipeline(ref: str) -> type:
    """A crawler pipeline class running the Scrapy pipeline ``ref`` (``module:Class``), loaded
    like any pipeline (installed, or under this worker's spider paths) when the job's pipelines
    are first opened, and built as Scrapy builds it (``from_crawler(crawler)`` if it has one,
    given a ``ScrapyCrawler``) when first given the spider: Scrapy's ``DropItem`` becomes the
    crawler's, and the Scrapy spider is the one its methods get. One that cannot be built is
    PipelineUnavailable: the job stops with the reason."""

    class ScrapyPipeline:
        def __init__(self) -> None:
            self.cls = item_pipelines.load(ref, _worker_paths())
            self._inner: Any = None

        def inner(self, spider: ScrapySpider) -> Any:
            if self._inner is None:
                try:
                    self._inner = build_from_crawler(self.cls, spider.scrapy_crawler())  # type: ignore[call-overload]
                except Exception as exc:
                    log.exception("Scrapy item pipeline %s cannot be built", ref)
                    raise item_pipelines.PipelineUnavailable(
                        f"Scrapy item pipeline {ref[:200]!r} cannot be built: {type(exc).__name__}: {exc}"
                    ) from exc
            return self._inner

        def open_spider(self, spider: ScrapySpider) -> Any:
            return _with_spider(getattr(self.inner(spider), "open_spider", None), spider)

        def close_spider(self, spider: ScrapySpider) -> Any:
            return _with_spider(getattr(self.inner(spider), "close_spider", None), spider)

        def process_item(self, item: dict[str, Any], spider: ScrapySpider) -> Any:
            try:
                got = _with_spider(self.inner(spider).process_item, spider, item)
                if inspect.isawaitable(got):
                    got = asyncio.run(_wait(got))
            except ScrapyDropItem as exc:
                raise item_pipelines.DropItem(str(exc)) from exc
            return ItemAdapter(got).asdict() if ItemAdapter.is_item(got) else got

    ScrapyPipeline.__qualname__ = ScrapyPipeline.__name__ = f"ScrapyPipeline[{ref}]"
    return ScrapyPipeline


def _with_spider(fn: Callable[..., Any] | None, spider: ScrapySpider, *args: Any) -> Any:
    """``fn(*args, spider)`` when ``fn`` takes the spider (Scrapy before 2.13), else ``fn(*args)``."""
    if fn is None:
        return None
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        params = {}  # type: ignore[assignment]
    # As Scrapy decides: the spider is passed only to a method that asks for it.
    spider_param = params.get("spider")
    takes = (spider_param is not None and spider_param.default is inspect.Parameter.empty) or (
        len([p for p in params.values() if p.default is inspect.Parameter.empty
             and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]) > len(args))
    return fn(*args, spider.scrapy) if takes else fn(*args)


async def _wait(awaitable: Any) -> Any:
    return await awaitable
