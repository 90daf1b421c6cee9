"""What a Scrapy spider's settings become in a job, decided without importing Scrapy or the
spider: the submitter reads ``custom_settings`` and a few class attributes with ``ast``
(``crawler.spiders.loader``) and calls ``job_changes``; a worker that imports the spider checks
the same on the class (``crawler.spiders.scrapy_compat``).

Every Scrapy setting a spider may carry is either mapped onto a job setting (``MAPPED``), honoured
by the adapter itself (``ADAPTER``), accepted because it changes only Scrapy's own logging or
console (``NO_EFFECT``), or refused with a one-line message naming it: never a silent difference.
A setting that is not Scrapy's (``scrapy_names``) is the spider's own, for its own code and its
item pipelines (``crawler.settings`` in ``from_crawler``): accepted as it is.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping
from typing import Any

from crawler.errors import ConfigError
from crawler.spiders import scrapy_names
from crawler.spiders.source import assigned


class ScrapyUnsupported(ConfigError):
    """A Scrapy spider uses something the crawler cannot honour: one line naming it."""


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"not a number: {value!r}")
    return float(value)


def _whole(value: Any) -> int:
    number = _number(value)
    if number != int(number):
        raise ValueError(f"not a whole number: {value!r}")
    return int(number)


def _flag(value: Any) -> bool:
    # Scrapy's getbool: True/False, 1/0 and their strings.
    if isinstance(value, bool):
        return value
    if value in (0, 1, "0", "1"):
        return bool(int(value))
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise ValueError(f"not a boolean: {value!r}")


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"not a string: {value!r}")
    return value


def _headers(value: Any) -> list[str]:
    if not isinstance(value, Mapping):
        raise ValueError(f"not a dict: {value!r}")
    return [f"{k}: {v}" for k, v in value.items()]


def _pipelines(value: Any) -> list[str]:
    """``{"pkg.mod.Class": 300}`` as ``["pkg.mod:Class"]`` in Scrapy's order (lowest first); a
    ``None`` order disables the entry, as in Scrapy."""
    if not isinstance(value, Mapping):
        raise ValueError(f"not a dict: {value!r}")
    out = []
    for ref, order in value.items():
        if order is None:
            continue
        if not isinstance(ref, str) or "." not in ref:
            raise ValueError(f"give each pipeline as 'package.module.Class', not {ref!r}")
        module, _, name = ref.rpartition(".")
        out.append((_number(order), f"{module}:{name}"))
    return [ref for _, ref in sorted(out, key=lambda pair: pair[0])]


# Scrapy setting -> (job setting, conversion).
MAPPED: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "DOWNLOAD_DELAY": ("delay", _number),
    "CONCURRENT_REQUESTS_PER_DOMAIN": ("per_host", _whole),
    "CONCURRENT_REQUESTS_PER_IP": ("per_ip", _whole),
    "ROBOTSTXT_OBEY": ("obey_robots", _flag),
    "USER_AGENT": ("user_agent", _text),
    "DEPTH_LIMIT": ("max_depth", _whole),
    "CLOSESPIDER_PAGECOUNT": ("max_pages", _whole),
    "COOKIES_ENABLED": ("cookies", _flag),
    "RETRY_TIMES": ("max_attempts", lambda v: _whole(v) + 1),
    "DOWNLOAD_TIMEOUT": ("request_deadline", _number),
    "DOWNLOAD_MAXSIZE": ("max_body", _whole),
    "REDIRECT_MAX_TIMES": ("max_redirects", _whole),
    "AUTOTHROTTLE_ENABLED": ("autothrottle", _flag),
    "AUTOTHROTTLE_MAX_DELAY": ("max_delay", _number),
    "DEFAULT_REQUEST_HEADERS": ("session_headers", _headers),
    # Off means one attempt; on leaves the job's max_attempts (applied after RETRY_TIMES).
    "RETRY_ENABLED": ("max_attempts", lambda v: None if _flag(v) else 1),
}

# Honoured by the adapter on the worker (it reads them from the class), not by a job setting.
ADAPTER = frozenset({"ITEM_PIPELINES", "HTTPERROR_ALLOWED_CODES", "HTTPERROR_ALLOW_ALL"})

# Settings that change only Scrapy's own logging, stats or telnet console: nothing to do here.
NO_EFFECT = frozenset({"LOG_ENABLED", "LOG_LEVEL", "LOG_FORMAT", "LOG_DATEFORMAT", "LOG_STDOUT",
                       "LOG_SHORT_NAMES", "LOGSTATS_INTERVAL", "STATS_DUMP", "TELNETCONSOLE_ENABLED",
                       "BOT_NAME", "REQUEST_FINGERPRINTER_IMPLEMENTATION", "FEED_EXPORT_ENCODING"})

# Refused with a reason more useful than "no counterpart".
_WHY = {
    "DOWNLOADER_MIDDLEWARES": "downloader middlewares do not run here",
    "SPIDER_MIDDLEWARES": "spider middlewares do not run here",
    "EXTENSIONS": "Scrapy extensions (and their signals) do not run here",
    "DOWNLOAD_HANDLERS": "the crawler's own HTTP client fetches every page",
    "FEEDS": "items go to the job's store; export them with `crawler export DIR --items`",
    "ITEM_PROCESSOR": "item pipelines run through the crawler's own pipeline runner",
    "SCHEDULER": "the crawler's distributed frontier schedules every request",
    "DUPEFILTER_CLASS": "the crawler's dedup filters requests (method, canonical URL and body)",
}

# Class attributes Scrapy's components read from the spider, and what they become.
ATTRIBUTES: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "download_delay": ("delay", _number),
    "user_agent": ("user_agent", _text),
}
REFUSED_ATTRIBUTES = {
    "http_user": "HTTP auth from spider attributes: use --auth HOST=basic:SECRET_NAME (a secret, not code)",
    "http_pass": "HTTP auth from spider attributes: use --auth HOST=basic:SECRET_NAME (a secret, not code)",
    "rules": "CrawlSpider rules: subclass scrapy.Spider and follow links in callbacks",
    "max_concurrent_requests": "no per-spider request cap here: use CONCURRENT_REQUESTS_PER_DOMAIN",
}
# Methods that need Scrapy's engine, crawler or signals, which do not exist here.
REFUSED_METHODS = {
    "from_crawler": "from_crawler (the crawler, its signals and stats do not exist here)",
    "update_settings": "update_settings (use a literal custom_settings dict)",
    "closed": "closed(reason) (no single end-of-crawl moment on one machine: use an item pipeline's close_spider)",
    "_parse": "_parse (a CrawlSpider-style override of Scrapy's dispatch)",
}
# Base classes refused, by name.
REFUSED_BASES = {
    "CrawlSpider": "CrawlSpider (rules and link extractors) is not supported: subclass scrapy.Spider and follow "
                   "links in callbacks",
    "SitemapSpider": "SitemapSpider is not supported: subclass scrapy.Spider and parse the sitemap "
                     "(selectors work on XML) or run the job with --sitemaps",
    "XMLFeedSpider": "XMLFeedSpider is not supported: subclass scrapy.Spider and iterate the nodes in parse",
    "CSVFeedSpider": "CSVFeedSpider is not supported: subclass scrapy.Spider and read the rows in parse",
    "InitSpider": "InitSpider is not supported: subclass scrapy.Spider",
}


def job_changes(spider: str, custom_settings: Any, attributes: Mapping[str, Any]) -> dict[str, Any]:
    """The job settings a Scrapy spider's ``custom_settings`` and class ``attributes`` ask for;
    ScrapyUnsupported naming the first thing it cannot honour. ``spider`` names the class in the
    message."""
    for attr, why in REFUSED_ATTRIBUTES.items():
        if attr in attributes:
            raise ScrapyUnsupported(f"Scrapy spider {spider}: attribute {attr!r} is not supported: {why}")
    changes: dict[str, Any] = {}
    for attr, (name, convert) in ATTRIBUTES.items():
        if attributes.get(attr) is not None:
            changes[name] = _convert(spider, attr, convert, attributes[attr])
    if custom_settings is None:
        return changes
    if not isinstance(custom_settings, Mapping):
        raise ScrapyUnsupported(f"Scrapy spider {spider}: custom_settings must be a literal dict (the submitter reads "
                                "it without running the spider)")
    for key, value in custom_settings.items():
        if not isinstance(key, str):
            raise ScrapyUnsupported(f"Scrapy spider {spider}: custom_settings key {key!r} is not a setting name")
        if key in MAPPED:
            name, convert = MAPPED[key]
            got = _convert(spider, key, convert, value)
            if got is not None and not (key == "RETRY_TIMES" and custom_settings.get("RETRY_ENABLED") is False):
                changes[name] = got
        elif key in ADAPTER:
            if key == "ITEM_PIPELINES":
                _convert(spider, key, _pipelines, value)
        elif key in NO_EFFECT:
            continue
        elif key in _WHY:
            raise ScrapyUnsupported(f"Scrapy spider {spider}: setting {key} is not supported: {_WHY[key]}")
        elif key in scrapy_names.NAMES:
            raise ScrapyUnsupported(f"Scrapy spider {spider}: setting {key} has no counterpart in the crawler "
                                    "(see docs/scrapy.md for those that do)")
        # Else the spider's own setting (``MONGO_URI``): no Scrapy component reads it, only the
        # user's code, through ``self.settings`` or a pipeline's ``crawler.settings``, as in Scrapy.
    return changes


def pipelines_of(custom_settings: Any) -> list[str]:
    """``ITEM_PIPELINES`` as ``module:Class`` references, in Scrapy's order."""
    if not isinstance(custom_settings, Mapping) or "ITEM_PIPELINES" not in custom_settings:
        return []
    return _pipelines(custom_settings["ITEM_PIPELINES"])


def _convert(spider: str, key: str, convert: Callable[[Any], Any], value: Any) -> Any:
    try:
        return convert(value)
    except (ValueError, TypeError) as exc:
        raise ScrapyUnsupported(f"Scrapy spider {spider}: {key}: {exc}") from None


# -- reading a Scrapy spider from its source (the submitter never imports it) ---------------

_READ_ATTRIBUTES = (*ATTRIBUTES, *REFUSED_ATTRIBUTES, "handle_httpstatus_list", "handle_httpstatus_all")
_NOT_LITERAL = object()


def from_source(tree: ast.Module, name: str) -> dict[str, Any] | None:
    """If class ``name`` of the module ``tree`` is a Scrapy spider (it derives, in this file,
    from ``scrapy.Spider`` however imported), what the submitter needs of it: ``custom_settings``
    and the attributes Scrapy's components read, as literals, and the methods it defines; None
    for any other class. ScrapyUnsupported for a base class or method the crawler refuses, or a
    ``custom_settings`` that is not a literal dict."""
    classes = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.col_offset == 0}
    imported: dict[str, str] = {}  # local name -> the scrapy class it is
    modules: set[str] = set()  # local names of the scrapy package or its modules
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "scrapy":
            imported.update({a.asname or a.name: a.name for a in node.names})
        elif isinstance(node, ast.Import):
            modules.update(a.asname or a.name.split(".")[0] for a in node.names if a.name.split(".")[0] == "scrapy")
    chain: list[ast.ClassDef] = []
    base_name = ""
    todo = [classes[name]] if name in classes else []
    while todo and not base_name:
        cls = todo.pop(0)
        if cls in chain:
            continue
        chain.append(cls)
        for base in cls.bases:
            dotted = _dotted(base)
            if dotted in classes:
                todo.append(classes[dotted])
            elif dotted in imported:
                base_name = imported[dotted]
            elif dotted.split(".")[0] in modules or dotted.split(".")[0] in imported:
                base_name = dotted.rsplit(".", 1)[-1]
    if not base_name or (base_name != "Spider" and base_name not in REFUSED_BASES):
        return None
    if base_name in REFUSED_BASES:
        raise ScrapyUnsupported(f"Scrapy spider {name}: {REFUSED_BASES[base_name]}")
    facts: dict[str, Any] = {"methods": []}
    for cls in chain:
        for stmt in cls.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                facts["methods"].append(stmt.name)
                if stmt.name in REFUSED_METHODS:
                    raise ScrapyUnsupported(f"Scrapy spider {name}: {REFUSED_METHODS[stmt.name]} is not supported")
                continue
            target, value = assigned(stmt)
            if target in ("custom_settings", *_READ_ATTRIBUTES) and target not in facts and value is not None:
                facts[target] = _literal(value)
    if facts.get("custom_settings") is _NOT_LITERAL:
        raise ScrapyUnsupported(f"Scrapy spider {name}: custom_settings must be a literal dict (the submitter reads "
                                "it without running the spider)")
    for attr in _READ_ATTRIBUTES:
        if facts.get(attr) is _NOT_LITERAL:
            if attr in REFUSED_ATTRIBUTES:
                raise ScrapyUnsupported(f"Scrapy spider {name}: attribute {attr!r} is not supported: "
                                        f"{REFUSED_ATTRIBUTES[attr]}")
            raise ScrapyUnsupported(f"Scrapy spider {name}: attribute {attr!r} must be a literal (the submitter reads "
                                    "it without running the spider)")
    return facts


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return f"{inner}.{node.attr}" if inner else ""
    return ""


def _literal(node: ast.expr) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _NOT_LITERAL


def submit_changes(name: str, facts: dict[str, Any]) -> dict[str, Any]:
    """The job settings a Scrapy spider read by ``from_source`` asks for (``job_changes``), with
    Scrapy's defaults where they differ from the crawler's: cookies kept, unless
    ``COOKIES_ENABLED`` is off."""
    attributes = {k: v for k, v in facts.items() if k in _READ_ATTRIBUTES}
    changes = job_changes(name, facts.get("custom_settings"), attributes)
    changes.setdefault("cookies", True)
    return changes
