"""The four Celery tasks: thin glue that decodes a message, calls ``crawler.stages`` and
routes what comes back to the queue of the shard that owns it."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from celery import Task
from redis import exceptions as redis_errors

from crawler import jobs, stages
from crawler.celeryapp import beat
from crawler.celeryapp.app import app
from crawler.celeryapp.config import brokers, redis_url
from crawler.celeryapp.publish import Message, Publisher
from crawler.config.brokers import broker_of_queue
from crawler.config.secretbox import NoSessionKey
from crawler.config.settings import Settings
from crawler.control import periodic as cycles
from crawler.frontier import liveshards
from crawler.frontier.sharding import RENDER_QUEUE, SHARED_QUEUE, queue_name
from crawler.spiders.loader import SpiderUnavailable
from crawler.stages.messages import FetchedPage, groups_from_json, groups_to_json, pages_from_json, pages_to_json
from crawler.state import joblog, queues
from crawler.state.conn import connect
from crawler.state.jobconf import Job
from crawler.store import StoreRefused, StoreUnavailable

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    BaseTask = Task[Any, Any]  # celery-types makes Task generic; Celery's own class is not subscriptable
else:
    BaseTask = Task

_ctx: stages.Context | None = None
_ctx_pid = 0
_broker: Brokers | None = None
_broker_key: tuple[object, ...] = ()
_BROKER_ENV = ("CRAWLER_REDIS_URL", "CRAWLER_BROKER_URL", "CRAWLER_SENTINEL_MASTER")
_publisher = Publisher(app.conf.task_time_limit, app.conf.task_soft_time_limit)


def context(node: str | None = None) -> stages.Context:
    """This process's Context, rebuilt after a fork."""
    global _ctx, _ctx_pid
    if _ctx is None or _ctx_pid != os.getpid():
        _ctx = stages.Context.default(connect(redis_url()))
        _ctx_pid = os.getpid()
    # Named by the first task that knows the worker's name, whatever built it (a beat tick or a
    # redelivery check knows none): its pages and its node's counts go under that name.
    if node and _ctx.node != node:
        _ctx.node = node
    return _ctx


class CrawlTask(BaseTask):
    """Counts redeliveries of a message and drops it after ``max_redeliveries`` (counted as
    ``poison``): with reject_on_worker_lost, a message that kills its worker would otherwise
    come back for ever."""

    acks_late = True
    # Redis unreachable or loading (a restart): try again later instead of dropping the work.
    autoretry_for = (redis_errors.ConnectionError, redis_errors.TimeoutError)
    retry_backoff = 1
    retry_backoff_max = 30
    retry_jitter = True
    max_retries = 20

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        job_id = args[0] if args else kwargs.get("job_id")
        # What the task logs at WARNING and above goes to its job's central log too.
        token = joblog.current_job.set(job_id if isinstance(job_id, str) else None)
        try:
            return self._run(*args, **kwargs)
        finally:
            joblog.current_job.reset(token)

    def _run(self, *args: Any, **kwargs: Any) -> Any:
        info = self.request.delivery_info or {}
        if info.get("redelivered") and self.request.id:
            r = context().redis
            n = jobs.count_delivery(r, self.request.id)
            if n > Settings.from_env().max_redeliveries:
                job_id = args[0] if args else kwargs.get("job_id", "")
                log.error("dropping task %s %s after %d redeliveries", self.name, self.request.id, n)
                if job_id:
                    jobs.count(r, job_id, poison=1)
                return None
        return super().__call__(*args, **kwargs)

    def on_failure(self, exc: Exception, task_id: str, args: Any, kwargs: Any, einfo: Any) -> None:
        """A stage that raised is a named, counted failure of its job. Its message is acked, so
        it cannot loop; the URLs it held come back when their leases expire."""
        job_id = args[0] if args else kwargs.get("job_id")
        if not isinstance(job_id, str):
            return
        try:
            r = context().redis
            if jobs.exists(r, job_id):
                jobs.count(r, job_id, **{f"task_failed:{self.name}": 1})
        except Exception:  # counting must never turn one failure into two
            log.exception("could not count the failure of %s", task_id)


class Brokers:
    """This process's clients of the brokers and where each message goes: ``shard-N`` to its
    shard's broker, ``shared`` to this process's own (the one its worker consumes), any other
    queue to the first (``crawler.config.brokers``)."""

    def __init__(self, own_url: str) -> None:
        every = brokers()
        # Clients of their own, even of the crawler's Redis: the state's belongs to the tasks' thread.
        self.clients = queues.connect_all(every)
        self.own = next((i for i, b in enumerate(every) if b.url == own_url), 0)

    def send(self, messages: Sequence[Message]) -> None:
        if len(self.clients) == 1:
            Publisher.send(self.clients[0], messages)
            return
        groups: dict[int, list[Message]] = {}
        for m in messages:
            groups.setdefault(broker_of_queue(m.queue, len(self.clients), self.own), []).append(m)
        for i, group in groups.items():
            Publisher.send(self.clients[i], group)


def broker() -> Brokers:
    """This process's brokers, rebuilt after a fork or a change of the environment naming them;
    shared by the tasks and the dispatcher thread (redis-py's pool is thread-safe)."""
    global _broker, _broker_key
    key = (os.getpid(), *(os.environ.get(v, "") for v in _BROKER_ENV))
    if _broker is None or _broker_key != key:
        _broker, _broker_key = Brokers(app.conf.broker_url), key
    return _broker


def _message(task: Task[Any, Any], queue: str, args: tuple[Any, ...], kwargs: dict[str, Any] | None = None,
             sender: Task[Any, Any] | None = None) -> Message:
    """A message for ``task``; ``sender``: the task sending it (its child in Flower), if any."""
    # argsrepr: what logs and Flower show of the message, not every page in it.
    parent = None
    if sender is not None and sender.request.id:
        parent = (sender.request.id, sender.request.root_id or sender.request.id)
    items = f", {len(args[-1])} items" if isinstance(args[-1], list) else ""
    return _publisher.message(task.name, queue, args, kwargs, argsrepr=f"({args[0]!r}{items})", parent=parent)


def _publish(*messages: Message) -> None:
    broker().send(messages)


def send(task: Task[Any, Any], shard: int, *args: Any) -> None:
    """Send to the queue of ``shard`` as it is (callers route: ``routed``)."""
    _publish(_message(task, queue_name(shard), args))


def send_shared(task: Task[Any, Any], *args: Any) -> None:
    """Send to the queue every shard worker consumes (parse and store: no host locality)."""
    _publish(_message(task, SHARED_QUEUE, args))


def routed(ctx: stages.Context, job: Job, shard: int) -> int:
    """``shard``, or a live stand-in while it is down (its hosts are taken over)."""
    return liveshards.route(ctx.redis, shard, job.settings.shards)


def _pages_message(task: Task[Any, Any], job_id: str,
                   pages: list[dict[str, Any]]) -> tuple[stages.Context, Job, list[FetchedPage]] | None:
    """The context, the job and the pages of a parse or store message; None for a message
    this worker cannot read (counted and logged by ``read_message``)."""
    ctx = context(task.request.hostname)
    job = jobs.load(ctx.redis, job_id)
    fetched = stages.read_message(ctx, task.name, job_id, pages_from_json, pages)
    return None if fetched is None else (ctx, job, fetched)


@app.task(name="crawler.fetch", base=CrawlTask, bind=True)
def fetch_task(self: Task[Any, Any], job_id: str, shard: int, token: str, entries: list[str]) -> None:
    ctx = context(self.request.hostname)
    job = jobs.load(ctx.redis, job_id)
    try:
        pages = stages.fetch_stage(ctx, job, token, entries)
    except (StoreRefused, SpiderUnavailable, NoSessionKey) as exc:
        stages.refuse(ctx, job, exc)
        return
    # Pages a browser is to render go to the render queue; the rest straight on to parse.
    to_render = [p for p in pages if stages.render_wanted(p)]
    rest = [p for p in pages if not stages.render_wanted(p)]
    out = []
    if to_render:
        out.append(_message(render_task, RENDER_QUEUE, (job_id, shard, token, pages_to_json(to_render)), sender=self))
    if rest:
        out.append(_message(parse_task, SHARED_QUEUE, (job_id, shard, token, pages_to_json(rest)), sender=self))
    _publish(*out)


@app.task(name="crawler.render", base=CrawlTask, bind=True)
def render_task(self: Task[Any, Any], job_id: str, shard: int, token: str, pages: list[dict[str, Any]]) -> None:
    """Served by workers started with ``-Q render`` (each with a browser)."""
    got = _pages_message(self, job_id, pages)
    if got is None:
        return
    ctx, job, fetched = got
    rendered = stages.render_stage(ctx, job, token, fetched)
    _publish(_message(parse_task, SHARED_QUEUE, (job_id, shard, token, pages_to_json(rendered)),
                      {"links_as": stages.RENDERED}, sender=self))


@app.task(name="crawler.parse", base=CrawlTask, bind=True)
def parse_task(self: Task[Any, Any], job_id: str, shard: int, token: str, pages: list[dict[str, Any]],
               links_as: str = "") -> None:
    got = _pages_message(self, job_id, pages)
    if got is None:
        return
    ctx, job, fetched = got
    try:
        parsed, batches = stages.parse_stage(ctx, job, token, fetched, links_as)
    except SpiderUnavailable as exc:
        stages.refuse(ctx, job, exc)
        return
    # Batches stay keyed by the links' home shard, so their tokens survive a takeover (a
    # redelivered parse sends the same tokens); the dedup task may run anywhere, and admission
    # places each host on the shard serving it now.
    out = [_message(dedup_task, queue_name(routed(ctx, job, target)),
                    (job_id, stages.link_token(token + links_as, target), groups_to_json(links)), sender=self)
           for target, links in batches.items()]
    if parsed:
        out.append(_message(store_task, SHARED_QUEUE, (job_id, shard, token, pages_to_json(parsed)), sender=self))
    _publish(*out)


@app.task(name="crawler.dedup", base=CrawlTask, bind=True)
def dedup_task(self: Task[Any, Any], job_id: str, token: str, links: list[Any]) -> None:
    ctx = context(self.request.hostname)
    groups = stages.read_message(ctx, self.name, job_id, groups_from_json, links)
    if groups is not None:
        stages.dedup_stage(ctx, jobs.load(ctx.redis, job_id), token, groups)


@app.task(name="crawler.refill", base=CrawlTask, bind=True)
def refill_task(self: Task[Any, Any], job_id: str) -> None:
    """Sent by a dispatcher while the job has URLs in its store's frontier table."""
    ctx = context(self.request.hostname)
    try:
        job = jobs.load(ctx.redis, job_id)
        written, back = stages.refill_stage(ctx, job)
        if written or back:
            log.info("job %s: %d URLs to the store, %d back to their hosts' queues", job_id, written, back)
    except KeyError:
        return  # the job is gone
    except StoreUnavailable as exc:
        log.warning("job %s: refill waits for the store (%s)", job_id, exc)
    finally:
        ctx.frontier.end_refill(job_id)


@app.task(name="crawler.store", base=CrawlTask, bind=True)
def store_task(self: Task[Any, Any], job_id: str, shard: int, token: str, pages: list[dict[str, Any]]) -> None:
    got = _pages_message(self, job_id, pages)
    if got is None:
        return
    ctx, job, fetched = got
    try:
        stages.store_stage(ctx, job, token, fetched, retried=bool(self.request.retries))
    except (StoreRefused, SpiderUnavailable) as exc:  # the store, or the job's item pipelines
        stages.refuse(ctx, job, exc)
    except StoreUnavailable as exc:
        # The store is down: this message comes back after a backoff (the worker goes on with
        # other work meanwhile), its pages' leases renewed until then.
        wait = stages.hold_for_retry(ctx, job, token, fetched, exc, self.request.retries)
        if wait is None:
            raise
        log.warning("job %s: store unavailable (%s); %d pages wait %.1fs", job_id, exc, len(pages), wait)
        raise self.retry(exc=exc, countdown=wait, max_retries=None, queue=SHARED_QUEUE,
                         routing_key=SHARED_QUEUE) from exc


@app.task(name="crawler.cycle_tick", ignore_result=True)
def cycle_tick() -> list[tuple[str, int]]:
    """Sent by the beat (``beat_schedule.py``): start the cycles that are due."""
    ctx = context()
    beat.count_tick(ctx.redis)
    return cycles.tick(ctx.redis, ctx.page_store)
