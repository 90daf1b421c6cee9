"""A spider's ``start_requests``, consumed a batch at a time.

``start_requests`` may be a generator (or return any iterable) or an async generator; it may
yield ``Request`` objects (ours or Scrapy-shaped, see ``as_request``) or URLs as strings. A thread
of its own reads it, at most ``ahead`` values beyond what was taken: the starter
(``crawler.stages.starter``) takes more only while the job's backlog has room, so a spider may
yield millions, and one that pauses or blocks delays nothing but itself.

A value that is neither a request nor a URL is a counted ``spider_error:start_requests`` and is
skipped; an exception inside the generator is one too, and ends it: the crawl goes on with what it
got. The position (values taken so far, good or bad) is what a worker taking over records and
skips to (``StartRequests(spider, skip=n)``).
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

from crawler.spiders.base import Spider
from crawler.spiders.request import Request, as_request
from crawler.spiders.run import spider_error
from crawler.state import keys

log = logging.getLogger(__name__)

HOOK = "start_requests"


def has_start_requests(spider: type[Spider] | Spider) -> bool:
    """Does the spider define its own ``start_requests``? (The base class's yields its
    ``start_urls``, which a job takes as its seeds instead.)"""
    cls = spider if isinstance(spider, type) else type(spider)
    return getattr(cls, HOOK, None) is not getattr(Spider, HOOK)


class StartRequests:
    """The spider's start requests, read by a thread of their own into a bounded queue (at most
    ``ahead`` values read and not yet taken) and taken from it ``take(n)`` at a time, so a
    generator that pauses (a slow cursor, a queue) or blocks for good never holds up its caller:
    what it has yielded is taken at once. ``consumed``: values taken so far (including ``skip``;
    never those read ahead and not taken, which a worker taking over reads again);
    ``exhausted``: nothing more will come."""

    def __init__(self, spider: Spider, skip: int = 0, ahead: int = 500) -> None:
        self.spider = spider
        self.consumed = skip
        self.exhausted = False
        self.errors: Counter[str] = Counter()
        self._queue: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=max(1, ahead))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, args=(skip,), daemon=True,
                                        name=f"start-requests-{type(spider).__qualname__}")
        self._thread.start()

    # -- the reader thread -------------------------------------------------------------------

    def _read(self, skip: int) -> None:
        """Read the generator into the queue until it ends, raises, or ``close``; then ``END``
        with the errors it counted. A worker taking over: the first ``skip`` values are dropped."""
        counts: Counter[str] = Counter()
        loop: asyncio.AbstractEventLoop | None = None
        gen: Any = None
        try:
            got: Any = self.spider.start_requests()
            if hasattr(got, "__anext__"):
                loop = asyncio.new_event_loop()
                agen: AsyncIterator[Any] = got
                gen = agen

                def step() -> Any:
                    assert loop is not None
                    return loop.run_until_complete(anext(agen))
            else:
                sync: Iterator[Any] = iter(got)
                gen = sync

                def step() -> Any:
                    return next(sync)
        except Exception:
            spider_error(counts, self.spider, HOOK, "start_requests()")
            self._put((_END, counts))
            return
        read = 0
        try:
            while not self._stop.is_set():
                try:
                    value = step()
                except (StopIteration, StopAsyncIteration):
                    break
                except Exception:
                    spider_error(counts, self.spider, HOOK, f"start request #{read + 1}")
                    break
                read += 1
                if read > skip and not self._put((_VALUE, value)):
                    break
        finally:
            try:
                if loop is not None and hasattr(gen, "aclose"):
                    loop.run_until_complete(gen.aclose())
                elif hasattr(gen, "close"):
                    gen.close()
            except Exception:
                log.exception("spider %s: closing start_requests raised", type(self.spider).__qualname__)
            finally:
                if loop is not None:
                    loop.close()
            self._put((_END, counts))

    def _put(self, entry: tuple[str, Any]) -> bool:
        """Queue ``entry``, waiting for room until ``close``; False once closed."""
        while not self._stop.is_set():
            try:
                self._queue.put(entry, timeout=0.2)
                return True
            except queue.Full:
                continue
        return False

    # -- the caller's side -------------------------------------------------------------------

    def take(self, n: int, counts: Counter[str], wait: float = 0.0) -> list[Request]:
        """Up to ``n`` more requests: those read so far, waiting up to ``wait`` seconds for the
        first when none is (fewer than ``n``, even none, while the generator is slow). A string
        is a GET of that URL; anything else that is not a request is counted and skipped (but
        consumed)."""
        out: list[Request] = []
        deadline = time.monotonic() + wait
        timeout = wait
        while len(out) < n and not self.exhausted:
            try:
                kind, value = self._queue.get(timeout=timeout) if timeout > 0 else self._queue.get_nowait()
            except queue.Empty:
                break
            # Then only while values keep coming: a pause ends the batch.
            timeout = min(GAP, deadline - time.monotonic())
            if kind == _END:
                self.errors.update(value)
                self.exhausted = True
                self._stop.set()
                break
            self.consumed += 1
            req = Request(value) if isinstance(value, str) else as_request(value)
            if req is None:
                counts["spider_error"] += 1
                counts[f"spider_error:{HOOK}"] += 1
                log.error("spider %s: start_requests yielded a %s; yield a Request or a URL",
                          type(self.spider).__qualname__, type(value).__name__)
                continue
            out.append(req)
        if self.errors:
            counts.update(self.errors)
            self.errors = Counter()
        return out

    def close(self) -> None:
        """Stop reading: the reader closes the generator (its ``finally`` blocks run) once its
        current step returns; one blocked for good leaves its (daemon) thread parked there."""
        self.exhausted = True
        self._stop.set()


_VALUE, _END = "value", "end"
GAP = 0.01  # seconds without a value that end a batch: the generator has paused


# -- the job's record of its start requests, in Redis ----------------------------------------

#: The pending link batch that holds a job open while its start requests are read: the frontier
#: does not call a job done while any batch is pending (``Frontier.expect``).
TOKEN = "start_requests"
#: Its score: never "overdue" (it has no links for the dispatcher to send again).
NEVER = 2**40


def state(job_id: str) -> str:
    """The job's start-request record: ``consumed`` (values read so far), ``done``."""
    return keys.prefix(job_id) + "starts"


def lease(job_id: str) -> str:
    """Who reads the job's start requests now (a node name, expiring unless renewed)."""
    return keys.prefix(job_id) + "starts:lease"


def hold(pipe: Any, job_id: str, parts: Sequence[str] = ()) -> None:
    """On ``pipe`` (at submit): keep the job open until its start requests are exhausted (in
    each of ``parts``, those of a split frontier)."""
    for space in parts or [job_id]:
        pipe.zadd(keys.pending_links(space), {TOKEN: NEVER})
    pipe.hset(state(job_id), mapping={"consumed": 0, "done": 0})
