"""Running a spider's page hooks safely: what they yield sorted into items and links, every
failure of the user's code counted and logged, never raised into the stage.

A hook that raises costs that page's items (counted ``spider_error``, traceback in the worker
log), never the page's row or the rest of the batch.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import decimal
import inspect
import json
import logging
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from crawler.spiders.base import Spider, Yielded
from crawler.spiders.page import Page
from crawler.spiders.request import Request, bad_header, to_spec

log = logging.getLogger(__name__)

# The settings that cap a page's items, as ``items_capped:<setting>`` counters name them.
CAP_COUNT = "max_items_per_page"
CAP_BYTES = "max_item_bytes"


@dataclass
class HookResult:
    """What a page's hooks gave: items to store (JSON-able dicts), links to follow (absolute, not
    yet canonical: the plain requests' URLs), requests with more than a URL to them (a callback,
    data, a method...), and counters for the job."""

    items: list[dict[str, Any]] = field(default_factory=list)
    links: list[str] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)
    requests: list[Request] = field(default_factory=list)


def overrides(spider: Spider, hook: str) -> bool:
    """Does the spider's class define ``hook`` itself? Pages whose hooks are the base class's
    no-ops cost nothing: no Page, no selector, no body fetched for ``on_error``."""
    return getattr(type(spider), hook) is not getattr(Spider, hook)


def spider_error(counts: Counter[str], spider: Spider, hook: str, url: str) -> None:
    """Count and log (with the traceback: call from an ``except`` block) a hook that raised."""
    counts["spider_error"] += 1
    counts[f"spider_error:{hook}"] += 1
    log.exception("spider %s: %s raised on %s", type(spider).__qualname__, hook, url)


def _drain(result: Any) -> Iterable[Yielded]:
    """What a callback returned, as an iterable: an async generator or a coroutine (``async
    def`` callbacks, as Scrapy allows) is run to its end here."""
    if inspect.isasyncgen(result):
        async def collect() -> list[Any]:
            return [v async for v in result]
        return asyncio.run(collect())
    if inspect.iscoroutine(result):
        got = asyncio.run(result)
        return _drain(got)
    if result is None:
        return ()
    if isinstance(result, (Request, Mapping)) or (dataclasses.is_dataclass(result) and not isinstance(result, type)):
        return (result,)  # one value returned, not yielded
    return result  # type: ignore[no-any-return]


def run_page_hook(spider: Spider, hook: str, page: Page, max_items: int, max_bytes: int,
                  kwargs: Mapping[str, Any] | None = None) -> HookResult:
    """``spider.<hook>(page, **kwargs)`` (``parse``, a request's callback, ``on_error`` or an
    errback), then ``check_item`` on each item. Items past ``max_items`` or ``max_bytes`` (their
    JSON) are counted ``items_capped`` and ``items_capped:<the setting>``; a yielded value that
    is neither an item nor a ``Request`` is a ``spider_error`` naming its type; a callback the
    spider does not have is ``spider_error:no_callback``."""
    out = HookResult()
    fn: Callable[..., Any] | None = getattr(spider, hook, None) if not hook.startswith("_") else None
    if fn is None or not callable(fn):
        out.counts["spider_error"] += 1
        out.counts["spider_error:no_callback"] += 1
        log.error("spider %s has no method %r (the callback of %s)", type(spider).__qualname__, hook, page.url)
        return out
    raw_items: list[dict[str, Any]] = []
    try:
        for value in _drain(fn(page, **kwargs) if kwargs else fn(page)):
            if isinstance(value, Request):
                if value.plain:
                    out.links.append(value.url)
                else:
                    out.requests.append(value)
            elif (item := as_item(value)) is not None:
                raw_items.append(item)
            else:
                out.counts["spider_error"] += 1
                out.counts[f"spider_error:{hook}"] += 1
                if not getattr(type(value), "crawler_logged", False):
                    log.error("spider %s: %s yielded a %s on %s; yield a dict or dataclass (an item) or "
                              "a Request (page.follow(url, ...))", type(spider).__qualname__, hook,
                              type(value).__name__, page.url)
    except Exception:
        # What it yielded before raising is dropped too: half a page's items would look complete.
        spider_error(out.counts, spider, hook, page.url)
        return HookResult(links=[], counts=out.counts)
    checking = overrides(spider, "check_item")
    size = 0
    for item in raw_items:
        if checking:
            try:
                checked = spider.check_item(dict(item), page)
            except Exception:
                spider_error(out.counts, spider, "check_item", page.url)
                out.counts["items_dropped"] += 1
                continue
            if checked is None:
                out.counts["items_dropped"] += 1
                continue
            fixed = as_item(checked)
            if fixed is None:
                out.counts["spider_error"] += 1
                out.counts["spider_error:check_item"] += 1
                out.counts["items_dropped"] += 1
                continue
            out.counts["items_fixed"] += fixed != item
            item = fixed
        encoded = json_item(item)
        if encoded is None:
            out.counts["spider_error"] += 1
            out.counts["spider_error:item_not_json"] += 1
            log.error("spider %s: an item from %s cannot be stored as JSON", type(spider).__qualname__, page.url)
            continue
        if len(out.items) >= max_items or size + len(encoded) > max_bytes:
            # Which cap, so the crawl's summary can name the setting to raise.
            out.counts["items_capped"] += 1
            out.counts[f"items_capped:{CAP_COUNT if len(out.items) >= max_items else CAP_BYTES}"] += 1
            continue
        size += len(encoded)
        out.items.append(json.loads(encoded))
    return out


def request_spec(req: Request, max_bytes: int, counts: Counter[str], spider: Spider, url: str) -> str | None:
    """A yielded request's spec, or None (counted, logged) when it cannot travel: headers that
    cannot be sent (``spider_error:request_bad_header``, see ``bad_header``), not JSON-able or
    not UTF-8 (a lone surrogate: ``spider_error:request_not_json``) or bigger than
    ``max_bytes`` (``max_request_bytes``: ``spider_error:request_too_large``). Each costs that
    request only."""
    if req.headers and (why := bad_header(req.headers)) is not None:
        counts["spider_error"] += 1
        counts["spider_error:request_bad_header"] += 1
        log.error("spider %s: a request for %s from %s cannot be sent: %s",
                  type(spider).__qualname__, req.url, url, why)
        return None
    try:
        spec = to_spec(req)
        # The spec goes to Redis as UTF-8: a lone surrogate (from bytes decoded with
        # surrogateescape, say) would fail there, and with it the whole parse, again and again.
        size = len(spec) if spec.isascii() else len(spec.encode())
    except (TypeError, ValueError) as exc:  # UnicodeEncodeError is a ValueError
        counts["spider_error"] += 1
        counts["spider_error:request_not_json"] += 1
        log.error("spider %s: a request for %s from %s cannot be kept (cb_kwargs, meta and headers must be JSON "
                  "text): %s", type(spider).__qualname__, req.url, url, exc)
        return None
    if size > max_bytes:
        counts["spider_error"] += 1
        counts["spider_error:request_too_large"] += 1
        log.error("spider %s: a request for %s from %s is %d bytes, over max_request_bytes (%d)",
                  type(spider).__qualname__, req.url, url, size, max_bytes)
        return None
    return spec


def as_item(value: Any) -> dict[str, Any] | None:
    """A yielded value as an item dict (a Mapping with string keys, or a dataclass instance); None
    for anything else."""
    if isinstance(value, Mapping):
        return {str(k): v for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return None


def _json_default(value: Any) -> Any:
    """A value JSON has no form for, as Scrapy's feed exports write it (``ScrapyJSONEncoder``):
    a set as a list, a date, time or datetime in ISO 8601, a Decimal as its text, a nested item
    (dataclass, or a mapping such as ``scrapy.Item``) as a dict; anything else as its text."""
    if isinstance(value, (set, frozenset)):
        return list(value)
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, Mapping):
        return dict(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return str(value)


def dumps_item(item: dict[str, Any]) -> str:
    """The item as the JSON text the crawler stores, for both spider APIs and after the item
    pipelines alike (see ``_json_default``). ValueError or TypeError if it holds something that
    is not data (a circular structure, NaN)."""
    return json.dumps(item, ensure_ascii=False, default=_json_default, allow_nan=False)


def json_item(item: dict[str, Any]) -> str | None:
    """The item as JSON (``dumps_item``), or None if it holds something that is not data (a
    circular structure, NaN) or text that is not UTF-8 (a lone surrogate, which the store could
    not write: the job would retry it forever)."""
    try:
        encoded = dumps_item(item)
        if not encoded.isascii():
            encoded.encode()
    except (ValueError, TypeError):  # UnicodeEncodeError is a ValueError
        return None
    return encoded


def allowed(spider: Spider, url: str, counts: Counter[str]) -> bool:
    """``spider.allow(url)``; a hook that raises refuses the link (counted ``spider_error``): when
    the user's scope code fails, crawling less is the safe side."""
    try:
        return bool(spider.allow(url))
    except Exception:
        spider_error(counts, spider, "allow", url)
        return False


def render_wish(spider: Spider, url: str, counts: Counter[str]) -> bool | str | None:
    """``spider.render(url)``; a hook that raises has no wish (counted ``spider_error``)."""
    try:
        wish = spider.render(url)
    except Exception:
        spider_error(counts, spider, "render", url)
        return None
    return wish if isinstance(wish, (bool, str)) or wish is None else bool(wish)
