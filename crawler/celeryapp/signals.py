"""Worker signal handlers: what a Celery worker does at its start, on each heartbeat and at its
end, beyond running tasks. ``install`` connects them (``make_app`` calls it), so a worker has
them before its heartbeat timer starts.

- ``celeryd_after_setup``: with several brokers, a worker reads from its shard queues' one.
- ``celeryd_after_setup``: a worker of any ``shard-N`` queue also consumes the shared queue.
- ``heartbeat_sent`` / ``worker_shutdown``: each Celery heartbeat leaves the node's latest
  figures in Redis (``crawler.state.nodes``); a warm shutdown marks the node gone.
- ``worker_init``: a worker started with ``CRAWLER_PARENT_PID`` dies with that parent
  (``crawler.local.lifeline``).
- ``celeryd_after_setup``: a worker of the ``render`` queue without Chromium stops at once, saying
  what to install, instead of marking every page ``render_unavailable``.
- ``worker_process_shutdown``: a prefork child closes its browser (atexit does not run there).
- ``worker_process_shutdown`` / ``worker_shutdown``: item pipelines still open are closed.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

from celery.signals import (
    celeryd_after_setup,
    heartbeat_sent,
    worker_init,
    worker_process_shutdown,
    worker_shutdown,
)
from redis import Redis

from crawler.celeryapp.config import brokers, redis_url, sentinel_options
from crawler.config.brokers import BrokerError, worker_broker
from crawler.config.settings import Settings
from crawler.frontier.sharding import RENDER_QUEUE, SHARED_QUEUE, shard_of_queue
from crawler.local.lifeline import die_with_parent, parent_from_env, watch_parent
from crawler.render.browser import RenderUnavailable, chromium_path
from crawler.state import joblog
from crawler.state.conn import connect
from crawler.state.nodes import mark_offline, record_heartbeat

# One client per process: a prefork child must not share its parent's sockets.
_clients: dict[int, Redis] = {}


def _client() -> Redis:
    c = _clients.get(os.getpid())
    if c is None:
        c = _clients[os.getpid()] = connect(redis_url())
    return c


def shards_of(app: Any) -> list[int]:
    """The shards whose ``shard-N`` queues this worker consumes."""
    names = list(app.amqp.queues.consume_from or ())
    return sorted({s for s in (shard_of_queue(n) for n in names) if s is not None})


def choose_broker(sender: object = None, instance: Any = None, **_: Any) -> None:
    """With several brokers, a worker reads from the one holding its ``shard-N`` queues
    (``crawler.config.brokers``): set here, after Celery has parsed ``-Q`` and before anything
    connects. Shard queues on different brokers: one line and exit status 2, not a worker that
    waits for ever on queues nobody fills."""
    every = brokers()
    if len(every) == 1:
        return
    try:
        chosen = every[worker_broker(instance.app.amqp.queues.consume_from, every)]
    except BrokerError as exc:
        print(f"crawler: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    conf = instance.app.conf
    options = {k: v for k, v in conf.broker_transport_options.items() if k != "master_name"}
    conf.update(broker_url=chosen.url, broker_transport_options={**options, **sentinel_options(chosen)})


def consume_shared(sender: object = None, instance: Any = None, **_: Any) -> None:
    """A worker of any ``shard-N`` queue also takes parse and store work from the shared queue."""
    queues = instance.app.amqp.queues
    if any(shard_of_queue(name) is not None for name in queues.consume_from):
        queues.select_add(SHARED_QUEUE)


def check_render(sender: object = None, instance: Any = None, **_: Any) -> None:
    """A worker of the render queue needs Chromium: without it, one line and exit status 2."""
    if RENDER_QUEUE not in instance.app.amqp.queues.consume_from:
        return
    try:
        chromium_path(Settings.from_env().chromium)
    except RenderUnavailable as exc:
        print(f"crawler: this worker serves the {RENDER_QUEUE} queue, but {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def close_browser(**_: Any) -> None:
    from crawler.stages.render import close_browser as close

    close()


def close_pipelines(**_: Any) -> None:
    """The process stops: ``close_spider`` on the item pipelines it still has open."""
    from crawler.stages.pipelines import OPEN

    OPEN.close_all()


def on_heartbeat(sender: Any, **_: Any) -> None:
    try:
        app = sender.eventer.app
        record_heartbeat(_client(), sender.eventer.hostname, shards=shards_of(app), interval=float(sender.interval),
                         render=RENDER_QUEUE in list(app.amqp.queues.consume_from or ()))
    except Exception:  # a status record must never disturb the heartbeat itself
        pass


def on_shutdown(sender: Any = None, **_: Any) -> None:
    try:
        if sender is not None and getattr(sender, "hostname", None):
            mark_offline(_client(), sender.hostname)
    except Exception:
        pass


def on_worker_init(**_: Any) -> None:
    """Every worker sends its jobs' warnings and errors to their central logs
    (``crawler.state.joblog``). In a worker started with ``CRAWLER_PARENT_PID``: die with that parent."""
    joblog.install(_client)
    parent = parent_from_env()
    if parent:
        # Armed, the kernel sends SIGTERM the moment the parent dies and the watch only
        # enforces the grace period (a second SIGTERM would interrupt the warm shutdown).
        armed = die_with_parent(signal.SIGTERM) and os.getppid() == parent
        watch_parent(parent, shutdown=(lambda: None) if armed else None)


def install() -> None:
    """Connect every handler above (once per handler: Celery ignores a second connect)."""
    heartbeat_sent.connect(on_heartbeat, weak=False)
    worker_shutdown.connect(on_shutdown, weak=False)
    worker_init.connect(on_worker_init, weak=False)
    celeryd_after_setup.connect(choose_broker, weak=False)
    celeryd_after_setup.connect(consume_shared, weak=False)
    celeryd_after_setup.connect(check_render, weak=False)
    worker_process_shutdown.connect(close_browser, weak=False)
    # A prefork child at worker_process_shutdown; a solo worker (the process itself) at worker_shutdown.
    worker_process_shutdown.connect(close_pipelines, weak=False)
    worker_shutdown.connect(close_pipelines, weak=False)
