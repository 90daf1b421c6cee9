"""The per-process resources the stages share; ``read_message``, how the task glue turns a
message into a stage's input; and ``refuse``, how a stage stops a job whose store this worker
may not use."""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from redis import Redis

from crawler import jobs
from crawler.config.secretbox import NoSessionKey
from crawler.config.settings import Settings
from crawler.dedup import SeenCache, SeenSet, seen_set
from crawler.dedup.neardup import NearDuplicates
from crawler.dedup.variants import QueryVariants
from crawler.fetch import Fetcher
from crawler.frontier import Frontier
from crawler.lru import LRU
from crawler.spiders.base import Spider
from crawler.spiders.loader import SpiderUnavailable, load
from crawler.stages.messages import BadMessage
from crawler.stages.politeness import Politeness
from crawler.state.jobconf import Job
from crawler.store import PageStore, StoreRefused, open_store
from crawler.store.place import place_dir, place_store
from crawler.store.warc import WarcFiles

log = logging.getLogger(__name__)

T = TypeVar("T")


def _node() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass
class Context:
    """Per-process resources, opened once and reused across tasks; built by ``default`` for
    the task glue, or from parts by tests. Those opened per job, store or WARC directory are
    bounded (``job_cache_size``, ``open_stores``): a worker serves job after job for days, and
    the least recently used are closed to make room."""

    redis: Redis
    frontier: Frontier
    politeness: Politeness
    cache: SeenCache  # the per-process cache in front of the seen-sets
    near_dups: NearDuplicates
    opener: Callable[[str], PageStore] = open_store  # opens a store URL already placed
    fetcher: Fetcher | None = None  # None: the process-wide httpx client
    # Where jobs may make this worker write: from its environment, never from a job.
    store_root: str = ""
    store_hosts: tuple[str, ...] = ()
    spider_paths: tuple[str, ...] = ()  # where its spiders may come from, besides entry points
    job_cache_size: int = 256
    open_stores: int = 16
    node: str = field(default_factory=_node)

    def __post_init__(self) -> None:
        self._seen_sets: LRU[str, SeenSet] = LRU(self.job_cache_size)
        self._stores: LRU[str, PageStore] = LRU(self.open_stores, on_evict=lambda _url, s: s.close())
        self._warcs: LRU[str, WarcFiles] = LRU(self.open_stores, on_evict=lambda _dir, w: w.close())
        self._spiders: LRU[str, Spider | SpiderUnavailable] = LRU(self.job_cache_size)
        self.variants = QueryVariants(self.redis)

    @classmethod
    def default(cls, redis: Redis, settings: Settings | None = None, fetcher: Fetcher | None = None) -> Context:
        """The resources of a worker process configured by ``settings`` (default: its
        environment)."""
        s = settings or Settings.from_env()
        return cls(redis, frontier=Frontier(redis), politeness=Politeness(redis, s),
                   cache=SeenCache(s.local_cache_size or 1), near_dups=NearDuplicates(redis), fetcher=fetcher,
                   store_root=s.store_root, store_hosts=tuple(s.store_hosts), spider_paths=tuple(s.spider_paths),
                   job_cache_size=s.job_cache_size, open_stores=s.open_stores)

    def bodies(self, keys: list[str]) -> list[bytes | None]:
        """The fetched bodies under ``keys`` (None for one expired or lost)."""
        return self.frontier.bodies(keys)

    def seen_set(self, job: Job) -> SeenSet:
        """The job's seen-set (the kind its settings name), kept across tasks."""
        seen = self._seen_sets.get(job.id)
        if seen is None:
            seen = seen_set(self.redis, self.frontier, job.id, job.settings)
            self._seen_sets.put(job.id, seen)
        return seen

    def spider(self, job: Job) -> Spider | None:
        """The job's spider (None if it has none), built once per process and job; raises
        SpiderUnavailable when this worker cannot run the spider the job was submitted with."""
        s = job.settings
        if not s.spider:
            return None
        got = self._spiders.get(job.id)
        if got is None:
            try:
                got = load(s.spider, s.spider_version, s.spider_args, self.spider_paths)
            except SpiderUnavailable as exc:
                got = exc
            self._spiders.put(job.id, got)
        if isinstance(got, SpiderUnavailable):
            raise got
        return got

    def page_store(self, url: str) -> PageStore:
        """The store a job names, opened once; StoreNotAllowed (nothing opened or created) if
        this worker's store_root / store_hosts exclude it."""
        s = self._stores.get(url)
        if s is None:
            s = self.opener(place_store(url, self.store_root, self.store_hosts))
            self._stores.put(url, s)
        return s

    def warc(self, directory: str, max_size: int) -> WarcFiles:
        w = self._warcs.get(directory)
        if w is None:
            w = WarcFiles(place_dir(directory, self.store_root), max_size)
            self._warcs.put(directory, w)
        return w

    def check_places(self, job: Job) -> None:
        """StoreNotAllowed if the job's store or WARC directory is not this worker's to use:
        asked before fetching, so no page is fetched that could not be stored."""
        s = job.settings
        if s.store not in self._stores:
            place_store(s.store, self.store_root, self.store_hosts)
        if s.warc and s.warc_dir and s.warc_dir not in self._warcs:
            place_dir(s.warc_dir, self.store_root)

    def close(self) -> None:
        for s in self._stores.clear():
            s.close()
        for w in self._warcs.clear():
            w.close()


def read_message(ctx: Context, task: str, job_id: str, decode: Callable[[Any], T], data: Any) -> T | None:
    """``decode(data)``, or None for a message this worker cannot read (one of another schema
    version, from a worker of another release, or malformed). Such a message is a failure of
    its task like any other (``task_failed:<task>``), also counted as ``bad_message`` and
    logged in one line; the caller drops it rather than retry, since no retry makes it
    readable."""
    try:
        return decode(data)
    except BadMessage as exc:
        log.error("job %s: dropping a %s message: %s", job_id, task, exc)
        if jobs.exists(ctx.redis, job_id):
            jobs.count(ctx.redis, job_id, bad_message=1, **{f"task_failed:{task}": 1})
        return None


def refuse(ctx: Context, job: Job, error: StoreRefused | SpiderUnavailable | NoSessionKey) -> None:
    """The job names a store this worker may not use (or that refuses it), or a spider it cannot
    run, or keeps a session this worker has no key to seal: stop it, counted and with the reason
    for ``status``, rather than fetch pages it cannot store, crawl without the code its user asked
    for, or keep its cookies in Redis in the clear."""
    log.error("job %s: stopped: %s", job.id, error)
    counter = ("spider_unavailable" if isinstance(error, SpiderUnavailable)
               else "session_key_missing" if isinstance(error, NoSessionKey) else "store_not_allowed")
    jobs.count(ctx.redis, job.id, **{counter: 1})
    jobs.stop(ctx.redis, job.id, error=f"{ctx.node}: {error}")
    jobs.forget(job.id)
