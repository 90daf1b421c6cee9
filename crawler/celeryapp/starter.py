"""The worker bootstep that runs the starters (``crawler.stages.starter``) in each worker's main
process: a thread that, every ``INTERVAL`` seconds, feeds the start requests of the jobs whose
lease this process holds or can take."""

from __future__ import annotations

import logging
import threading
from typing import Any

from celery import bootsteps
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from crawler import stages
from crawler.celeryapp.config import redis_url
from crawler.celeryapp.signals import shards_of
from crawler.config.settings import Settings
from crawler.stages.starter import LEASE, Starters
from crawler.state.conn import connect

log = logging.getLogger(__name__)

INTERVAL = 0.5  # well inside LEASE: a round renews the lease of every job it reads for
assert INTERVAL < LEASE / 4


class StarterStep(bootsteps.StartStopStep):
    """Starts the starters' thread in a worker that consumes shard queues (as the dispatcher)."""

    requires = ("celery.worker.components:Pool",)

    def __init__(self, worker: Any, **kwargs: Any) -> None:
        super().__init__(worker, **kwargs)
        self.stopping = threading.Event()
        self.thread: threading.Thread | None = None

    def start(self, worker: Any) -> None:
        if not shards_of(worker.app):
            return
        self.thread = threading.Thread(target=self._run, name="crawler-starter", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        # Resources of its own: the tasks' Context belongs to the thread that runs them.
        # A lease no longer than the worker's URL leases: a dead starter's job moves on as soon
        # as its dead fetches do.
        lease = min(LEASE, max(4 * INTERVAL, Settings.from_env().lease_timeout))
        starters = Starters(stages.Context.default(connect(redis_url())), lease=lease)
        try:
            while not self.stopping.wait(INTERVAL):
                try:
                    starters.tick()
                except (RedisConnectionError, RedisTimeoutError) as exc:  # a failover: next round
                    log.warning("start requests: redis unavailable (%s); retrying", exc)
                except Exception:
                    log.exception("start requests: a round failed")
        finally:
            try:
                starters.close()
            except Exception:
                log.exception("start requests: closing failed")

    def stop(self, worker: Any) -> None:
        self.stopping.set()
        if self.thread is not None:
            self.thread.join(timeout=10)

    def shutdown(self, worker: Any) -> None:
        self.stop(worker)
