"""Item pipelines: an ordered list of classes every item passes through where it is stored.

A pipeline class may define ``open_spider(spider)``, ``process_item(item, spider)`` (return the
item, changed or not, or raise ``DropItem(reason)``) and ``close_spider(spider)``, all optional
but ``process_item``; a method may be a coroutine function. The list is the spider's own
``pipelines`` (classes, or ``"module:Class"`` / ``"path/file.py:Class"`` strings), then the job's
``item_pipelines`` setting (strings only). Strings are found as spiders are
(``crawler.spiders.loader``): installed, or under the worker's ``spider_paths``; the submitter only
looks for them, never imports them.

This module runs the user's code and keeps one opened set per job in each process
(``OpenPipelines``); when items go through them, and how a redelivered store task avoids sending
an item twice, is the store stage's business (``crawler.stages.store``).
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import logging
import re
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from crawler.spiders import loader, scrapy_settings
from crawler.spiders.base import Spider
from crawler.spiders.run import as_item, json_item, spider_error
from crawler.spiders.source import bound_names

log = logging.getLogger(__name__)

_REASON = re.compile(r"[^a-z0-9_]+")


class DropItem(Exception):
    """Raised by ``process_item`` to drop an item: counted ``items_dropped`` and
    ``items_dropped:<reason>`` (the message, shortened to a counter name), never stored."""


class PipelineUnavailable(loader.SpiderUnavailable):
    """A pipeline of the job cannot be loaded here (bad reference, not under ``spider_paths``,
    no such class, it raised on import or construction): the job is stopped with the reason, as
    for a spider, rather than store items its user meant to go through it."""


def drop_reason(exc: BaseException) -> str:
    """A ``DropItem``'s message as a counter suffix: lower case, ``[a-z0-9_]``, 40 at most."""
    reason = _REASON.sub("_", str(exc).strip().lower()).strip("_")[:40].strip("_")
    return reason or "dropped"


def references(spider: Spider | None, job_refs: Sequence[str]) -> list[type | str]:
    """The job's pipelines in order: the spider class's own ``pipelines``, then ``job_refs``."""
    own = getattr(type(spider), "pipelines", ()) if spider is not None else ()
    return [*(own or ()), *job_refs]


def check(refs: Sequence[str], paths: Sequence[str], spider: str = "") -> None:
    """For a submitter: each reference (the job's ``refs``, then the string ones the ``spider``'s
    source lists: its literal ``pipelines``, a Scrapy spider's ``ITEM_PIPELINES``) names a file or
    module this process may load that binds that name, found by reading directories and the
    source with ``ast``, never running it; PipelineUnavailable naming the first that does not."""
    for ref in [*refs, *_spider_refs(spider, paths)]:
        found = _found(ref, paths)
        if found.file is None or found.root is None:
            continue  # an installed module may take the class from elsewhere: its worker tells
        if found.name not in bound_names(_source(found, f"item pipeline {ref[:200]!r}").body):
            raise PipelineUnavailable(f"item pipeline {ref[:200]!r}: {str(found.file)!r} has no {found.name!r}")


def _source(found: loader.Found, what: str) -> ast.Module:
    assert found.file is not None
    try:
        return ast.parse(found.file.read_bytes(), filename=str(found.file))
    except (OSError, SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise PipelineUnavailable(f"{what}: cannot read {str(found.file)!r}: {type(exc).__name__}: {exc}") from None


def _assigned(stmt: ast.stmt, name: str) -> ast.expr | None:
    """The value ``stmt`` binds to ``name``, if it is such an assignment."""
    if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in stmt.targets):
        return stmt.value
    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.target.id == name:
        return stmt.value
    return None


def _spider_refs(spider: str, paths: Sequence[str]) -> list[str]:
    """The pipelines the spider's class names as strings in its source: its own literal
    ``pipelines`` (the strings in it), or a Scrapy spider's ``custom_settings["ITEM_PIPELINES"]``."""
    if not spider:
        return []
    try:
        found = loader.find(spider, paths)
    except loader.SpiderUnavailable:
        return []  # the spider's own check says why
    if found.file is None:
        return []
    tree = _source(found, f"spider {found.target!r}")
    try:
        scrapy = scrapy_settings.from_source(tree, found.name)
    except scrapy_settings.ScrapyUnsupported:
        return []  # refused by the spider's own check
    if scrapy is not None:
        try:
            return scrapy_settings.pipelines_of(scrapy.get("custom_settings"))
        except ValueError as exc:
            raise PipelineUnavailable(f"spider {found.target!r}: ITEM_PIPELINES: {exc}") from None
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    todo, seen = [classes[found.name]] if found.name in classes else [], set()
    while todo:  # the class's own, else a base's in the same file
        cls = todo.pop(0)
        if cls.name in seen:
            continue
        seen.add(cls.name)
        for stmt in cls.body:
            value = _assigned(stmt, "pipelines")
            if isinstance(value, (ast.List, ast.Tuple)):
                return [e.value for e in value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        todo += [classes[b.id] for b in cls.bases if isinstance(b, ast.Name) and b.id in classes]
    return []


def _found(ref: str, paths: Sequence[str]) -> loader.Found:
    if ":" not in ref:
        raise PipelineUnavailable(f"item pipeline {ref[:200]!r}: give package.module:Class or path/to/file.py:Class")
    try:
        return loader.find(ref, paths)
    except loader.SpiderUnavailable as exc:
        raise PipelineUnavailable(f"item pipeline {ref[:200]!r}: {exc}") from None


def load(ref: type | str, paths: Sequence[str]) -> type:
    """The pipeline class ``ref`` names (a class is taken as it is: it came with the spider's
    own code). PipelineUnavailable if it cannot be loaded here."""
    if isinstance(ref, type):
        cls: Any = ref
    elif isinstance(ref, str):
        found = _found(ref, paths)
        try:
            module = loader.import_found(found)
        except loader.SpiderUnavailable as exc:
            raise PipelineUnavailable(f"item pipeline {ref[:200]!r}: {exc}") from None
        cls = getattr(module, found.name, None)
    else:
        raise PipelineUnavailable(f"item pipeline {ref!r}: give a class or its 'module:Class', "
                                  f"not a {type(ref).__name__}")
    if not isinstance(cls, type) or not callable(getattr(cls, "process_item", None)):
        raise PipelineUnavailable(f"item pipeline {getattr(ref, '__qualname__', ref)!r}: not a class with a "
                                  "process_item(item, spider) method")
    return cls


def _call(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``; a coroutine it returns is run to its end here (the stages are synchronous)."""
    got = fn(*args)
    if inspect.isawaitable(got):
        return asyncio.run(_wait(got))
    return got


async def _wait(awaitable: Any) -> Any:
    return await awaitable


@dataclass
class Outcome:
    """One item after the pipelines: the item to store (None: dropped or failed) and counters."""

    item: dict[str, Any] | None
    counts: Counter[str] = field(default_factory=Counter)


class Pipelines:
    """One job's pipelines, built and opened in this process. ``open_spider`` runs on the first
    item (lazily: a worker that stores none of the job's items never opens them), and again on a
    later item if it raised; ``close`` calls ``close_spider`` once for each pipeline opened."""

    def __init__(self, spider: Spider, classes: Sequence[type]) -> None:
        self.spider = spider
        self.classes = list(classes)
        self.instances: list[Any] = []
        self.opened = False
        self.closed = False
        self.broken: PipelineUnavailable | None = None
        self._lock = threading.Lock()  # a threads pool may store two batches of a job at once

    def __bool__(self) -> bool:
        return bool(self.classes)

    def _open(self, counts: Counter[str]) -> bool:
        """Build and open the pipelines: False (counted) if an ``open_spider`` raised, to be
        tried again; PipelineUnavailable, kept and raised again on every later item, if one cannot
        be built: its job stops, with the reason, once."""
        if self.opened:
            return True
        if self.broken is not None:
            raise self.broken.with_traceback(None)  # the same reason; not a traceback grown per item
        instances = []
        for cls in self.classes:
            try:
                instances.append(cls())
            except PipelineUnavailable as exc:
                self.broken = exc
                raise
            except Exception as exc:
                log.exception("item pipeline %s cannot be built", cls.__qualname__)
                self.broken = PipelineUnavailable(f"item pipeline {cls.__qualname__}: constructor raised "
                                                  f"{type(exc).__name__}: {exc}")
                raise self.broken from exc
        opened: list[Any] = []
        for p in instances:
            opener = getattr(p, "open_spider", None)
            try:
                if opener is not None:
                    _call(opener, self.spider)
            except PipelineUnavailable as exc:  # built lazily, as a Scrapy pipeline is
                self.broken = exc
                self._close_each(opened)
                raise
            except Exception:
                spider_error(counts, self.spider, "open_spider", type(p).__qualname__)
                # Close those already opened: the next try opens them all again.
                self._close_each(opened)
                return False
            opened.append(p)
        self.instances, self.opened = instances, True
        return True

    def process(self, item: dict[str, Any], url: str) -> Outcome:
        """``item`` (from the page ``url``) through every pipeline in order. A ``DropItem`` is
        counted ``items_dropped`` and ``items_dropped:<reason>``; a pipeline that raises anything
        else, or returns what is not an item, costs the item (``spider_error`` and
        ``spider_error:process_item``), never the page. PipelineUnavailable if a pipeline cannot
        be built (see ``_open``)."""
        out = Outcome(None)
        with self._lock:
            if self.closed or not self._open(out.counts):
                out.counts["items_dropped"] += 1
                out.counts["items_dropped:pipeline_unavailable"] += 1
                return out
            current: dict[str, Any] = item
            for p in self.instances:
                name = type(p).__qualname__
                try:
                    got = _call(p.process_item, current, self.spider)
                except DropItem as exc:
                    out.counts["items_dropped"] += 1
                    out.counts[f"items_dropped:{drop_reason(exc)}"] += 1
                    log.debug("item pipeline %s dropped an item of %s: %s", name, url, exc)
                    return out
                except Exception:
                    spider_error(out.counts, self.spider, "process_item", url)
                    return out
                fixed = as_item(got)
                if fixed is None or json_item(fixed) is None:
                    out.counts["spider_error"] += 1
                    out.counts["spider_error:process_item"] += 1
                    log.error("item pipeline %s returned a %s for an item of %s; return the item (a dict or "
                              "dataclass) or raise DropItem", name, type(got).__name__, url)
                    return out
                current = fixed
        out.item = current
        return out

    def close(self) -> None:
        """``close_spider`` on each opened pipeline (one that raises is logged; the rest still
        close). Idempotent."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            if self.opened:
                self._close_each(self.instances)

    def _close_each(self, instances: Sequence[Any]) -> None:
        for p in instances:
            closer = getattr(p, "close_spider", None)
            if closer is None:
                continue
            try:
                _call(closer, self.spider)
            except Exception:
                log.exception("item pipeline %s: close_spider raised", type(p).__qualname__)


class OpenPipelines:
    """Each process's pipelines, one set per job, kept until the job ends (``close``) or the
    process stops (``close_all``); past ``size`` jobs the one used least recently is closed."""

    def __init__(self, size: int = 64) -> None:
        self.size = size
        self._sets: OrderedDict[str, Pipelines | PipelineUnavailable] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, job_id: str, spider: Spider | None, job_refs: Sequence[str],
            paths: Sequence[str]) -> Pipelines | None:
        """The job's pipelines (None if it has none), built once; PipelineUnavailable if one
        cannot be loaded here."""
        refs = references(spider, job_refs)
        if not refs:
            return None
        evicted: list[Pipelines | PipelineUnavailable] = []
        with self._lock:
            got = self._sets.get(job_id)
            if got is None:
                try:
                    got = Pipelines(spider or Spider(), [load(ref, paths) for ref in refs])
                except PipelineUnavailable as exc:
                    got = exc
                self._sets[job_id] = got
                while len(self._sets) > self.size:
                    evicted.append(self._sets.popitem(last=False)[1])
            self._sets.move_to_end(job_id)
        for old in evicted:
            _shut(old)
        if isinstance(got, PipelineUnavailable):
            raise got
        return got

    def jobs(self) -> list[str]:
        """The jobs whose pipelines are open here."""
        with self._lock:
            return [job for job, s in self._sets.items() if isinstance(s, Pipelines) and s.opened]

    def close(self, job_id: str) -> None:
        """The job ended (or this process is done with it): close its pipelines, if any."""
        with self._lock:
            got = self._sets.pop(job_id, None)
        if got is not None:
            _shut(got)

    def close_all(self) -> None:
        with self._lock:
            sets = list(self._sets.values())
            self._sets.clear()
        for s in sets:
            _shut(s)


def _shut(s: Pipelines | PipelineUnavailable) -> None:
    if isinstance(s, Pipelines):
        s.close()
